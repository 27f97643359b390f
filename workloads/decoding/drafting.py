"""Diffusion drafting: fill a canvas of W masked positions after each row's prefix.

Each denoising step evaluates [last verified token, canvas] in one drafting call, turns the
logits of the masked slots into proposal distributions q (temperature, top-k, top-p), draws
a candidate for every masked slot, and commits some of them:

* fixed K steps: ceil(remaining / steps left) slots per step;
* threshold τ: every slot whose top probability reaches τ (at least one per step); under
  `ltr` only the longest run of such slots starting at the leftmost masked slot.

Which slots go first is the unmasking policy: `ltr` (leftmost), `confidence` (probability
of the candidate), `margin` (top-1 minus top-2 probability), `entropy` (lowest first) or
`random`. Scores use the model's untempered distribution, so greedy drafting still ranks.
Each committed token keeps the q it was drawn from: that is the proposal rejection
sampling needs. It is exact only if, given the earlier draft tokens, each token was drawn
from its stored q (docs/concepts.md, Decoding): one step, or left-to-right commits decided without looking
at the drawn tokens. So τ is judged on a slot's top probability, never on the probability
of the token drawn there: keeping a draw only when it is likely would skew the kept
tokens towards likely ones (at temperature 0 the two are the same, the draw is the argmax).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workloads.decoding.acceptance import draw
from workloads.decoding.rows import Rows
from workloads.decoding.sampling import distribution, point_mass


@dataclass(frozen=True)
class DraftSettings:
    steps: int | None  # K, or None for the threshold rule
    threshold: float | None
    unmask: str
    temperature: float
    top_k: int
    top_p: float
    mask_token_id: int
    shifted: bool  # Dream-style: row i predicts slot i (row 0 is the last verified token)
    vocab: int | None = None  # the verifier's vocabulary: proposals are over its ids
    forbidden: tuple[int, ...] = ()  # never proposed (ids the verifier does not have, ...)


def scores(policy: str, probs: torch.Tensor, candidates: torch.Tensor,
           uniform: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Priority of each slot under `policy` (higher goes first).

    probs: (..., W, V) untempered model distribution; candidates: (..., W) drawn ids -> (..., W);
    uniform: U(0, 1) draws (..., W), asked for only by `random`.
    """
    w = probs.shape[-2]
    if policy == "ltr":
        return -torch.arange(w, dtype=torch.float32, device=probs.device).expand(candidates.shape)
    if policy == "confidence":
        return probs.gather(-1, candidates[..., None]).squeeze(-1)
    if policy == "margin":
        top2 = probs.topk(2, dim=-1).values
        return top2[..., 0] - top2[..., 1]
    if policy == "entropy":
        return (probs * probs.clamp_min(1e-30).log()).sum(-1)  # −H: low entropy first
    if policy == "random":
        return uniform().to(probs.device)
    raise ValueError(f"unmask must be ltr, confidence, margin, entropy or random; got {policy!r}")


