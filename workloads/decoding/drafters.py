"""The drafters of a speculative loop, each over every row of a batch at once: what each row's
drafter has not yet read of the verified prefix, and one drafting call over every live row
(`block`); `draft` is a whole draft (drafting.draft: K steps or τ, or DFlash 2's chain).

* `StandaloneDrafter`: a drafter network of its own that reads token ids (two-model pairs);
  verified ids it has not cached ride along as causal rows of its next call.
* `CausalDrafter`: an autoregressive drafter of its own (vLLM's draft_model): a chain of
  causal calls, one token each.
* `FullAttentionDrafter`: one without a prefix cache, re-reading each row's whole verified
  sequence every call (Dream / LLaDA-style full attention).
* `SelfDrafter`: a dual-mode network drafting for itself (self `linear`): its cache is the
  verifier's.
* `FeatureDrafter`: DFlash, conditioned on the verifier's features of the verified rows.
* `ChainDrafter`: DFlash 2, one block pass, then its candidate chain slot by slot.
* `SparkDrafter`: DSpark, one block pass, every row predicting the next position, then its
  Markov chain (dspark.py).
* `Eagle3Drafter`: EAGLE-3, a pass over the newly verified positions, then a chain of
  one-row passes (eagle3.py).

A row whose canvas is full rides along a call, drawing and counting nothing.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from workloads.decoding.acceptance import draw
from workloads.decoding.drafting import DraftSettings, draft
from workloads.decoding.dspark import markov_chain
from workloads.decoding.layout import Layout, columns
from workloads.decoding.rows import Rows, staying
from workloads.decoding.sampling import distribution, point_mass


class Drafter:
    """A drafter over every live row: `pending`, what each row's drafter has not cached,
    waiting[i] of it; `verified` queues the verifier's latest rows, `block` is one drafting
    call, `draft` a whole draft (K steps or τ)."""

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
        return draft(rows, self, last, widths, width, settings)


class StandaloneDrafter(Drafter):
    """A drafter network of its own: the verified token ids each row's drafter has not cached,
    `pending` (L, P), ride along as causal rows of its next call; its [last, canvas] rows
    see each other (`bidirectional`)."""

    bidirectional = True

    def verified(self, ids: torch.Tensor, features: torch.Tensor | None, counts: torch.Tensor) -> None:
        """The first counts[i] of the verifier's latest call's ids (L, Q) are now verified."""
        self.pending, self.waiting = ids, counts

    def block(self, rows: Rows, last: torch.Tensor, tokens: torch.Tensor, widths: torch.Tensor,
              served: torch.Tensor, mask_id: int) -> torch.Tensor:
        """One drafting call over every live row: its waiting tokens (cached), then [last,
        canvas], the canvas its first widths[i] slots of tokens (L, W). Returns the block
        rows' logits (L, W + 1, V)."""
        layout = Layout.of(self.waiting, 1 + widths, self.bidirectional, False)
        ids = _block_ids(self.pending, self.waiting, last, tokens, layout, mask_id)
        positions = self.network.slots.positions(np.arange(ids.shape[1]))
        logits = rows.call(self.network, layout.call(ids, positions, served))
        self.cached()
        return layout.region_rows(logits, tokens.shape[1] + 1)


class CausalDrafter(StandaloneDrafter):
    """An autoregressive drafter (vLLM's draft_model): draft s + 1 is the argmax of a causal call
    over [last, d_1 .. d_s] (each row predicting the next token), greedy at any temperature
    as vLLM drafts, so q is one-hot at the draft and lossless stays exact."""

    bidirectional = False

    def draft(self, rows: Rows, last: torch.Tensor, widths: torch.Tensor, width: int,
              settings: DraftSettings) -> tuple[torch.Tensor, None]:
        tokens = torch.zeros((last.shape[0], width), dtype=torch.long)
        for s in range(int(widths.max()) if width else 0):
            region = torch.full_like(widths, s)  # [last, d_1 .. d_s]
            logits = self.block(rows, last, tokens, region, widths > s, settings.mask_token_id)
            tokens[:, s] = logits[:, s].argmax(-1).cpu()
        return tokens, None


