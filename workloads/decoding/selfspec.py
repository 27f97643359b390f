"""Self-speculative schedules on one dual-mode network (paper 2610.33379): Linear-SS,
Quadratic-SS and Packed-SS (Algorithms 1–2, layouts of Appendix D.1, start of Appendix
E.2), every row of a batch at once. Linear-SS is schedules.speculative with the network
drafting for itself (drafters.SelfDrafter); this module holds the one-call schedules.

One KV cache holds the verified prefix minus its last token `last`, at positions < n. The
block size B is the paper's Nemotron block: a call region has B rows and a draft has
W = B − 1 tokens. The rows of a call:

* verify region: [last, d_1 .. d_W] causal at positions n .. n + B − 1 (an incomplete draft
  is padded with mask tokens, which cannot extend acceptance); row i gives p_{i+1};
* proposal region (h, m): [copy of the h-th verify token, m masks] at positions n + h ..
  n + h + m; it sees the cache, the verify rows before h and itself (bidirectionally), so it
  drafts positions n + h + 1 .. n + h + m from the prefix extended by d_1 .. d_h.

Per iteration:

* `linear`: a drafting call (region (0, W); K steps or τ allowed), then a verify call of
  [last, draft]: 2 NFE, 2B rows.
* `packed`: the verify region and region (0, W) in one call: 1 NFE, 2B rows. The proposals
  read P_{t−1} only; those at the A_t positions just emitted are dropped, the rest are the
  next draft (|D_t| = W − A_t).
* `quadratic`: the verify region and regions (h, B) for every acceptance length h = 0 ..
  B − 1 in one call: 1 NFE, B + B(B + 1) rows. Branch h = accepted count proposes the
  slot of the recovered or bonus token (dropped) and the W slots after it: a full next draft.

Start (Appendix E.2): greedy packed/quadratic run the prompt and region (P − 1, W + 1) in
one call, emit the first token and keep proposals 2 .. W + 1 as a full draft; when sampling,
a prefill then a drafting call give the first token and a full draft. Linear prefills.
Proposals are sampled only for the slots kept, after verification (Appendix E.4).
"""

from __future__ import annotations

import numpy as np
import torch

from workloads.decoding.drafters import SelfDrafter
from workloads.decoding.drafting import DraftSettings, proposed
from workloads.decoding.layout import Call, Layout, columns
from workloads.decoding.masks import packed as packed_layout
from workloads.decoding.network import Network
from workloads.decoding.rows import Rows, staying
from workloads.decoding.sampling import point_mass
from workloads.decoding.schedules import padded, prefill
from workloads.decoding.verifying import verify_finish


def one_call(rows: Rows, model: Network, prompts: list[list[int]], settings: DraftSettings,
             width: int, quadratic: bool) -> None:
    """Self-speculative `packed` or `quadratic` over the batch: one call an iteration holds
    the verify region [last, draft, mask padding] and the proposal regions, the same layout
    for every row (masks.packed), so only ids and positions differ."""
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
        logits = rows.call(model, Call(ids, positions, among, None, real))
        n = int(widths.max())
        accepted, token = verify_finish(rows, model, logits[:, :n + 1], tokens, q, widths)
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
    at the draft, drafting.proposed)."""
    region = columns(logits, start, width + 1)
    drawn, proposal, _ = proposed(rows, region, settings, lambda: counts, width)
    return drawn, proposal


def _self_start(rows: Rows, model: Network, prompts: list[list[int]], settings: DraftSettings,
                width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The start over every row: the first token and a full draft of `width` after it.
    Greedy: the prompt and a region [its last token, W + 1 masks] that sees the prompt but
    that token, in one call; sampling: a prefill, then a drafting call."""
    if not point_mass(rows.config.temperature, rows.config.top_k):
        logits, _ = prefill(rows, model, prompts)
        first = rows.sample(logits).cpu()
        full = torch.full_like(first, width)
        drafter = SelfDrafter(model)
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
    logits = rows.call(model, Call(ids, positions, among, layout.kept, layout.real))
    first = rows.sample(logits[torch.arange(len(prompts)), ends.to(logits.device)]).cpu()
    tokens, q = _self_proposals(rows, logits, lengths + 1, torch.full_like(lengths, width), width, settings)
    return first, tokens, q
