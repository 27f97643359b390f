import pytest
from transformers import LlamaForCausalLM

from workloads.models.families.selfspec import SelfPair
from workloads.models.families.twomodel import TwoModelPair
from workloads.models.pair import load_pair
from workloads.models.pairspec import PairError
from workloads.models.tokenizer import build_char_tokenizer
from workloads.models.toy_train import model_config


def tiny_checkpoint(path, profile, tokenizer=None):
    """A 1-layer random-weight Llama saved like a real checkpoint."""
    tok = tokenizer or build_char_tokenizer()
    model = LlamaForCausalLM(model_config(len(tok), 1, profile))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


DRAFTER = {"role": "drafter", "shift": True, "mask_token_id": 2}


def test_two_model_pair_loads_from_local_paths(tmp_path):
    spec = {"drafter": tiny_checkpoint(tmp_path / "d", DRAFTER),
            "verifier": tiny_checkpoint(tmp_path / "v", {"role": "verifier"})}
    pair = load_pair(spec)
    assert isinstance(pair, TwoModelPair)
    assert pair.profile.mask_token_id == 2 and pair.profile.shifted
    assert not pair.verifier.training


def test_dual_mode_pair_loads_from_a_model_path(tmp_path):
    pair = load_pair({"model": tiny_checkpoint(tmp_path / "m", {"shift": False})})
    assert isinstance(pair, SelfPair) and not pair.profile.shifted


def test_profile_in_spec_overrides_checkpoint(tmp_path):
    spec = {"model": tiny_checkpoint(tmp_path / "m", {}), "profile": {"shift": True}}
    assert load_pair(spec).profile.shifted


def test_bundled_toy_pairs_load():
    pair = load_pair("toy")
    assert isinstance(pair, TwoModelPair) and pair.profile.shifted
    assert pair.drafter.config.num_hidden_layers < pair.verifier.config.num_hidden_layers
    assert isinstance(load_pair("toy-self"), SelfPair)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", r"unknown pair 'nope'; bundled pairs: toy, toy-self"),
        ({"drafter": "/no/such/dir", "verifier": "/no/such/dir"}, r"pair.verifier: /no/such/dir is not"),
        ({"verifier": "./x"}, r"expected keys \{drafter, verifier\} or \{model\}, got \{verifier\}"),
        ({"model": ""}, r"pair.model: expected a local path or hub id"),
        ({"model": "nobody/no-such-model"}, r"pair.model: cannot load 'nobody/no-such-model'.*local path"),
        (["toy"], r"expected a name or a mapping, got list"),
    ],
)
def test_bad_pair_specs_name_the_field(spec, message):
    with pytest.raises(PairError, match=message):
        load_pair(spec)


def test_pair_with_different_tokenizers_is_refused(tmp_path):
    other = build_char_tokenizer()
    other.add_tokens(["<extra>"])  # a verifier token the drafter does not have
    spec = {"drafter": tiny_checkpoint(tmp_path / "d", DRAFTER),
            "verifier": tiny_checkpoint(tmp_path / "v", {}, other)}
    with pytest.raises(PairError, match="tokenizers differ in vocabulary"):
        load_pair(spec)


def test_drafter_only_tokens_are_never_proposed(tmp_path):
    other = build_char_tokenizer()
    other.add_tokens(["<extra>"])
    spec = {"drafter": tiny_checkpoint(tmp_path / "d", DRAFTER, other),
            "verifier": tiny_checkpoint(tmp_path / "v", {})}
    assert load_pair(spec).profile.forbidden == (other.convert_tokens_to_ids("<extra>"),)


def test_drafter_without_shift_declaration_is_refused(tmp_path):
    spec = {"drafter": tiny_checkpoint(tmp_path / "d", {"mask_token_id": 2}),
            "verifier": tiny_checkpoint(tmp_path / "v", {})}
    with pytest.raises(PairError, match=r"pair.drafter: say whether logits are shifted"):
        load_pair(spec)


def test_weights_that_hold_none_of_the_models_tensors_are_refused(tmp_path):
    """transformers would start every weight at random, warn, and the pair would decode noise."""
    import torch
    from safetensors.torch import save_file

    path = tiny_checkpoint(tmp_path / "m", {})
    save_file({"unrelated": torch.zeros(4)}, tmp_path / "m" / "model.safetensors")
    with pytest.raises(PairError, match=rf"pair.model: {path} lacks \d+ of the model's weights"):
        load_pair({"model": path})