class FullAttentionDrafter(StandaloneDrafter):
    """A drafter without a prefix cache: every call re-reads each row's verified sequence, all
    of its rows seeing each other (`history` (L, H), lengths[i] of it row i's), and keeps
    nothing."""

    def __init__(self, network):
        super().__init__(network)
        self.history = self.lengths = None

    def verified(self, ids: torch.Tensor, features: torch.Tensor | None, counts: torch.Tensor) -> None:
        """Append the first counts[i] of ids (L, Q) to row i's history."""
        ids, counts = ids.cpu().numpy(), counts.cpu().numpy()
        if self.history is None:
            self.history, self.lengths = np.zeros((len(counts), 0), dtype=np.int64), np.zeros_like(counts)
        total = self.lengths + counts
        grown = np.zeros((len(total), max(int(total.max()), self.history.shape[1])), dtype=np.int64)
        grown[:, :self.history.shape[1]] = self.history
        column = np.arange(ids.shape[1])
        new = column < counts[:, None]
        row = np.broadcast_to(np.arange(len(total))[:, None], new.shape)
        grown[row[new], (self.lengths[:, None] + column)[new]] = ids[new]
        self.history, self.lengths = grown, total

    def keep(self, stay: torch.Tensor | None) -> None:
        if stay is not None:
            self.history, self.lengths = self.history[stay.numpy()], self.lengths[stay.numpy()]

    def block(self, rows: Rows, last: torch.Tensor, tokens: torch.Tensor, widths: torch.Tensor,
              served: torch.Tensor, mask_id: int) -> torch.Tensor:
        """One call over each row's [history, last, canvas] at positions 0 .., every row seeing
        every other; returns the block rows' logits (L, W + 1, V)."""
        lengths = torch.from_numpy(self.lengths)
        layout = Layout.of(torch.zeros_like(lengths), lengths + 1 + widths, True, False)
        width = tokens.shape[1]
        ids = np.full((len(lengths), layout.among.shape[1] + width + 1), mask_id, dtype=np.int64)
        ids[:, :self.history.shape[1]] = self.history
        row = np.arange(len(lengths))
        ids[row, self.lengths] = last.cpu().numpy()
        slots = np.arange(width)
        canvas = np.where(slots < widths.numpy()[:, None], tokens.cpu().numpy(), mask_id)
        ids[row[:, None], self.lengths[:, None] + 1 + slots] = canvas
        ids = torch.from_numpy(np.ascontiguousarray(ids[:, :layout.among.shape[1]]))
        positions = torch.arange(ids.shape[1]).expand(len(lengths), -1)
        logits = rows.call(self.network, layout.call(ids, positions, served))
        return columns(logits, lengths, width + 1)


class SelfDrafter(StandaloneDrafter):
    """A dual-mode network drafting for itself (self `linear`): its cache is the verifier's,
    so nothing waits to be cached and its drafting rows are dropped."""

    def verified(self, ids: torch.Tensor, features: torch.Tensor | None, counts: torch.Tensor) -> None:
        self.pending, self.waiting = ids[:, :0], torch.zeros_like(counts)


class FeatureDrafter(Drafter):
    """A DFlash drafter: the verifier's features of the verified rows each row's drafter has
    not cached, `pending` (L, N, F), its next call's context."""

    def verified(self, ids: torch.Tensor, features: torch.Tensor | None, counts: torch.Tensor) -> None:
        self.pending, self.waiting = features[:, :int(counts.max())], counts

    def block(self, rows: Rows, last: torch.Tensor, tokens: torch.Tensor, widths: torch.Tensor,
              served: torch.Tensor, mask_id: int) -> torch.Tensor:
        blocks = 1 + widths
        canvas = torch.where(torch.arange(tokens.shape[1]) < widths[:, None], tokens, mask_id)
        ids = torch.cat([last[:, None], canvas], 1)
        context = self.pending if bool(self.waiting.any()) else self.pending[:, :0]
        forward, commit = self.network.prepare(context, self.waiting, ids, blocks)
        logits, self.hidden = rows.timed(self.network, forward, blocks, ids.numel(), commit, served)
        self.cached()
        return logits  # self.hidden: the block rows' states, for DFlash 2's candidate chain


