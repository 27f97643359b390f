"""Sampling settings: logits to the distribution a token is actually drawn from."""

from __future__ import annotations

from collections.abc import Callable

import torch

from workloads.decoding.acceptance import draw

# Logits are float32: a temperature below its smallest normal number rounds towards 0 and
# would divide 0 by 0; such a temperature is its limit, the point mass.
TINY_TEMPERATURE = float(torch.finfo(torch.float32).tiny)


def point_mass(temperature: float, top_k: int) -> bool:
    """Whether sampling settings put all mass on the argmax: temperature 0 (or below
    TINY_TEMPERATURE) or top-k 1."""
    return temperature < TINY_TEMPERATURE or top_k == 1


def distribution(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Shape logits (..., V) into probabilities (..., V), float32.

    temperature 0 (or a tiny one: `point_mass`) and top-k 1 are greedy: one-hot on the
    argmax (ties to the lowest id, so top-k 1 is a point mass even on tied logits).
    Otherwise softmax(logits / T), keeping the top_k largest (0 = all) and the smallest set
    whose mass reaches top_p, renormalised.
    """
    logits = logits.float()
    if point_mass(temperature, top_k):
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    # (l − max) / T is ≤ 0 and never NaN: a tiny T (1e-300) overflows to −inf off the argmax,
    # which is the T → 0 limit, where l / T would give inf − inf and sample garbage
    logits = (logits - logits.amax(-1, keepdim=True)) / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        # keep a token while the mass before it is < top_p; the first always stays, also for
        # a top_p that float32 rounds to 0 (its limit: the argmax alone)
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs * keep
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
           noise: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Token ids (...) from the sampling distribution p of logits (..., V): the argmax at a
    point-mass setting (ties to the lowest id), drawing nothing; else argmax(p / noise(p)),
    noise(p) Exp(1) draws shaped like p."""
    if point_mass(temperature, top_k):
        return logits.argmax(-1)
    p = distribution(logits, temperature, top_k, top_p)
    return draw(p, noise(p))
