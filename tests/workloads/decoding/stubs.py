"""Stub language models returning fixed logits (litgpt-style) to force accept paths."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import torch

from workloads.models.families.twomodel import TwoModelPair
from workloads.models.profiles import DiffusionProfile
from workloads.models.tokenizer import build_char_tokenizer

TOK = build_char_tokenizer()
V = len(TOK)
DIGITS = TOK.convert_tokens_to_ids(list("0123456789"))


class StubModule(torch.nn.Module):
    """What the engine reads of a model besides its forward: a device and a dtype."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    @property
    def device(self) -> torch.device:
        return self.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.weight.dtype


class StubLM(StubModule):
    """Row at position p puts all its mass on token `rule(p + 1)`: the next-token (and
    Dream-style shifted diffusion) convention, so a drafter and a verifier with the same
    rule always agree."""

    def __init__(self, rule: Callable[[int], int]):
        super().__init__()
        self.rule = rule
        self.calls = 0

    def forward(self, input_ids, position_ids, attention_mask=None, cache=None, use_cache=True):
        """Each row of the batch answers for its own positions (b, q)."""
        self.calls += 1
        targets = torch.tensor([[self.rule(int(p) + 1) for p in row] for row in position_ids.tolist()])
        logits = torch.full((*targets.shape, V), -30.0)
        logits.scatter_(-1, targets[..., None], 30.0)
        return SimpleNamespace(logits=logits)


def digit_at(p: int) -> int:
    return DIGITS[p % 10]


Rule = Callable[[int], int]


def stub_pair(drafter_rule: Rule, verifier_rule: Rule = digit_at) -> TwoModelPair:
    return TwoModelPair("stub", StubLM(drafter_rule), StubLM(verifier_rule), TOK,
                        DiffusionProfile(TOK.mask_token_id, shifted=True))
