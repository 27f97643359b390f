"""The schedules of DESIGN.md over every row of a batch at once (lockstep.Rows): `ar`, and the
speculative `linear` loop (draft from the newest prefix, then verify; paper 2610.31819,
Algorithm 1) for drafters with a prefix cache. Each is the row loop of schedules.py with
every per-row step a tensor op over the live rows: the same draws from each row's generator,
the same acceptance rules (acceptance.verify_rows), the same cache convention (calls.py: a
row's cache holds its verified prefix minus its last token).
"""

from __future__ import annotations

import torch

from workloads.decoding.acceptance import draw, verify_greedy_rows, verify_rows
from workloads.decoding.calls import Network, side_stream
from workloads.decoding.drafting import DraftSettings, candidates, commit_mask, proposals, scores, slot_logits
from workloads.decoding.lockstep import Layout, Rows
from workloads.decoding.masks import packed as packed_layout
from workloads.decoding.sampling import distribution, point_mass


def ar_rows(rows: Rows, verifier: Network, prompts: list[list[int]]) -> None:
    """`ar` over the batch: the verifier prefills every prompt (padded to the longest) and
    then takes one token a row a call."""
    logits, _ = prefill(rows, verifier, prompts)
    one = torch.ones(len(prompts), 1, dtype=torch.bool)
    single = torch.ones(len(prompts), dtype=torch.long)
    while True:
        tokens = rows.sample(logits)
        rows.iterated()
        stay = rows.leave(rows.emit(tokens[:, None], single), [verifier])
        if rows.done:
            return
        if stay.numel() < tokens.shape[0]:
            tokens, one, single = tokens[stay.to(tokens.device)], one[stay], single[stay]
        logits = rows.call(verifier, tokens[:, None], verifier.slots.held_lengths()[:, None], None, one,
                           single)[:, -1]


