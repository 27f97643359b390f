import copy

import pytest
import torch
from transformers import LlamaForCausalLM

from workloads.models.families.selfspec import SelfPair
from workloads.models.families.twomodel import TwoModelPair
from workloads.models.profiles import DiffusionProfile
from workloads.models.tokenizer import build_char_tokenizer
from workloads.models.toy_train import model_config

TOK = build_char_tokenizer()


def tiny(layers: int, seed: int, untied: bool = False) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = model_config(len(TOK), layers, {})
    config.tie_word_embeddings = not untied
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def random_pair() -> TwoModelPair:
    """Random-weight drafter and verifier: drafts are mostly rejected."""
    return TwoModelPair("random", tiny(1, 1), tiny(2, 2), TOK, DiffusionProfile(TOK.mask_token_id, True))


@pytest.fixture(scope="session")
def random_self() -> SelfPair:
    return SelfPair("random-self", tiny(2, 3), TOK, DiffusionProfile(TOK.mask_token_id, False))


@pytest.fixture(scope="session")
def uncertain_pair() -> TwoModelPair:
    """A random verifier whose sharpened head spreads top-3 mass over a few tokens, and a
    drafter that is a perturbed copy of it: drafts are sometimes accepted, sometimes not,
    and the joint of the first tokens has many cells to compare."""
    verifier = tiny(1, 2, untied=True)
    verifier.lm_head.weight.data *= 8
    drafter = copy.deepcopy(verifier)
    g = torch.Generator().manual_seed(5)
    head = drafter.lm_head.weight.data
    head += 0.5 * head.std() * torch.randn(head.shape, generator=g)
    return TwoModelPair("uncertain", drafter, verifier, TOK, DiffusionProfile(TOK.mask_token_id, True))
