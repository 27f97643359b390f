"""Self-speculative `packed` and `quadratic` over every row of a batch at once (selfspec.py's
_one_call in lockstep): one call an iteration holds the verify region and the proposal
regions, the same layout for every row, so only ids and positions differ."""

from __future__ import annotations

import numpy as np
import torch

from workloads.decoding.calls import Network
from workloads.decoding.drafting import DraftSettings
from workloads.decoding.lockstep import Layout, Rows, staying
from workloads.decoding.lockstep_drafting import ModelRows, drawn_rows
from workloads.decoding.lockstep_schedules import padded, prefill
from workloads.decoding.lockstep_verifying import verify_finish_rows
from workloads.decoding.masks import packed as packed_layout
from workloads.decoding.sampling import point_mass


def one_call_rows(rows: Rows, model: Network, prompts: list[list[int]], settings: DraftSettings,
                  width: int, quadratic: bool) -> None:
    """Self-speculative `packed` or `quadratic` over the batch (selfspec._one_call): one call a
    iteration holds the verify region [last, draft, mask padding] and the proposal regions,
    the same layout for every row (selfspec's masks.packed), so only ids and positions differ."""
    block, mask = width + 1, settings.mask_token_id
    last, tokens, q = _self_start(rows, model, prompts, settings, width)
    stay = rows.leave(rows.emit(last[:, None], torch.ones_like(last)), [model])
    last, tokens, q = staying(stay, last, tokens, q)
    have = torch.full_like(last, width)
    regions = [(h, block + 1) for h in range(block)] if quadratic else [(0, block)]
    layout = packed_layout(block, regions)
    offsets = np.concatenate([np.arange(block)] + [np.arange(h, h + size) for h, size in regions])
    # each call's ids: base [last, draft, a mask] read at `source`, the verify rows, then
    # each region's first row a copy of verify row h and its other rows masks
    source = torch.cat([torch.arange(block)]
                       + [torch.tensor([h] + [block] * (size - 1)) for h, size in regions])
    slots = torch.arange(width)
    shape = None  # the rows' call layout, kept while no row leaves
    while not rows.done:
        widths = torch.minimum(have, rows.remaining() - 1)
        live = last.shape[0]
        if shape is None:
            shape = layout.expand(live, -1, -1), torch.full((live,), layout.shape[0]), torch.arange(live)
        among, real, every = shape
        canvas = torch.where(slots < widths[:, None], tokens, mask)  # padded: never accepted
        ids = torch.cat([last[:, None], canvas, torch.full((live, 1), mask)], 1)[:, source]
        positions = model.slots.positions(offsets)
        logits = rows.call(model, ids, positions, among, None, real)
        n = int(widths.max())
        accepted, token = verify_finish_rows(rows, model, logits[:, :n + 1], tokens, q, widths)
        emitted = torch.cat([tokens, torch.zeros_like(last)[:, None]], 1)
        emitted[every, accepted] = token
        if quadratic:  # the branch of the accepted count, minus the recovered or bonus token's slot
            start, have = block + accepted * (block + 1) + 1, torch.full_like(last, width)
        else:  # proposals from P_{t-1}: the first A_t slots were just filled
            start, have = block + accepted + 1, (width - accepted - 1).clamp(min=0)
        tokens, q = _self_proposals(rows, logits, start, have, width, settings)
        stay = rows.leave(rows.emit(emitted, accepted + 1), [model])
        if stay is not None:
            shape = None
        last, tokens, q, have = staying(stay, token, tokens, q, have)


def _self_proposals(rows: Rows, logits: torch.Tensor, start: torch.Tensor, counts: torch.Tensor,
                    width: int, settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's proposals from its region [anchor, counts[i] slots] at column start[i] of
    logits (L, Q, V), drawn from its generator: (tokens (L, W), q (L, W, V) or None: one-hot
    at the draft, lockstep_drafting.drawn_rows)."""
    index = (start[:, None] + torch.arange(width + 1)).clamp(max=logits.shape[1] - 1).to(logits.device)
    region = logits.gather(1, index[..., None].expand(-1, -1, logits.shape[-1]))
    drawn, proposal, _ = drawn_rows(rows, region, settings, lambda: counts, width)
    return drawn, proposal


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
    prompt_ids, lengths = padded(prompts)
    size, region = prompt_ids.shape[1], width + 2
    layout = Layout.of(lengths, torch.full_like(lengths, region), True, False)
    column = torch.arange(size + region)
    ends = lengths - 1  # the prompt's last token: copied into the region, which does not see it
    in_region = (column >= lengths[:, None]) & (column < (lengths + region)[:, None])
    among = layout.among & ~(in_region[:, :, None] & (column == ends[:, None])[:, None, :])
    ids = torch.where(column < lengths[:, None], torch.nn.functional.pad(prompt_ids, (0, region)),
                      settings.mask_token_id)
    ids[torch.arange(len(prompts)), lengths] = prompt_ids[torch.arange(len(prompts)), ends]
    positions = torch.where(in_region, ends[:, None] + column - lengths[:, None], column)
    logits = rows.call(model, ids, positions, among, layout.kept, layout.real)
    first = rows.sample(logits[torch.arange(len(prompts)), ends.to(logits.device)]).cpu()
    tokens, q = _self_proposals(rows, logits, lengths + 1, torch.full_like(lengths, width), width, settings)
    return first, tokens, q
