"""The left-to-right schedule loops (DESIGN.md), one flat function each, over one row's views
of its networks:

* `ar`: the verifier alone, one token per call.
* `diffusion`: the drafter alone, block by block (K steps or threshold τ per block).
* `speculative`: `linear` (draft from the newest prefix, then verify; paper 2610.31819,
  Algorithm 1) or `packed` (one call ahead: the draft verified at iteration t + 1 was
  computed from the prefix at the start of iteration t, while iteration t verified; on a GPU
  the drafter's calls run on a second CUDA stream, overlapping the verifier's). A packed
  draft's first A_t slots (the tokens iteration t emitted) are dropped; the rest is the next
  draft.

Every speculative loop starts the same way: the verifier prefills the prompt and the first
token is sampled from its last row, so the prefix P_0 = prompt + that token. A drafter's
context is filled lazily: verified tokens it has not seen ride along as causal rows of its
next call, and a target-conditioned drafter also reads the verifier's rows (`verified`).
"""

from __future__ import annotations

from typing import Protocol

import torch

from workloads.decoding.calls import CachedModel, side_stream
from workloads.decoding.drafting import Draft, DraftSettings, diffusion_draft
from workloads.decoding.state import DecodeState
from workloads.decoding.verifying import verify_finish, verify_forward, verify_step


class Drafter(Protocol):
    """One row's drafter in the speculative loop."""

    def draft(self, pending: list[int], last: int, width: int, settings: DraftSettings,
              generator: torch.Generator) -> Draft:
        """`width` draft tokens after the verified prefix ending in `last`; `pending` are the
        verified tokens the drafter has not cached yet (a call that drafts caches them)."""

    def verified(self, verifier: CachedModel, rows: int) -> None:
        """The first `rows` rows of the verifier's latest call are now verified."""


class StandaloneDrafter:
    """A drafter network of its own (a two-model pair's): it reads token ids only."""

    def __init__(self, model: CachedModel):
        self.model = model

    def draft(self, pending: list[int], last: int, width: int, settings: DraftSettings,
              generator: torch.Generator) -> Draft:
        return diffusion_draft(self.model, pending, last, width, settings, generator)

    def verified(self, verifier: CachedModel, rows: int) -> None:
        """Verified tokens reach it as `pending` ids: nothing to read from the verifier."""


def ar(state: DecodeState, verifier: CachedModel, prompt: list[int]) -> None:
    logits = verifier.causal(prompt)
    while True:
        token = state.sample(logits[-1])
        state.iterations += 1
        if state.out.extend([token]):
            return
        logits = verifier.causal([token])


def diffusion(state: DecodeState, drafter: CachedModel, prompt: list[int], settings: DraftSettings) -> None:
    pending, last = prompt[:-1], prompt[-1]
    while True:
        draft = diffusion_draft(drafter, pending, last, min(state.config.block, state.out.remaining),
                                settings, state.generator)
        tokens = draft.tokens.tolist()
        state.iterations += 1
        if state.out.extend(tokens):
            return
        pending, last = [last] + tokens[:-1], tokens[-1]


def speculative(state: DecodeState, drafter: Drafter, verifier: CachedModel, prompt: list[int],
                settings: DraftSettings, width: int) -> None:
    """`linear` or `packed` (state.config.schedule), `width` tokens drafted per iteration."""
    packed = state.config.schedule == "packed"
    last = state.sample(verifier.causal(prompt)[-1])
    drafter.verified(verifier, len(prompt))
    if state.out.extend([last]):
        return
    pending = list(prompt)  # verified tokens the drafter has not cached (all but `last`)
    if packed:
        draft = drafter.draft(pending, last, width, settings, state.generator)
        pending = []
    while True:
        room = state.out.remaining - 1  # a recovered or bonus token follows the accepted drafts
        if packed:  # the verifier's forward pass is queued first; on a GPU the drafter runs beside it
            draft = Draft(draft.tokens[:room], draft.q[:room], draft.steps)
            logits = verify_forward(verifier, last, draft)
            with side_stream(verifier.device):
                fresh = drafter.draft(pending, last, width, settings, state.generator)
            emitted = verify_finish(state, verifier, logits, draft)
        else:
            fresh = drafter.draft(pending, last, min(width, room), settings, state.generator)
            emitted = verify_step(state, verifier, last, fresh)
        drafter.verified(verifier, len(emitted))  # rows [last, accepted drafts]
        if fresh.steps:  # a drafting call cached the pending tokens
            pending = []
        pending += [last] + emitted[:-1]
        last = emitted[-1]
        if state.out.extend(emitted):
            return
        if packed:  # the slots the verifier just filled are dropped from the next draft
            keep = len(emitted)
            draft = Draft(fresh.tokens[keep:], fresh.q[keep:], fresh.steps)
