"""Drafting over every row of a batch at once (drafting.py's diffusion_draft and
dflash.chain_draft in lockstep): each kind of drafter keeps what its rows have not cached
and drafts them all in one call a step; a row whose canvas is full rides along, drawing and
counting nothing."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from workloads.decoding.acceptance import draw
from workloads.decoding.drafting import (
    DraftSettings,
    candidates,
    commit_mask,
    proposal_logits,
    scores,
    slot_logits,
)
from workloads.decoding.lockstep import Layout, Rows, staying
from workloads.decoding.sampling import distribution, point_mass


class Drafting:
    """A drafter's rows in lockstep (schedules.Drafter over every row): `pending`, what each
    row's drafter has not cached, waiting[i] of it; `verified` queues the verifier's latest
    rows, `block` is one drafting call, `draft` a whole draft (diffusion K steps or τ)."""

    def __init__(self, network):
        self.network = network
        self.pending = self.waiting = self.nothing = None  # nothing: waiting once a call cached it

    def keep(self, stay: torch.Tensor | None) -> None:
        self.pending, self.waiting = staying(stay, self.pending, self.waiting)
        if stay is not None:
            self.nothing = None

    def cached(self) -> None:
        """A call cached what waited: nothing waits (zeros made once per set of live rows)."""
        if self.nothing is None:
            self.nothing = torch.zeros_like(self.waiting)
        self.waiting = self.nothing

    def draft(self, rows: Rows, last: torch.Tensor, widths: torch.Tensor, width: int,
              settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor]:
        return draft_rows(rows, self, last, widths, width, settings)


class IdRows(Drafting):
    """A standalone drafter's rows (schedules.StandaloneDrafter): the verified token ids each
    row's drafter has not cached, `pending` (L, P), ride along as causal rows of its next call."""

    def verified(self, ids: torch.Tensor, features: torch.Tensor | None, counts: torch.Tensor) -> None:
        """The first counts[i] of the verifier's latest call's ids (L, Q) are now verified."""
        self.pending, self.waiting = ids, counts

    def block(self, rows: Rows, last: torch.Tensor, tokens: torch.Tensor, widths: torch.Tensor,
              served: torch.Tensor, mask_id: int) -> torch.Tensor:
        """One drafting call over every live row: its waiting tokens (cached), then [last,
        canvas], the canvas its first widths[i] slots of tokens (L, W). Returns the block
        rows' logits (L, W + 1, V)."""
        layout = Layout.of(self.waiting, 1 + widths, True, False)
        ids = _block_ids(self.pending, self.waiting, last, tokens, layout, mask_id)
        positions = self.network.slots.positions(np.arange(ids.shape[1]))
        logits = rows.call(self.network, ids, positions, layout.among, layout.kept, layout.real, served)
        self.cached()
        return layout.region_rows(logits, tokens.shape[1] + 1)


class ModelRows(IdRows):
    """A dual-mode network drafting for itself (selfspec `linear`): its cache is the
    verifier's, so nothing waits to be cached and its drafting rows are dropped."""

    def verified(self, ids: torch.Tensor, features: torch.Tensor | None, counts: torch.Tensor) -> None:
        self.pending, self.waiting = ids[:, :0], torch.zeros_like(counts)


class FeatureRows(Drafting):
    """A DFlash drafter's rows (dflash.DFlashDrafter): the verifier's features of the verified
    rows each row's drafter has not cached, `pending` (L, N, F), its next call's context."""

    def verified(self, ids: torch.Tensor, features: torch.Tensor | None, counts: torch.Tensor) -> None:
        self.pending, self.waiting = features[:, :int(counts.max())], counts

    def block(self, rows: Rows, last: torch.Tensor, tokens: torch.Tensor, widths: torch.Tensor,
              served: torch.Tensor, mask_id: int) -> torch.Tensor:
        blocks = 1 + widths
        canvas = torch.where(torch.arange(tokens.shape[1]) < widths[:, None], tokens, mask_id)
        ids = torch.cat([last[:, None], canvas], 1)
        context = self.pending if bool(self.waiting.any()) else self.pending[:, :0]
        forward, commit = self.network.prepare(self.network.slots.rows, context, self.waiting, ids, blocks)
        logits, self.hidden = rows.timed(self.network, forward, blocks, ids.numel(), commit, served)
        self.cached()
        return logits  # self.hidden: the block rows' states, for DFlash 2's candidate chain


