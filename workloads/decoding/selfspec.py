"""Self-speculative schedules on one dual-mode network (paper 2610.33379): Linear-SS,
Quadratic-SS and Packed-SS (Algorithms 1–2, layouts of Appendix D.1, start of Appendix E.2).

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

import torch

from workloads.decoding.calls import CachedModel
from workloads.decoding.drafting import Draft, DraftSettings, diffusion_draft, propose
from workloads.decoding.masks import packed as packed_layout
from workloads.decoding.sampling import point_mass
from workloads.decoding.state import DecodeState
from workloads.decoding.verifying import verify_logits, verify_step


def call(model: CachedModel, rows: list[int], regions: list[tuple[int, list[int]]],
         ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One packed call: `rows` causal (kept in the cache), then regions (h, slots): the
    copy of rows[h] and `slots` (mask tokens, or tokens already placed), dropped afterwards.
    Returns the logits of the rows (len(rows), V) and of each region (len(slots) + 1, V)."""
    n, v = model.length, len(rows)
    ids, positions = list(rows), [torch.arange(n, n + v)]
    for h, slots in regions:
        ids += [rows[h]] + slots
        positions.append(torch.arange(n + h, n + h + len(slots) + 1))
    layout = packed_layout(v, [(h, len(slots) + 1) for h, slots in regions])
    logits = model.call(ids, layout, torch.cat(positions), keep=v)
    out, start = [], v
    for _, slots in regions:
        out.append(logits[start:start + len(slots) + 1])
        start += len(slots) + 1
    return logits[:v], out


def _proposal(state: DecodeState, logits: torch.Tensor, settings: DraftSettings) -> Draft:
    q, tokens, _ = propose(logits, settings, state.generator)
    return Draft(tokens, q, 1)


def _start(state: DecodeState, model: CachedModel, prompt: list[int], settings: DraftSettings,
           w: int) -> tuple[int, Draft]:
    """Prefill; returns the first token and a full draft of W tokens after it."""
    if point_mass(state.config.temperature, state.config.top_k):
        logits, (region,) = call(model, prompt, [(len(prompt) - 1, [settings.mask_token_id] * (w + 1))])
        first = state.sample(logits[-1])
        return first, _proposal(state, region[1:], settings)
    first = state.sample(model.causal(prompt)[-1])
    return first, diffusion_draft(model, [], first, w, settings, state.generator)


def _linear(state: DecodeState, model: CachedModel, prompt: list[int], settings: DraftSettings,
            w: int) -> None:
    last = state.sample(model.causal(prompt)[-1])
    if state.out.extend([last]):
        return
    while True:
        width = min(w, state.out.remaining - 1)
        draft = diffusion_draft(model, [], last, width, settings, state.generator)
        emitted = verify_step(state, model, last, draft)  # the drafting rows left no trace in the cache
        last = emitted[-1]
        if state.out.extend(emitted):
            return


def _one_call(state: DecodeState, model: CachedModel, prompt: list[int], settings: DraftSettings, w: int,
              quadratic: bool) -> None:
    block, mask = w + 1, settings.mask_token_id  # a region's rows: [last, W drafts]
    last, draft = _start(state, model, prompt, settings, w)
    if state.out.extend([last]):
        return
    while True:
        room = state.out.remaining - 1  # a recovered or bonus token follows the accepted drafts
        draft = Draft(draft.tokens[:room], draft.q[:room], 1)
        n = draft.tokens.shape[0]
        rows = [last] + draft.tokens.tolist() + [mask] * (w - n)
        regions = [(h, [mask] * block) for h in range(block)] if quadratic else [(0, [mask] * w)]
        logits, proposed = call(model, rows, regions)
        emitted = verify_logits(state, logits[: n + 1], draft)
        model.crop(block - len(emitted))  # keep [last, accepted draft tokens]
        last = emitted[-1]
        if state.out.extend(emitted):
            return
        if quadratic:  # the branch of the accepted count, minus the recovered or bonus token's slot
            draft = _proposal(state, proposed[len(emitted) - 1][1:], settings)
        else:  # proposals from P_{t-1}: the first A_t slots were just filled
            draft = _proposal(state, proposed[0][len(emitted):], settings)


def self_speculative(state: DecodeState, model: CachedModel, prompt: list[int], settings: DraftSettings,
                     width: int) -> None:
    """`linear`, `packed` or `quadratic` (state.config.schedule) with drafts of `width` = W tokens."""
    schedule = state.config.schedule
    if schedule == "linear":
        _linear(state, model, prompt, settings, width)
    else:
        _one_call(state, model, prompt, settings, width, quadratic=schedule == "quadratic")
