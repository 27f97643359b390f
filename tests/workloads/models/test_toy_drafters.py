"""The toy EAGLE-3, DSpark and DFlash 2 trainers: deterministic, and what they save loads as
the pair kind it is meant to be (the bundled checkpoints are these trainers' output)."""

import pytest
import torch
from dflash.model import DFlashDraftModel
from transformers import LlamaForCausalLM

from workloads.decoding import DecodeConfig, decode
from workloads.decoding.kinds import DFLASH, DSPARK, EAGLE3
from workloads.models.pair import load_pair
from workloads.models.pairspec import BUNDLED, TOY_DIR
from workloads.models.tokenizer import build_char_tokenizer
from workloads.models.toy_dflash2 import save_dflash2, train_dflash2
from workloads.models.toy_dspark import save_dspark, train_dspark
from workloads.models.toy_eagle3 import train_eagle3

TOK = build_char_tokenizer()


@pytest.fixture(scope="module")
def verifier():
    return LlamaForCausalLM.from_pretrained(TOY_DIR / "verifier")


@pytest.fixture(scope="module")
def dflash():
    return DFlashDraftModel.from_pretrained(TOY_DIR / "dflash")


def _train(name, verifier, dflash):
    quiet = lambda _: None  # noqa: E731
    if name == "eagle3":
        return train_eagle3(verifier, TOK, seed=3, steps=2, log=quiet)
    trainer = train_dspark if name == "dspark" else train_dflash2
    return trainer(verifier, dflash, TOK, seed=3, steps=2, log=quiet)


@pytest.mark.parametrize(("name", "kind"), [("eagle3", EAGLE3), ("dspark", DSPARK), ("dflash2", DFLASH)])
def test_training_is_deterministic_and_saves_a_loadable_checkpoint(verifier, dflash, tmp_path, name, kind):
    first, second = (_train(name, verifier, dflash) for _ in range(2))
    for (key, a), b in zip(first.state_dict().items(), second.state_dict().values()):
        assert torch.equal(a, b), key
    out = tmp_path / name
    {"eagle3": lambda d, o: d.save(o), "dspark": save_dspark, "dflash2": save_dflash2}[name](first, out)
    pair = load_pair({"drafter": str(out), "verifier": BUNDLED["toy"]["verifier"]})
    assert pair.kind is kind
    spec = decode(pair, "12+34=", DecodeConfig(schedule="linear", block=4, max_new_tokens=12))
    assert spec.token_ids == decode(pair, "12+34=", DecodeConfig(schedule="ar", max_new_tokens=12)).token_ids