def prefill(rows: Rows, verifier: Network, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The verifier over every prompt, padded to the longest: (each row's logits at its last
    prompt token (L, V), the prompts padded (L, P))."""
    lengths = torch.tensor([len(p) for p in prompts])
    ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(p) for p in prompts], batch_first=True)
    positions = torch.arange(ids.shape[1]).expand(len(prompts), -1)
    logits = rows.call(verifier, ids, positions, None, positions < lengths[:, None], lengths)
    return logits[torch.arange(len(prompts)), (lengths - 1).to(logits.device)], ids


class Drafting:
    """A drafter's rows in lockstep (schedules.Drafter over every row): `pending`, what each
    row's drafter has not cached, waiting[i] of it; `verified` queues the verifier's latest
    rows, `block` is one drafting call, `draft` a whole draft (diffusion K steps or τ)."""

    def __init__(self, network):
        self.network = network
        self.pending = self.waiting = None

    def keep(self, stay: torch.Tensor) -> None:
        self.pending, self.waiting = self.pending[stay.to(self.pending.device)], self.waiting[stay]

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
        layout = Layout.of(self.waiting, 1 + widths, int((self.waiting + 1 + widths).max()), True, False)
        ids = _block_ids(self.pending, self.waiting, last, tokens, layout, mask_id)
        positions = self.network.slots.held_lengths()[:, None] + torch.arange(ids.shape[1])
        logits = rows.call(self.network, ids, positions, layout.among, layout.kept,
                           torch.where(served, layout.real, 0))
        self.waiting = torch.zeros_like(self.waiting)
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
        logits, self.hidden = rows.timed(self.network, forward, torch.where(served, blocks, 0), ids.numel(),
                                         commit)
        self.waiting = torch.zeros_like(self.waiting)
        return logits  # self.hidden: the block rows' states, for DFlash 2's candidate chain


class ChainRows(FeatureRows):
    """A DFlash 2 drafter's rows: one block pass, then its candidate chain drawn slot by slot
    over every row at once (dflash.chain_draft)."""

    def draft(self, rows: Rows, last: torch.Tensor, widths: torch.Tensor, width: int,
              settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor]:
        """dflash.chain_draft over every live row, row i's chain widths[i] slots long: a
        candidate c after the token t chosen before it scores logit(c) + ⟨pred(t) ⊙ W h,
        succ(c)⟩, drawn from q = softmax(s / T) over the slot's candidates (argmax at a
        point-mass setting). Returns (tokens (L, W), q (L, W, V))."""
        selector = self.network.model.candidate_selector
        canvas = torch.full((last.shape[0], width), settings.mask_token_id, dtype=torch.long)
        if width == 0:
            return canvas, torch.zeros(last.shape[0], 0, 1)
        logits = slot_logits(self.block(rows, last, canvas, widths, widths > 0, settings.mask_token_id),
                             settings)  # (L, W, V), the mask token excluded
        unary, candidates = logits.topk(selector.top_k, dim=-1)  # (L, W, k)
        states = selector.hidden_projection(self.hidden[:, 1:].to(selector.hidden_projection.weight.dtype))
        successors = selector.successor_codebook(candidates)  # (L, W, k, r)
        before, q, tokens = last.to(logits.device), torch.zeros_like(logits), []
        for i in range(width):  # slot by slot: each draws after the token chosen before it
            scores = unary[:, i] + (successors[:, i] @ (selector.predecessor_codebook(before)
                                                        * states[:, i]).float()[..., None])[..., 0]
            if point_mass(settings.temperature, settings.top_k):
                chosen = scores.argmax(-1)
                q[:, i].scatter_(1, candidates[:, i].gather(1, chosen[:, None]), 1.0)
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
    counting nothing. Returns (tokens (L, W), q (L, W, V)), W = `width`."""
    tokens = torch.full((last.shape[0], width), settings.mask_token_id, dtype=torch.long)
    masked = torch.arange(width) < widths[:, None]
    q, step = None, 0
    while bool(masked.any()):
        active = masked.any(1)
        counts = torch.where(active, widths, 0)
        logits = drafter.block(rows, last, tokens, widths, active, settings.mask_token_id)
        proposal, untempered = proposals(logits, settings)
        device, vocab = proposal.device, proposal.shape[-1]
        drawn = candidates(proposal, settings,
                           lambda c=counts, v=vocab, d=device: rows.exponential(c, width, v, d)).cpu()
        if settings.steps is not None and settings.steps - step == 1:
            chosen = masked.clone()
        else:
            probs = untempered.softmax(-1)
            priority = scores(settings.unmask, probs, drawn.to(device),
                              lambda c=counts, d=device: rows.uniform(c, width, d))
            chosen = commit_mask(settings, masked.to(device), priority, probs.amax(-1), step).cpu()
            chosen &= active[:, None]
        tokens = torch.where(chosen, drawn, tokens)
        q = proposal if q is None else torch.where(chosen[..., None].to(device), proposal, q)
        masked &= ~chosen
        step += 1
    return tokens, q if q is not None else torch.zeros(last.shape[0], width, 1)


def _block_ids(pending: torch.Tensor, waiting: torch.Tensor, last: torch.Tensor, tokens: torch.Tensor,
               layout: Layout, mask_id: int) -> torch.Tensor:
    """(L, Q) ids of a drafting call: each row's waiting tokens, its last verified token, its
    canvas (its slots past widths are padding: masks)."""
    q_width, width = layout.among.shape[1], tokens.shape[1]
    ids = torch.full((last.shape[0], q_width + width + 1), mask_id, dtype=torch.long)  # room for padding
    held = min(pending.shape[1], q_width)
    ids[:, :held] = torch.where(torch.arange(held) < waiting[:, None], pending[:, :held], mask_id)
    ids.scatter_(1, waiting[:, None], last[:, None])
    slots = torch.arange(width)
    canvas = torch.where(slots < (layout.real - waiting - 1)[:, None], tokens, mask_id)
    ids.scatter_(1, waiting[:, None] + 1 + slots, canvas)
    return ids[:, :q_width]


