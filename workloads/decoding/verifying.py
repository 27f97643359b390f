"""One verification step, shared by every speculative schedule.

A step is the verifier's forward pass over [last, draft] (`verify_forward`), then the
acceptance rule on its logits (`verify_logits`) and the crop of the rows after the accepted
drafts from the verifier's cache (`verify_finish` does both); `verify_step` is the whole
step. The parts are separate because two-model packed drafts between the forward pass and
the rule, and self-speculative schedules get the logits from a packed call of their own.
"""

from __future__ import annotations

import torch

from workloads.decoding.acceptance import verify, verify_greedy
from workloads.decoding.calls import CachedModel
from workloads.decoding.drafting import Draft
from workloads.decoding.sampling import distribution, point_mass
from workloads.decoding.state import DecodeState


def verify_forward(verifier: CachedModel, last: int, draft: Draft) -> torch.Tensor:
    """The verifier's logits (n + 1, V) over [last, draft], appended to its cache (queued
    only: nothing here waits for the device)."""
    return verifier.causal(torch.cat([torch.tensor([last], device=verifier.device), draft.tokens]))


def verify_logits(state: DecodeState, logits: torch.Tensor, draft: Draft) -> list[int]:
    """Apply the acceptance rule to `draft` given verifier logits (n + 1, V) over [last,
    draft]; counts the iteration and returns the emitted tokens: the accepted drafts, then
    the recovered token, or the bonus token when every draft was accepted."""
    c = state.config
    n = draft.tokens.shape[0]
    if point_mass(c.temperature, c.top_k) and c.rule == "lossless":
        verification = verify_greedy(logits, draft.tokens)
    else:
        p = distribution(logits, c.temperature, c.top_k, c.top_p)  # (n + 1, V)
        uniforms = torch.rand(n, generator=state.generator, device=state.generator.device)
        noise = torch.empty_like(p).exponential_(generator=state.generator)
        verification = verify(c.rule, p, draft.q, draft.tokens, uniforms, noise, c.leniency)
    state.iterations += 1
    state.drafted += n
    state.accepted += verification.accepted
    state.accept_lengths.append(verification.accepted)
    return draft.tokens[: verification.accepted].tolist() + [verification.token]


def verify_finish(state: DecodeState, verifier: CachedModel, logits: torch.Tensor, draft: Draft) -> list[int]:
    """`verify_logits` on the logits of `verify_forward`, then the rows after the accepted
    drafts leave the verifier's cache; returns the emitted tokens."""
    emitted = verify_logits(state, logits, draft)
    verifier.crop(draft.tokens.shape[0] + 1 - len(emitted))
    return emitted


def verify_step(state: DecodeState, verifier: CachedModel, last: int, draft: Draft) -> list[int]:
    """Verify `draft` after the prefix ending in `last`; returns the emitted tokens."""
    return verify_finish(state, verifier, verify_forward(verifier, last, draft), draft)
