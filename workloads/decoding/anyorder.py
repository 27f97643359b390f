"""Any-order Packed-SS with greedy decoding (paper 2610.33379, Appendix C, Algorithm 3).

Tokens keep their output positions; a later position may be accepted before an earlier one.
Each iteration takes the window of up to W = B − 1 positions from the leftmost unresolved
one ℓ (capped at the last position E), its unresolved positions U, and an order π over U
fixed before the call: `confidence` ranks positions by the probability their draft token had
when proposed, ties and positions without a draft last, in textual order (Appendix E.6).

The any-order verifier is the network's diffusion mode (a masked diffusion model is an
any-order autoregressive model): the prediction at position j given the prefix and a set S
of window tokens is the argmax at j of a canvas [last, window] holding the accepted tokens
and S, every other slot masked. One call evaluates the canvases of ranks r = 1 .. min(κ + 1,
u) (S = the drafts at ranks < r; κ = ranks with a draft before the first without); the rank-1
canvas, which holds the accepted tokens only, also proposes the next draft for every slot.
Matches are counted in rank order (h); A = min(h + 1, u) positions are accepted, the first
accepted EOS ends the output at its position, and the positions still open keep their
proposals as the next draft. The output is the diffusion mode's any-order greedy decoding
under those orders (Proposition C.1), not the AR mode's, so results say `exact: false`.

The KV cache holds the contiguous accepted prefix minus its last token, from AR-mode rows:
tokens that join that prefix ride as causal rows of the next call. It decodes one prompt
(a batch of one row: the kind refuses more).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from workloads.decoding.drafting import DraftSettings, slot_logits
from workloads.decoding.layout import Call
from workloads.decoding.masks import packed
from workloads.decoding.network import Network
from workloads.decoding.rows import Rows


@dataclass(frozen=True)
class Step:
    """One iteration, for checking against the serial reference: ranks in order, accepted count."""

    order: list[int]
    accepted: int


def confidence_order(unresolved: list[int], drafts: dict[int, tuple[int, float]]) -> list[int]:
    """π over `unresolved`: drafted positions by decreasing score, then the rest, ties and
    the rest in textual order."""
    return sorted(unresolved, key=lambda j: (j not in drafts, -drafts[j][1] if j in drafts else 0.0, j))


def regions(rows: Rows, model: Network, causal: list[int], canvases: list[tuple[int, list[int]]]
            ) -> list[torch.Tensor]:
    """One call of the row's network: `causal` rows (all but the last kept in the cache),
    then per canvas (h, slots) a region [copy of causal[h], slots] that sees the first h
    causal rows and itself (masks.packed), dropped. Returns each region's logits."""
    v = len(causal)
    ids, offsets = list(causal), [np.arange(v)]
    for h, slots in canvases:
        ids += [causal[h]] + slots
        offsets.append(np.arange(h, h + len(slots) + 1))
    among = packed(v, [(h, len(slots) + 1) for h, slots in canvases])
    call = Call(torch.tensor([ids]), model.slots.positions(np.concatenate(offsets)), among[None],
                np.array([v - 1]), torch.tensor([len(ids)]))
    logits = rows.call(model, call)[0]
    out, start = [], v
    for _, slots in canvases:
        out.append(logits[start:start + len(slots) + 1])
        start += len(slots) + 1
    return out


def anyorder_packed(rows: Rows, model: Network, prompts: list[list[int]], settings: DraftSettings,
                    width: int) -> list[Step]:
    """Any-order Packed-SS over the batch's one row (prompts: one prompt); returns its
    iterations, for checking against the serial reference."""
    (prompt,) = prompts
    mask, eos = settings.mask_token_id, {rows.eos} - {None}
    end = rows.config.max_new_tokens  # E: the output is positions 0 .. end - 1
    accepted: dict[int, int] = {}
    drafts: dict[int, tuple[int, float]] = {}  # position -> (token, score)
    pending = list(prompt)  # the contiguous prefix not yet cached, ending with `last`
    contiguous = 0
    steps = []
    while contiguous < end:
        window = range(contiguous, min(end, contiguous + width))
        unresolved = [j for j in window if j not in accepted]
        order = confidence_order(unresolved, drafts)
        kappa = next((r for r, j in enumerate(order) if j not in drafts), len(order))
        canvases = []
        for r in range(min(kappa + 1, len(order))):
            shown = {**accepted, **{j: drafts[j][0] for j in order[:r]}}
            slots = [shown.get(j, mask) for j in window] + [mask] * (width - len(window))
            canvases.append((len(pending) - 1, slots))
        predictions = [slot_logits(region, settings) for region in regions(rows, model, pending, canvases)]
        votes = [int(predictions[r][order[r] - contiguous].argmax()) for r in range(len(canvases))]
        h = next((r for r in range(kappa) if drafts[order[r]][0] != votes[r]), kappa)
        a = min(h + 1, len(order))
        for r in range(a):
            accepted[order[r]] = votes[r]
        ends = [j + 1 for j, token in accepted.items() if token in eos]
        end = min([end, *ends])
        accepted = {j: t for j, t in accepted.items() if j < end}
        probs = predictions[0].softmax(-1)
        best = probs.max(-1)
        drafts = {j: (int(best.indices[j - contiguous]), float(best.values[j - contiguous]))
                  for j in unresolved if j not in accepted and j < end}
        rows.verified(torch.tensor([kappa]), torch.tensor([h]))
        steps.append(Step(order, a))
        grown = contiguous
        while grown in accepted:
            grown += 1
        pending = pending[-1:] + [accepted[j] for j in range(contiguous, grown)]
        contiguous = grown
    tokens = torch.tensor([[accepted[j] for j in range(end)]])
    rows.leave(rows.emit(tokens, torch.tensor([end])), [model])
    return steps