def verify_forward_rows(rows: Rows, verifier: Network, last: torch.Tensor, tokens: torch.Tensor,
                        widths: torch.Tensor) -> torch.Tensor:
    """The verifier over every live row's [last, its first widths[i] drafts of tokens (L, W)],
    appended to its cache; logits (L, W' + 1, V), W' the widest draft (near max_new_tokens
    every row drafts fewer)."""
    width = int(widths.max())
    layout = Layout.of(torch.zeros_like(widths), 1 + widths, width + 1, False, True)
    ids = torch.cat([last.cpu()[:, None], tokens[:, :width]], 1)
    positions = verifier.slots.held_lengths()[:, None] + torch.arange(width + 1)
    return rows.call(verifier, ids, positions, layout.among, layout.kept, layout.real)


def verify_finish_rows(rows: Rows, verifier: Network, logits: torch.Tensor, tokens: torch.Tensor,
                       q: torch.Tensor, widths: torch.Tensor, cached: int | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The acceptance rule on `verify_forward_rows`' logits (L, W' + 1, V); the rows after
    each row's accepted drafts leave the verifier's cache (of the `cached` rows its call kept;
    default 1 + widths[i]) and the counts are kept (verifying.verify_logits over every row).
    Returns (accepted (L,), token (L,))."""
    c = rows.config
    width = logits.shape[1] - 1
    drafted, lengths = tokens[:, :width].to(logits.device), widths.to(logits.device)
    if point_mass(c.temperature, c.top_k) and c.rule == "lossless":
        accepted, token = verify_greedy_rows(logits, drafted, lengths)
    else:
        p = distribution(logits, c.temperature, c.top_k, c.top_p)
        uniforms = rows.uniform(widths, width, p.device)
        noise = rows.exponential(widths + 1, width + 1, p.shape[-1], p.device)
        accepted, token = verify_rows(c.rule, p, q[:, :width].to(p.device), drafted, lengths, uniforms, noise,
                                      c.leniency)
    accepted, token = accepted.cpu(), token.cpu()
    verifier.slots.crop_all((widths if cached is None else cached - 1) - accepted)
    rows.verified(widths, accepted)
    return accepted, token


def speculative_rows(rows: Rows, drafter, verifier: Network, prompts: list[list[int]],
                     settings: DraftSettings, width: int) -> None:
    """`linear` or `packed` (rows.config.schedule) over the batch (schedules.speculative),
    `width` tokens drafted per iteration; `drafter`: IdRows (a standalone drafter) or
    FeatureRows (DFlash, reading the features the verifier's tap caught). Under `packed` the
    draft verified at iteration t + 1 was drafted from the prefix at the start of t, beside
    t's verification (on a GPU on a second stream); its first A_t slots are dropped."""
    packed = rows.config.schedule == "packed"
    logits, ids = prefill(rows, verifier, prompts)
    last = rows.sample(logits).cpu()
    drafter.verified(ids, _features(verifier), torch.tensor([len(p) for p in prompts]))
    networks = [verifier, drafter.network]
    stay = rows.leave(rows.emit(last[:, None], torch.ones_like(last)), networks)
    last = last[stay]
    drafter.keep(stay)
    full = torch.full_like(last, width)
    if packed and not rows.done:
        tokens, q = drafter.draft(rows, last, full, width, settings)
        have = full
    while not rows.done:
        room = rows.remaining() - 1  # a recovered or bonus token follows
        if packed:
            widths = torch.minimum(have, room)
            logits = verify_forward_rows(rows, verifier, last, tokens, widths)
            features = _features(verifier)
            with side_stream(verifier.device):
                fresh, fresh_q = drafter.draft(rows, last, full, width, settings)
        else:
            widths = room.clamp(max=width)
            tokens, q = drafter.draft(rows, last, widths, width, settings)
            logits = verify_forward_rows(rows, verifier, last, tokens, widths)
            features = _features(verifier)
        accepted, token = verify_finish_rows(rows, verifier, logits, tokens, q, widths)
        checked = torch.cat([last[:, None], tokens[:, :logits.shape[1] - 1]], 1)  # the verifier's ids
        drafter.verified(checked, features, accepted + 1)
        emitted = torch.cat([tokens[:, :width], torch.zeros_like(last)[:, None]], 1)
        emitted[torch.arange(last.shape[0]), accepted] = token
        stay = rows.leave(rows.emit(emitted, accepted + 1), networks)
        last, full = token[stay], full[stay]
        drafter.keep(stay)
        if packed:  # the slots the verifier just filled are dropped from the next draft
            keep = (accepted + 1)[stay]
            tokens, q, have = _shifted(fresh[stay], fresh_q[stay.to(fresh_q.device)], keep)


def _shifted(tokens: torch.Tensor, q: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each row's draft (L, W) and q (L, W, V) without its first keep[i] slots, left-aligned,
    and how many slots remain (L,)."""
    width = tokens.shape[1]
    index = (keep[:, None] + torch.arange(width)).clamp(max=max(width - 1, 0))
    moved_q = q.gather(1, index.to(q.device)[..., None].expand(-1, -1, q.shape[-1]))
    return tokens.gather(1, index), moved_q, (width - keep).clamp(min=0)


def diffusion_rows(rows: Rows, drafter: IdRows, prompts: list[list[int]], settings: DraftSettings) -> None:
    """`diffusion` over the batch (schedules.diffusion): the drafter alone, block by block."""
    lengths = torch.tensor([len(p) for p in prompts])
    ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(p) for p in prompts], batch_first=True)
    last = ids[torch.arange(len(prompts)), lengths - 1]
    drafter.verified(ids, None, lengths - 1)  # the prompt but its last token waits to be cached
    block = rows.config.block
    while not rows.done:
        widths = rows.remaining().clamp(max=block)
        tokens, _ = drafter.draft(rows, last, widths, block, settings)
        rows.iterated()
        drafter.verified(torch.cat([last[:, None], tokens], 1), None, widths)
        ends = tokens[torch.arange(last.shape[0]), widths - 1]
        stay = rows.leave(rows.emit(tokens, widths), [drafter.network])
        last = ends[stay]
        drafter.keep(stay)


def one_call_rows(rows: Rows, model: Network, prompts: list[list[int]], settings: DraftSettings,
                  width: int, quadratic: bool) -> None:
    """Self-speculative `packed` or `quadratic` over the batch (selfspec._one_call): one call a
    iteration holds the verify region [last, draft, mask padding] and the proposal regions,
    the same layout for every row (selfspec's masks.packed), so only ids and positions differ."""
    block, mask = width + 1, settings.mask_token_id
    last, tokens, q = _self_start(rows, model, prompts, settings, width)
    stay = rows.leave(rows.emit(last[:, None], torch.ones_like(last)), [model])
    last, tokens, q = last[stay], tokens[stay], q[stay.to(q.device)]
    have = torch.full_like(last, width)
    regions = [(h, block + 1) for h in range(block)] if quadratic else [(0, block)]
    layout = packed_layout(block, regions)
    offsets = torch.cat([torch.arange(block)] + [torch.arange(h, h + size) for h, size in regions])
    copies = torch.tensor([h for h, _ in regions])  # each region's first row copies verify row h
    starts = torch.tensor([block + sum(size for _, size in regions[:i]) for i in range(len(regions))])
    slots = torch.arange(width)
    while not rows.done:
        widths = torch.minimum(have, rows.remaining() - 1)
        live = last.shape[0]
        ids = torch.full((live, layout.shape[0]), mask, dtype=torch.long)
        ids[:, 0] = last
        ids[:, 1:block] = torch.where(slots < widths[:, None], tokens, mask)  # padded: never accepted
        ids[:, starts] = ids[:, copies]
        kept = (torch.arange(ids.shape[1]) < block).expand(live, -1)
        positions = model.slots.held_lengths()[:, None] + offsets
        logits = rows.call(model, ids, positions, layout.expand(live, -1, -1), kept,
                           torch.full((live,), ids.shape[1]))
        n = int(widths.max())
        accepted, token = verify_finish_rows(rows, model, logits[:, :n + 1], tokens, q, widths, cached=block)
        emitted = torch.cat([tokens, torch.zeros_like(last)[:, None]], 1)
        emitted[torch.arange(live), accepted] = token
        if quadratic:  # the branch of the accepted count, minus the recovered or bonus token's slot
            start, have = block + accepted * (block + 1) + 1, torch.full_like(last, width)
        else:  # proposals from P_{t-1}: the first A_t slots were just filled
            start, have = block + accepted + 1, (width - accepted - 1).clamp(min=0)
        tokens, q = _self_proposals(rows, logits, start, have, width, settings)
        stay = rows.leave(rows.emit(emitted, accepted + 1), [model])
        last, tokens, q, have = token[stay], tokens[stay], q[stay.to(q.device)], have[stay]


def _self_proposals(rows: Rows, logits: torch.Tensor, start: torch.Tensor, counts: torch.Tensor,
                    width: int, settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's proposals from its region [anchor, counts[i] slots] at column start[i] of
    logits (L, Q, V), drawn from its generator: (tokens (L, W), q (L, W, V))."""
    index = (start[:, None] + torch.arange(width + 1)).clamp(max=logits.shape[1] - 1).to(logits.device)
    region = logits.gather(1, index[..., None].expand(-1, -1, logits.shape[-1]))
    proposal, _ = proposals(region, settings)
    drawn = candidates(proposal, settings,
                       lambda: rows.exponential(counts, width, proposal.shape[-1], proposal.device))
    return drawn.cpu(), proposal


def _self_start(rows: Rows, model: Network, prompts: list[list[int]], settings: DraftSettings,
                width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """selfspec._start over every row: the first token and a full draft of `width` after it.
    Greedy: the prompt and a region [its last token, W + 1 masks] that sees the prompt but
    that token, in one call; sampling: a prefill, then a drafting call."""
    if not point_mass(rows.config.temperature, rows.config.top_k):
        logits, _ = prefill(rows, model, prompts)
        first = rows.sample(logits).cpu()
        full = torch.full_like(first, width)
        drafter = ModelRows(model)
        drafter.verified(first[:, None], None, first)  # nothing waits: the prompt is cached
        tokens, q = drafter.draft(rows, first, full, width, settings)
        return first, tokens, q
    lengths = torch.tensor([len(p) for p in prompts])
    padded = torch.nn.utils.rnn.pad_sequence([torch.tensor(p) for p in prompts], batch_first=True)
    size, region = padded.shape[1], width + 2
    layout = Layout.of(lengths, torch.full_like(lengths, region), size + region, True, False)
    column = torch.arange(size + region)
    ends = lengths - 1  # the prompt's last token: copied into the region, which does not see it
    in_region = (column >= lengths[:, None]) & (column < (lengths + region)[:, None])
    among = layout.among & ~(in_region[:, :, None] & (column == ends[:, None])[:, None, :])
    ids = torch.where(column < lengths[:, None], torch.nn.functional.pad(padded, (0, region)),
                      settings.mask_token_id)
    ids[torch.arange(len(prompts)), lengths] = padded[torch.arange(len(prompts)), ends]
    positions = torch.where(in_region, ends[:, None] + column - lengths[:, None], column)
    logits = rows.call(model, ids, positions, among, layout.kept, layout.real)
    first = rows.sample(logits[torch.arange(len(prompts)), ends.to(logits.device)]).cpu()
    tokens, q = _self_proposals(rows, logits, lengths + 1, torch.full_like(lengths, width), width, settings)
    return first, tokens, q


def _features(verifier: Network) -> torch.Tensor | None:
    """The features (L, Q, F) the verifier's tap caught in its latest call, if it has one."""
    return verifier.tap.features if verifier.tap is not None else None