def commit_mask(settings: DraftSettings, masked: torch.Tensor, priority: torch.Tensor,
                top: torch.Tensor, step: int) -> torch.Tensor:
    """Which masked slots (R, W) bool of R canvases to commit at this step; top: (R, W) each
    slot's top probability, the threshold rule's confidence. A canvas with nothing masked
    commits nothing.

    Fixed K: the ceil(remaining / (K − step)) masked slots of highest priority (ties to the
    leftmost). τ: every masked slot whose top probability reaches τ, and at least the
    masked slot of highest priority; under `ltr` only the run of such slots from the
    leftmost masked one."""
    blocked = torch.tensor(float("-inf"), device=priority.device)
    priority = torch.where(masked, priority, blocked)
    remaining = masked.sum(-1)
    if settings.threshold is None:
        count = -(-remaining // (settings.steps - step))
        rank = priority.argsort(dim=-1, descending=True, stable=True).argsort(dim=-1)
        return (rank < count[..., None]) & masked
    any_masked = remaining > 0
    sure = masked & (top >= settings.threshold)
    slots = torch.arange(masked.shape[-1], device=masked.device)
    first = masked.long().argmax(-1, keepdim=True)  # the leftmost masked slot
    if settings.unmask == "ltr":
        after = slots >= first
        run = (sure | ~after).long().cumprod(-1).bool() & after
        return (run | (slots == first)) & any_masked[..., None]
    best = priority.argmax(-1, keepdim=True)
    return (sure | (slots == best)) & any_masked[..., None]


def slot_logits(logits: torch.Tensor, settings: DraftSettings) -> torch.Tensor:
    """The rows of regions [anchor, m slots], logits (..., m + 1, V), as float logits per slot
    (..., m, V) with the mask token excluded: shifted models read slot i from row i, others
    from row i + 1."""
    logits = (logits[..., :-1, :] if settings.shifted else logits[..., 1:, :]).float()
    logits[..., settings.mask_token_id] = float("-inf")
    return logits


def proposal_logits(logits: torch.Tensor, settings: DraftSettings) -> torch.Tensor:
    """The untempered float logits (..., m, V) of the slots of drafting regions [anchor, m
    slots], logits (..., m + 1, V) (`slot_logits`). V is the verifier's vocabulary; the
    mask token and forbidden ids are never proposed."""
    logits = slot_logits(logits, settings)
    if settings.vocab is not None and logits.shape[-1] != settings.vocab:  # align with the verifier's ids
        logits = torch.nn.functional.pad(logits, (0, max(0, settings.vocab - logits.shape[-1])),
                                         value=float("-inf"))[..., : settings.vocab]
    if settings.forbidden:
        logits[..., [i for i in settings.forbidden if i < logits.shape[-1]]] = float("-inf")
    return logits


def proposals(logits: torch.Tensor, settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Proposals from the rows of drafting regions [anchor, m slots]: logits (..., m + 1, V)
    -> q (..., m, V) after the drafter's sampling settings, and the untempered float logits
    (..., m, V) (`proposal_logits`)."""
    logits = proposal_logits(logits, settings)
    return distribution(logits, settings.temperature, settings.top_k, settings.top_p), logits


def candidates(proposal: torch.Tensor, settings: DraftSettings,
               noise: Callable[[], torch.Tensor]) -> torch.Tensor:
    """A candidate per slot drawn from its proposal (..., m, V): at a point-mass setting the
    argmax, drawing nothing (`proposal` may then be the untempered logits: the proposal is
    one-hot at their argmax); else with Exp(1) `noise()` (..., m, V)."""
    if point_mass(settings.temperature, settings.top_k):  # one-hot proposals: the draw is their argmax
        return proposal.argmax(-1)
    return draw(proposal, noise())


def draft(rows: Rows, drafter, last: torch.Tensor, widths: torch.Tensor, width: int,
               settings: DraftSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """A draft over every live row: row i drafts widths[i] tokens after its verified
    prefix ending in last[i] (K steps or τ, each a call of `drafter`, drafters.py).
    Every call runs over every live row; a row whose canvas is full rides along, drawing and
    counting nothing. Returns (tokens (L, W), q (L, W, V), or None: one-hot at the draft,
    `proposed`), W = `width`."""
    tokens = torch.full((last.shape[0], width), settings.mask_token_id, dtype=torch.long)
    masked = torch.arange(width) < widths[:, None]
    q, step = None, 0
    while bool(masked.any()):
        active = masked.any(1)

        def counts(a: torch.Tensor = active) -> torch.Tensor:  # the slots each row draws for (greedy: none)
            return torch.where(a, widths, 0)

        logits = drafter.block(rows, last, tokens, widths, active, settings.mask_token_id)
        drawn, proposal, untempered = proposed(rows, logits, settings, counts, width)
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


def proposed(rows: Rows, logits: torch.Tensor, settings: DraftSettings, counts: Callable[[], torch.Tensor],
             width: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Each live row's candidates (L, W), on the host, from its drafting regions' logits
    (L, W + 1, V), with their proposals q (L, W, V) and untempered logits (L, W, V)
    (`proposal_logits`). At a point-mass setting q is None: one-hot at the draft,
    built only by an acceptance rule that reads it (verifying.accept). Else each row draws
    its first counts()[i] slots' noise from its own generator."""
    untempered = proposal_logits(logits, settings)
    if point_mass(settings.temperature, settings.top_k):
        return candidates(untempered, settings, None).cpu(), None, untempered
    proposal = distribution(untempered, settings.temperature, settings.top_k, settings.top_p)
    drawn = candidates(proposal, settings,
                       lambda: rows.exponential(counts(), width, proposal.shape[-1], proposal.device))
    return drawn.cpu(), proposal, untempered
