"""Drafters that draft a chain, as vLLM serves them: EAGLE-3 (`toy-eagle3`) and an
autoregressive drafter (`toy-draft`, vLLM's draft_model), a token a pass, and DSpark
(`toy-dspark`), a block pass then a Markov chain: greedy they emit the verifier's tokens, a
batch's rows decode as each does alone, and their checkpoints and settings are checked in one
line."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from workloads.decoding import DecodeConfig, decode, decode_batch
from workloads.decoding.config import ConfigError
from workloads.decoding.dspark import MarkovHead, markov_chain
from workloads.decoding.kinds import DFLASH, DRAFT_MODEL, DSPARK, EAGLE3, TWO_MODEL
from workloads.models.families import pair_kind
from workloads.models.pair import load_pair
from workloads.models.pairspec import BUNDLED, PairError
from workloads.tasks import get_task

CHAINS = ["toy-eagle3", "toy-draft", "toy-dspark"]


@pytest.fixture(scope="module")
def pairs():
    return {name: load_pair(name) for name in CHAINS}


@pytest.fixture(scope="module")
def prompts():
    return [e.prompt for e in get_task("arith").examples(n=6)]


def test_kinds_are_known_without_loading():
    assert pair_kind("toy-eagle3") is EAGLE3 and pair_kind("toy-draft") is DRAFT_MODEL
    assert pair_kind("toy-dspark") is DSPARK
    assert pair_kind("toy") is TWO_MODEL  # the same drafter, drafting by block diffusion


@pytest.mark.parametrize("name", CHAINS)
def test_greedy_chains_emit_the_verifiers_tokens_and_were_verified(pairs, prompts, name):
    pair = pairs[name]
    for prompt in prompts[:3]:
        ar = decode(pair, prompt, DecodeConfig(schedule="ar", max_new_tokens=32))
        spec = decode(pair, prompt, DecodeConfig(schedule="linear", block=4, max_new_tokens=32))
        assert spec.token_ids == ar.token_ids
        assert spec.drafted > spec.accepted > 0


@pytest.mark.parametrize("name", CHAINS)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rows_of_a_batch_decode_as_each_does_alone(pairs, prompts, name, temperature):
    config = DecodeConfig(schedule="linear", block=3, max_new_tokens=30, temperature=temperature)
    seeds = list(range(len(prompts)))
    together = decode_batch(pairs[name], prompts, config, seeds=seeds).results
    for seed, (prompt, row) in enumerate(zip(prompts, together)):
        alone = decode_batch(pairs[name], [prompt], config, seeds=[seed]).results[0]
        assert (row.token_ids, row.iterations, row.drafted, row.accepted) == \
            (alone.token_ids, alone.iterations, alone.drafted, alone.accepted)


@pytest.mark.parametrize("name", CHAINS)
def test_settings_a_chain_has_no_use_for_are_refused_in_one_line(pairs, name):
    with pytest.raises(ConfigError, match=r"^steps: an? [-\w ]+ drafter drafts .*\(steps 1, no threshold\)$"):
        decode(pairs[name], "1+1=", DecodeConfig(schedule="linear", block=4, steps=2))
    with pytest.raises(ConfigError, match="^schedule: packed cannot run"):
        decode(pairs[name], "1+1=", DecodeConfig(schedule="packed", block=4))


def test_the_eagle3_checkpoint_is_vllms_format():
    """Eagle3LlamaForCausalLM's names (it loads them without checking that all are there),
    no draft-vocabulary map (the vocabularies are equal) and the verifier's embeddings."""
    path = BUNDLED["toy-eagle3"]["drafter"]
    with safe_open(f"{path}/model.safetensors", "pt") as f:
        names = set(f.keys())
    parts = ("input_layernorm", "hidden_norm", "post_attention_layernorm", "self_attn.q_proj",
             "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
             "mlp.down_proj")
    assert names == {"fc.weight", "norm.weight"} | {f"midlayer.{n}.weight" for n in parts}
    config = json.loads((Path(path) / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]


def test_a_checkpoint_that_lacks_a_weight_or_does_not_fit_is_one_line(tmp_path):
    drafter = tmp_path / "eagle3"
    shutil.copytree(BUNDLED["toy-eagle3"]["drafter"], drafter)
    config = json.loads((drafter / "config.json").read_text())
    beyond = {**config, "eagle_aux_hidden_state_layer_ids": [2, 4, 9]}
    (drafter / "config.json").write_text(json.dumps(beyond))
    spec = {"drafter": str(drafter), "verifier": BUNDLED["toy-eagle3"]["verifier"]}
    with pytest.raises(PairError, match=r"^pair.drafter: EAGLE-3 reads layers \[2, 4, 9\]; the verifier has"):
        load_pair(spec)
    (drafter / "config.json").write_text(json.dumps({**config, "intermediate_size": 64}))
    with pytest.raises(PairError, match=r"^pair.drafter: cannot load .* as an EAGLE-3 drafter: midlayer"
                                        r".mlp.down_proj.weight is \(128, 256\); its config makes it "
                                        r"\(128, 64\)$"):
        load_pair(spec)
    with pytest.raises(PairError, match="^pair.profile.attention: an autoregressive"):
        load_pair({**BUNDLED["toy-draft"], "profile": {"attention": "causal", "shift": False}})


@torch.no_grad()
def test_dsparks_markov_chain_is_the_argmax_after_each_draft_within_the_top_k():
    torch.manual_seed(0)
    head, logits, anchor = MarkovHead(11, 3), torch.randn(2, 4, 11), torch.tensor([5, 7])
    for top_k in (0, 3):
        drafts = markov_chain(logits, anchor, head, top_k)
        for row in range(2):
            previous = int(anchor[row])
            for i in range(4):
                allowed = logits[row, i].topk(top_k).indices.tolist() if top_k else range(11)
                scores = {c: float(logits[row, i, c] + head(torch.tensor(previous))[c]) for c in allowed}
                previous = max(scores, key=scores.get)
                assert int(drafts[row, i]) == previous


def test_a_draft_top_k_keeps_dspark_exact(pairs, prompts):
    config = DecodeConfig(schedule="linear", block=5, max_new_tokens=30, draft_top_k=2)
    for prompt in prompts[:2]:
        ar = decode(pairs["toy-dspark"], prompt, DecodeConfig(schedule="ar", max_new_tokens=30))
        assert decode(pairs["toy-dspark"], prompt, config).token_ids == ar.token_ids


def test_the_dspark_checkpoint_is_vllms_format():
    """Qwen3DSparkForCausalLM's config keys (sample_from_anchor at the top: vLLM refuses it in
    dflash_config) and the DFlash backbone's weights with the Markov and confidence heads."""
    path = Path(BUNDLED["toy-dspark"]["drafter"])
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3DSparkModel"] and config["model_type"] == "qwen3"
    assert config["sample_from_anchor"] and "sample_from_anchor" not in config["dflash_config"]
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    rank = config["markov_rank"]
    assert shapes["markov_head.markov_w1.weight"] == shapes["markov_head.markov_w2.weight"] == (101, rank)
    assert shapes["confidence_head.proj.weight"] == (1, 128 + rank)
    assert shapes["confidence_head.proj.bias"] == (1,)
    with safe_open(f"{BUNDLED['toy-dflash']['drafter']}/model.safetensors", "pt") as f:
        assert set(shapes) - set(f.keys()) == {  # noqa: SIM118
            "markov_head.markov_w1.weight", "markov_head.markov_w2.weight", "confidence_head.proj.weight",
            "confidence_head.proj.bias"}


def test_the_dflash2_checkpoint_loads_in_both_formats_and_selects_among_its_draft_top_k(prompts):
    """vLLM's names for the selector's codebooks (no `.weight`; the `dflash` package maps them)
    and its settings inside dflash_config; greedy it emits the verifier's tokens at every
    number of candidates a slot selects among (the selector's 4, or a draft top-k of 1 or 2)."""
    path = Path(BUNDLED["toy-dflash2"]["drafter"])
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["DFlash2DraftModel"] and config["dflash_config"]["selector_top_k"] == 4
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        names = set(f.keys())  # noqa: SIM118
    assert {"candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook"} <= names
    pair = load_pair("toy-dflash2")
    assert pair.kind is DFLASH and pair.drafter.candidate_selector.top_k == 4
    for prompt in prompts[:2]:
        ar = decode(pair, prompt, DecodeConfig(schedule="ar", max_new_tokens=30)).token_ids
        for top_k in (None, 1, 2):
            out = decode(pair, prompt, DecodeConfig(schedule="linear", block=6, max_new_tokens=30,
                                                    draft_top_k=top_k))
            assert out.token_ids == ar and out.drafted > out.accepted > 0