class ChainDrafter(FeatureDrafter):
    """A DFlash 2 drafter: one block pass, then its candidate chain drawn slot by slot over
    every row at once."""

    def draft(self, rows: Rows, last: torch.Tensor, widths: torch.Tensor, width: int,
              settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor]:
        """DFlash 2's one-pass draft over every live row, row i's chain widths[i] slots long:
        each slot keeps its top-k candidates by logit (k: the selector's, or the draft top-k
        where that is smaller: the paths it selects among; no id excluded, as vLLM and the
        `dflash` package select), and a candidate c after the token t
        chosen before it scores s(c) = logit(c) + ⟨pred(t) ⊙ W h, succ(c)⟩ (codebooks pred,
        succ; h the slot's state), drawn left to right from q = softmax(s / T) over the
        slot's candidates (argmax at a point-mass setting). Each token is drawn from its own
        q given the tokens before it, so lossless stays exact. Returns (tokens (L, W), q
        (L, W, V) scattered over the vocabulary; None at a point-mass setting: one-hot at
        the draft, as drafting.proposed)."""
        selector = self.network.model.candidate_selector
        canvas = torch.full((last.shape[0], width), settings.mask_token_id, dtype=torch.long)
        point = point_mass(settings.temperature, settings.top_k)
        if width == 0:
            return canvas, None
        block = self.block(rows, last, canvas, widths, widths > 0, settings.mask_token_id)
        logits = block[:, 1:].float()  # (L, W, V): a mask row predicts its own position
        unary, candidates = logits.topk(chain_width(selector.top_k, settings.top_k), dim=-1)  # (L, W, k)
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


class SparkDrafter(FeatureDrafter):
    """A DSpark drafter: one pass over [last, mask × (W − 1)] (row i predicting position i + 1
    after last), then its Markov chain, greedy (vLLM's drafts at any temperature, so q is
    one-hot at the draft), over the draft top-k when one is set."""

    def draft(self, rows: Rows, last: torch.Tensor, widths: torch.Tensor, width: int,
              settings: DraftSettings) -> tuple[torch.Tensor, None]:
        if width == 0:
            return torch.zeros((last.shape[0], 0), dtype=torch.long), None
        canvas = torch.full((last.shape[0], width - 1), settings.mask_token_id, dtype=torch.long)
        logits = self.block(rows, last, canvas, (widths - 1).clamp(min=0), widths > 0, settings.mask_token_id)
        return markov_chain(logits.float(), last, self.network.model.markov_head, settings.top_k), None


class Eagle3Drafter(Drafter):
    """An EAGLE-3 drafter: the verifier's features of the newly verified positions
    (`pending` (L, N, F), waiting[i] of row i's) with their ids, and `cached` (L,), the
    positions each row's drafter has cached before them."""

    def __init__(self, network):
        super().__init__(network)
        self.ids = self.done = None

    def verified(self, ids: torch.Tensor, features: torch.Tensor | None, counts: torch.Tensor) -> None:
        n = int(counts.max())
        self.pending, self.ids, self.waiting = features[:, :n], ids[:, :n].cpu(), counts
        if self.done is None:
            self.done = torch.zeros_like(counts)

    def keep(self, stay: torch.Tensor | None) -> None:
        super().keep(stay)
        self.ids, self.done = staying(stay, self.ids, self.done)

    def draft(self, rows: Rows, last: torch.Tensor, widths: torch.Tensor, width: int,
              settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor | None]:
        """EAGLE-3's chain over every live row, greedy (vLLM's drafts at any temperature, so
        q is one-hot at the draft: lossless stays exact): the first pass's last row of each
        row drafts d_1, each further pass one more. Returns (tokens (L, W), None)."""
        network, counts, live = self.network, self.waiting, torch.arange(last.shape[0])
        tokens = torch.zeros((last.shape[0], width), dtype=torch.long)
        following = torch.cat([self.ids[:, 1:], torch.zeros_like(self.ids[:, :1])], 1)
        following[live, counts - 1] = last.cpu()  # a verified position's token is the one after it
        positions = self.done[:, None] + torch.arange(following.shape[1])
        x = network.model.fc(self.pending.to(network.dtype))
        served, at = widths > 0, self.done + counts - 1
        pre, logits = rows.timed(network, lambda: network.pass_(x, following, positions), counts,
                                 following.numel(), lambda: None, served)
        state, drafted = pre[live, counts - 1], logits[live, counts - 1].argmax(-1)
        ones, longest = torch.ones_like(counts), int(widths.max())
        for j in range(longest):
            tokens[:, j] = drafted.cpu()
            if j + 1 < longest:
                one = functools.partial(network.pass_, state[:, None], drafted[:, None], at[:, None] + j + 1)
                pre, logits = rows.timed(network, one, ones, len(counts), lambda: None, served)
                state, drafted = pre[:, 0], logits[:, 0].argmax(-1)
        self.done, self.waiting = self.done + counts, torch.zeros_like(counts)
        return tokens, None


def chain_width(selector: int, top_k: int) -> int:
    """The candidates a DFlash 2 slot selects among: its selector's k, or a smaller draft top-k."""
    return min(selector, top_k) if top_k else selector


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
