"""Stub models over two tokens {a, b} whose laws depend on the context, and the exact AR
joint of their verifier.

A `LawLM` keeps each row's token id and position in the KV cache it is given (as the keys
of one layer), so a row's context is exactly what the engine's additive mask lets it see:
cache rows, earlier rows of the call and, in a drafting block, the other block rows. A stale
cache entry, a wrong crop, a wrong position or a wrong mask changes the context and with
it the law. Rows that see no mask token follow the AR law, rows that see one the drafting
law, so one `LawLM` is a verifier, a drafter, or a dual-mode network.

AR law (row predicting the token after the context c, whose last token is `last`; `odd` is
whether c holds an odd number of b's):  p(b) = AR_B[last == b][odd].
Drafting law (row whose own token is `own`, predicting the next slot; `odd` counts the b's
among every non-mask token it sees, the block's later committed slots included):
q(b) = DRAFT_B[own][odd], own ∈ {a, b, mask}. Top probabilities straddle τ = 0.7, so a
threshold draft commits a context-dependent number of slots per step.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import torch

from tests.workloads.decoding.stubs import TOK, StubModule, V
from workloads.decoding import DecodeConfig, DecodeResult
from workloads.decoding.engine import decode_batch
from workloads.models.families.selfspec import SelfPair
from workloads.models.families.twomodel import TwoModelPair
from workloads.models.profiles import DiffusionProfile

MASK = TOK.mask_token_id
A, B = TOK.convert_tokens_to_ids(["0", "1"])
PROMPT = "7"  # one token outside {a, b}

AR_B = {False: (0.3, 0.6), True: (0.7, 0.45)}  # [last is b][odd] -> p(b)
DRAFT_B = {A: (0.1, 0.35), B: (0.6, 0.9), MASK: (0.2, 0.25)}  # [own][odd] -> q(b)


def _odd(tokens) -> bool:
    return sum(t == B for t in tokens) % 2 == 1


def ar_b(context: list[int]) -> float:
    """p(b | context) of the verifier (the AR law)."""
    return AR_B[context[-1] == B][_odd(context)]


def draft_b(seen: list[int], own: int) -> float:
    """q(b) of a drafting row whose own token is `own` and which sees `seen` (masks included)."""
    return DRAFT_B[own if own in DRAFT_B else A][_odd(t for t in seen if t != MASK)]


def two_point(prob_b: list[float]) -> torch.Tensor:
    """Log-probabilities (n, V) with mass 1 − prob_b on a and prob_b on b."""
    pb = torch.tensor(prob_b)
    out = torch.full((len(prob_b), V), float("-inf"))
    out[:, A], out[:, B] = torch.log1p(-pb), torch.log(pb)
    return out


class LawLM(StubModule):
    """A causal LM stub whose rows follow the AR law or the drafting law of their context."""

    def forward(self, input_ids, position_ids, attention_mask=None, cache=None, use_cache=True):
        batch, q = input_ids.shape
        rows = torch.stack([input_ids, position_ids], -1).float().view(batch, 1, q, 2)
        keys, _ = cache.update(rows, rows, 0)  # (batch, 1, past + q, 2): every slot the cache holds
        prob_b = []
        for b in range(batch):  # each row of a batch sees only what its own mask lets it see
            ids = input_ids[b]
            seen_ids, seen_positions = keys[b, 0, :, 0].long().tolist(), keys[b, 0, :, 1].long().tolist()
            visible = ([[True] * len(seen_ids)] * q if attention_mask is None
                       else (attention_mask[b, 0] == 0).tolist())  # (q, past + q)
            for r in range(q):
                context = [t for _, t in sorted((position, token) for position, token, seen
                                                in zip(seen_positions, seen_ids, visible[r]) if seen)]
                prob_b.append(draft_b(context, int(ids[r])) if MASK in context else ar_b(context))
        return SimpleNamespace(logits=two_point(prob_b).view(batch, q, V))


def law_pair() -> TwoModelPair:
    return TwoModelPair("law", LawLM(), LawLM(), TOK, DiffusionProfile(MASK, shifted=True))


def law_self() -> SelfPair:
    return SelfPair("law-self", LawLM(), TOK, DiffusionProfile(MASK, shifted=True))


def ar_joint(n: int, prompt: str = PROMPT) -> dict[tuple[int, ...], float]:
    """The exact law of the verifier's first n sampled tokens after `prompt` (temperature 1)."""
    start = TOK(prompt).input_ids
    law = {}
    for tokens in itertools.product((A, B), repeat=n):
        prob, context = 1.0, list(start)
        for t in tokens:
            pb = ar_b(context)
            prob *= pb if t == B else 1 - pb
            context.append(t)
        law[tokens] = prob
    return law


def marginal(law: dict[tuple[int, ...], float], keep: slice) -> dict[tuple[int, ...], float]:
    out: dict[tuple[int, ...], float] = {}
    for tokens, prob in law.items():
        out[tokens[keep]] = out.get(tokens[keep], 0.0) + prob
    return out


def seeded_decodes(pair, config: DecodeConfig, seeds: range, prompt: str = PROMPT,
                   batch: int = 300) -> list[DecodeResult]:
    """`prompt` decoded once per seed, as the rows of batches of `batch`: a row samples from its
    own generator and its tokens are those it has decoded alone (test_batch.py holds that), at a
    tenth of the time of one decode per seed."""
    seeds = list(seeds)
    return [result for start in range(0, len(seeds), batch)
            for result in decode_batch(pair, [prompt] * len(seeds[start:start + batch]), config,
                                       seeds=seeds[start:start + batch]).results]
