"""Verification shared by every speculative schedule, and the mutable state of one decode."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workloads.decoding.acceptance import draw, greedy_verify, verify
from workloads.decoding.calls import CachedModel, Meter
from workloads.decoding.config import DecodeConfig
from workloads.decoding.drafting import Draft
from workloads.decoding.output import Output
from workloads.decoding.sampling import distribution, point_mass


@dataclass
class Run:
    """Mutable state shared by the schedule loops."""

    config: DecodeConfig
    out: Output
    generator: torch.Generator
    meter: Meter
    iterations: int = 0
    accepted: int = 0
    drafted: int = 0
    accept_lengths: list[int] = field(default_factory=list)

    def sample(self, logits: torch.Tensor) -> int:
        """One token from the verifier's sampling distribution of logits (V,)."""
        c = self.config
        p = distribution(logits[None], c.temperature, c.top_k, c.top_p)
        return int(draw(p, torch.empty_like(p).exponential_(generator=self.generator))[0])


def judge(run: Run, logits: torch.Tensor, draft: Draft) -> list[int]:
    """Apply the acceptance rule to `draft` given verifier logits (n + 1, V) over [last,
    draft]; counts the iteration and returns the emitted tokens (accepted + recovered/bonus)."""
    c = run.config
    n = draft.tokens.shape[0]
    if point_mass(c.temperature, c.top_k) and c.rule == "lossless":
        verdict = greedy_verify(logits, draft.tokens)
    else:
        p = distribution(logits, c.temperature, c.top_k, c.top_p)  # (n + 1, V)
        uniforms = torch.rand(n, generator=run.generator, device=run.generator.device)
        noise = torch.empty_like(p).exponential_(generator=run.generator)
        verdict = verify(c.rule, p, draft.q, draft.tokens, uniforms, noise, c.leniency)
    run.iterations += 1
    run.drafted += n
    run.accepted += verdict.accepted
    run.accept_lengths.append(verdict.accepted)
    return draft.tokens[: verdict.accepted].tolist() + [verdict.token]


def verify_call(verifier: CachedModel, last: int, draft: Draft) -> torch.Tensor:
    """The verifier's logits (n + 1, V) over [last, draft], appended to its cache (queued
    only: nothing here waits for the device)."""
    return verifier.causal(torch.cat([torch.tensor([last], device=verifier.device), draft.tokens]))


def settle(run: Run, verifier: CachedModel, logits: torch.Tensor, draft: Draft) -> list[int]:
    """Judge `draft` on the logits of its verify call and crop the rejected rows from the
    verifier's cache; returns the emitted tokens."""
    emitted = judge(run, logits, draft)
    verifier.crop(draft.tokens.shape[0] + 1 - len(emitted))
    return emitted


def verify_step(run: Run, verifier: CachedModel, last: int, draft: Draft) -> list[int]:
    """Verify `draft` after the prefix ending in `last`; returns the emitted tokens."""
    return settle(run, verifier, verify_call(verifier, last, draft), draft)
