import pytest
import torch
from transformers import LlamaForCausalLM

from workloads.models.pair import DiffusionProfile, SelfPair, TwoModelPair
from workloads.models.tokenizer import build_char_tokenizer
from workloads.models.toy_train import model_config

TOK = build_char_tokenizer()


def tiny(layers: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(model_config(len(TOK), layers, {})).eval()


@pytest.fixture(scope="session")
def random_pair() -> TwoModelPair:
    """Random-weight drafter and verifier: drafts are mostly rejected."""
    return TwoModelPair("random", tiny(1, 1), tiny(2, 2), TOK, DiffusionProfile(TOK.mask_token_id, True))


@pytest.fixture(scope="session")
def random_self() -> SelfPair:
    return SelfPair("random-self", tiny(2, 3), TOK, DiffusionProfile(TOK.mask_token_id, False))
