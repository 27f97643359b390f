"""One verification step, shared by every speculative schedule.

A step is the verifier's forward pass over [last, draft] (`verify_forward`), then the
acceptance rule on its logits (`verify_logits`) and the crop of the rows after the accepted
drafts from the verifier's cache (`verify_finish` does both); `verify_step` is the whole
step. The parts are separate because two-model packed drafts between the forward pass and
the rule, and self-speculative schedules get the logits from a packed call of their own.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workloads.decoding.acceptance import verify_greedy_rows, verify_rows
from workloads.decoding.calls import CachedModel
from workloads.decoding.config import DecodeConfig
from workloads.decoding.drafting import Draft
from workloads.decoding.sampling import distribution, point_mass
from workloads.decoding.state import DecodeState


def verify_forward(verifier: CachedModel, last: int, draft: Draft) -> torch.Tensor:
    """The verifier's logits (n + 1, V) over [last, draft], appended to its cache (queued
    only: nothing here waits for the device)."""
    return verifier.causal(torch.cat([torch.tensor([last], device=verifier.device), draft.tokens]))


def accept(config: DecodeConfig, logits: torch.Tensor, q: torch.Tensor | None, drafted: torch.Tensor,
           lengths: torch.Tensor, draws: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """`config`'s acceptance rule over R rows: verifier logits (R, B + 1, V) over [last,
    draft], proposals q (R, B, V) (None: a point-mass drafter's, one-hot at each draft),
    drafted ids (R, B), row r's draft its first lengths[r]. At a point-mass lossless
    setting the greedy rule, drawing nothing (acceptance.verify_greedy_rows); else
    acceptance.verify_rows on the verifier's sampling distribution p, with (uniforms (R, B),
    noise like p) = draws(p). Returns (accepted (R,), token (R,))."""
    c = config
    if point_mass(c.temperature, c.top_k) and c.rule == "lossless":
        return verify_greedy_rows(logits, drafted, lengths)
    p = distribution(logits, c.temperature, c.top_k, c.top_p)
    if q is None:
        q = torch.nn.functional.one_hot(drafted, p.shape[-1]).float()
    uniforms, noise = draws(p)
    return verify_rows(c.rule, p, q, drafted, lengths, uniforms, noise, c.leniency)


def verify_logits(state: DecodeState, logits: torch.Tensor, draft: Draft) -> list[int]:
    """Apply the acceptance rule to `draft` given verifier logits (n + 1, V) over [last,
    draft]; counts the iteration and returns the emitted tokens: the accepted drafts, then
    the recovered token, or the bonus token when every draft was accepted."""
    n, generator = draft.tokens.shape[0], state.generator

    def draws(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uniforms = torch.rand(n, generator=generator, device=generator.device)
        return uniforms[None], torch.empty_like(p).exponential_(generator=generator)

    accepted, token = accept(state.config, logits[None], draft.q[None], draft.tokens[None],
                             torch.tensor([n], device=draft.tokens.device), draws)
    accepted, token = int(accepted[0]), int(token[0])
    state.iterations += 1
    state.drafted += n
    state.accepted += accepted
    state.accept_lengths.append(accepted)
    return draft.tokens[:accepted].tolist() + [token]


def verify_finish(state: DecodeState, verifier: CachedModel, logits: torch.Tensor, draft: Draft) -> list[int]:
    """`verify_logits` on the logits of `verify_forward`, then the rows after the accepted
    drafts leave the verifier's cache; returns the emitted tokens."""
    emitted = verify_logits(state, logits, draft)
    verifier.crop(draft.tokens.shape[0] + 1 - len(emitted))
    return emitted


def verify_step(state: DecodeState, verifier: CachedModel, last: int, draft: Draft) -> list[int]:
    """Verify `draft` after the prefix ending in `last`; returns the emitted tokens."""
    return verify_finish(state, verifier, verify_forward(verifier, last, draft), draft)