class ChainRows(FeatureRows):
    """A DFlash 2 drafter's rows: one block pass, then its candidate chain drawn slot by slot
    over every row at once (dflash.chain_draft)."""

    def draft(self, rows: Rows, last: torch.Tensor, widths: torch.Tensor, width: int,
              settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor]:
        """dflash.chain_draft over every live row, row i's chain widths[i] slots long: a
        candidate c after the token t chosen before it scores logit(c) + ⟨pred(t) ⊙ W h,
        succ(c)⟩, drawn from q = softmax(s / T) over the slot's candidates (argmax at a
        point-mass setting). Returns (tokens (L, W), q (L, W, V); None at a point-mass
        setting: one-hot at the draft, as `drawn_rows`)."""
        selector = self.network.model.candidate_selector
        canvas = torch.full((last.shape[0], width), settings.mask_token_id, dtype=torch.long)
        point = point_mass(settings.temperature, settings.top_k)
        if width == 0:
            return canvas, None
        logits = slot_logits(self.block(rows, last, canvas, widths, widths > 0, settings.mask_token_id),
                             settings)  # (L, W, V), the mask token excluded
        unary, candidates = logits.topk(selector.top_k, dim=-1)  # (L, W, k)
        states = selector.hidden_projection(self.hidden[:, 1:].to(selector.hidden_projection.weight.dtype))
        successors = selector.successor_codebook(candidates)  # (L, W, k, r)
        before, q, tokens = last.to(logits.device), None if point else torch.zeros_like(logits), []
        for i in range(width):  # slot by slot: each draws after the token chosen before it
            scores = unary[:, i] + (successors[:, i] @ (selector.predecessor_codebook(before)
                                                        * states[:, i]).float()[..., None])[..., 0]
            if point:
                chosen = scores.argmax(-1)
            else:
                weights = distribution(scores, settings.temperature)
                drawing = (widths > i).long()  # a row draws only for its own slots
                chosen = draw(weights, rows.exponential(drawing, 1, weights.shape[-1], weights.device)[:, 0])
                q[:, i].scatter_(1, candidates[:, i], weights)
            before = candidates[:, i].gather(1, chosen[:, None])[:, 0]
            tokens.append(before.cpu())
        return torch.stack(tokens, 1), q


def draft_rows(rows: Rows, drafter: Drafting, last: torch.Tensor, widths: torch.Tensor, width: int,
               settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """diffusion_draft over every live row: row i drafts widths[i] tokens after its verified
    prefix ending in last[i] (K steps or τ, each a call of `drafter`, IdRows or FeatureRows).
    Every call runs over every live row; a row whose canvas is full rides along, drawing and
    counting nothing. Returns (tokens (L, W), q (L, W, V), or None: one-hot at the draft,
    `drawn_rows`), W = `width`."""
    tokens = torch.full((last.shape[0], width), settings.mask_token_id, dtype=torch.long)
    masked = torch.arange(width) < widths[:, None]
    q, step = None, 0
    while bool(masked.any()):
        active = masked.any(1)

        def counts(a: torch.Tensor = active) -> torch.Tensor:  # the slots each row draws for (greedy: none)
            return torch.where(a, widths, 0)

        logits = drafter.block(rows, last, tokens, widths, active, settings.mask_token_id)
        drawn, proposal, untempered = drawn_rows(rows, logits, settings, counts, width)
        device = untempered.device
        if settings.steps is not None and settings.steps - step == 1:
            chosen = masked.clone()
        else:
            probs = untempered.softmax(-1)
            priority = scores(settings.unmask, probs, drawn.to(device),
                              lambda c=counts, d=device: rows.uniform(c(), width, d))
            chosen = commit_mask(settings, masked.to(device), priority, probs.amax(-1), step).cpu()
        tokens = torch.where(chosen, drawn, tokens)
        if proposal is not None:
            q = proposal if q is None else torch.where(chosen[..., None].to(device), proposal, q)
        masked &= ~chosen
        step += 1
    return tokens, q


def drawn_rows(rows: Rows, logits: torch.Tensor, settings: DraftSettings, counts: Callable[[], torch.Tensor],
               width: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Each live row's candidates (L, W), on the host, from its drafting regions' logits
    (L, W + 1, V), with their proposals q (L, W, V) and untempered logits (L, W, V)
    (drafting.proposal_logits). At a point-mass setting q is None: one-hot at the draft,
    built only by an acceptance rule that reads it (verifying.accept). Else each row draws
    its first counts()[i] slots' noise from its own generator."""
    untempered = proposal_logits(logits, settings)
    if point_mass(settings.temperature, settings.top_k):
        return candidates(untempered, settings, None).cpu(), None, untempered
    proposal = distribution(untempered, settings.temperature, settings.top_k, settings.top_p)
    drawn = candidates(proposal, settings,
                       lambda: rows.exponential(counts(), width, proposal.shape[-1], proposal.device))
    return drawn.cpu(), proposal, untempered


def _block_ids(pending: torch.Tensor, waiting: torch.Tensor, last: torch.Tensor, tokens: torch.Tensor,
               layout: Layout, mask_id: int) -> torch.Tensor:
    """(L, Q) ids of a drafting call: each row's waiting tokens, its last verified token, its
    canvas (its slots past widths are padding: masks). When every row's are alike (`even`),
    one concatenation; else built in numpy on the host."""
    if layout.even:
        waited = layout.start
        return torch.cat([pending[:, :waited].cpu(), last.cpu()[:, None],
                          tokens[:, :layout.among.shape[1] - waited - 1]], 1)
    pending, waiting, last, tokens, real = (t.cpu().numpy()
                                            for t in (pending, waiting, last, tokens, layout.real))
    q_width, width = layout.among.shape[1], tokens.shape[1]
    ids = np.full((last.shape[0], q_width + width + 1), mask_id, dtype=np.int64)  # room for padding
    held = min(pending.shape[1], q_width)
    ids[:, :held] = np.where(np.arange(held) < waiting[:, None], pending[:, :held], mask_id)
    row = np.arange(last.shape[0])[:, None]
    ids[row[:, 0], waiting] = last
    slots = np.arange(width)
    ids[row, waiting[:, None] + 1 + slots] = np.where(slots < (real - waiting - 1)[:, None], tokens, mask_id)
    return torch.from_numpy(np.ascontiguousarray(ids[:, :q_width]))
