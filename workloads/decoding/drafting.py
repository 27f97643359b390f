"""Diffusion drafting: fill a canvas of W masked positions after the prefix.

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
from its stored q (DESIGN.md): one step, or left-to-right commits decided without looking
at the drawn tokens. So τ is judged on a slot's top probability, never on the probability
of the token drawn there: keeping a draw only when it is likely would skew the kept
tokens towards likely ones (at temperature 0 the two are the same, the draw is the argmax).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workloads.decoding.acceptance import draw
from workloads.decoding.calls import CachedModel
from workloads.decoding.sampling import distribution, point_mass


@dataclass(frozen=True)
class Draft:
    tokens: torch.Tensor  # (W,) drafted ids
    q: torch.Tensor  # (W, V) the distribution each token was drawn from
    steps: int  # denoising steps (drafting calls) used


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


def scores(
    policy: str, probs: torch.Tensor, candidates: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Priority of each slot under `policy` (higher goes first).

    probs: (W, V) untempered model distribution; candidates: (W,) drawn ids -> (W,).
    """
    w = probs.shape[0]
    if policy == "ltr":
        return -torch.arange(w, dtype=torch.float32, device=probs.device)
    if policy == "confidence":
        return probs.gather(1, candidates[:, None]).squeeze(1)
    if policy == "margin":
        top2 = probs.topk(2, dim=-1).values
        return top2[:, 0] - top2[:, 1]
    if policy == "entropy":
        return (probs * probs.clamp_min(1e-30).log()).sum(-1)  # −H: low entropy first
    if policy == "random":
        return torch.rand(w, generator=generator, device=generator.device).to(probs.device)
    raise ValueError(f"unmask must be ltr, confidence, margin, entropy or random; got {policy!r}")


def commit_mask(settings: DraftSettings, masked: torch.Tensor, priority: torch.Tensor,
                top: torch.Tensor, step: int) -> torch.Tensor:
    """Which masked slots (W,) bool to commit at this step; top: (W,) each slot's top
    probability, the threshold rule's confidence."""
    remaining = int(masked.sum())
    priority = torch.where(masked, priority, torch.tensor(float("-inf"), device=priority.device))
    if settings.threshold is None:
        count = -(-remaining // (settings.steps - step))
        chosen = torch.zeros_like(masked)
        chosen[priority.topk(count).indices] = True
        return chosen
    sure = masked & (top >= settings.threshold)
    if settings.unmask == "ltr":
        first = int(masked.long().argmax())
        run = sure[first:].long().cumprod(0).bool()
        chosen = torch.zeros_like(masked)
        chosen[first:] = run
        chosen[first] = True
        return chosen
    sure[int(priority.argmax())] = True
    return sure


def slot_logits(logits: torch.Tensor, settings: DraftSettings) -> torch.Tensor:
    """The rows of one region [anchor, m slots], logits (m + 1, V), as float logits per slot
    (m, V) with the mask token excluded: shifted models read slot i from row i, others from
    row i + 1."""
    logits = (logits[:-1] if settings.shifted else logits[1:]).float()
    logits[:, settings.mask_token_id] = float("-inf")
    return logits


def propose(logits: torch.Tensor, settings: DraftSettings,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Proposals from the rows of one drafting region [anchor, m slots]: logits (m + 1, V)
    -> q (m, V) after the drafter's sampling settings, candidates (m,) drawn from q, and the
    untempered float logits (m, V) (`slot_logits`). V is the verifier's vocabulary; the mask
    token and forbidden ids are never proposed."""
    logits = slot_logits(logits, settings)
    if settings.vocab is not None and logits.shape[-1] != settings.vocab:  # align with the verifier's ids
        logits = torch.nn.functional.pad(logits, (0, max(0, settings.vocab - logits.shape[-1])),
                                         value=float("-inf"))[:, : settings.vocab]
    if settings.forbidden:
        logits[:, [i for i in settings.forbidden if i < logits.shape[-1]]] = float("-inf")
    proposal = distribution(logits, settings.temperature, settings.top_k, settings.top_p)
    if point_mass(settings.temperature, settings.top_k):  # one-hot proposals: the draw is their argmax
        return proposal, proposal.argmax(-1), logits
    return proposal, draw(proposal, torch.empty_like(proposal).exponential_(generator=generator)), logits


def diffusion_draft(drafter: CachedModel, pending: list[int], last: int, width: int,
                    settings: DraftSettings, generator: torch.Generator) -> Draft:
    """Draft `width` tokens after the verified prefix whose last token is `last`.

    `pending` are verified tokens not yet in the drafter's cache; the first call caches them.
    """
    tokens = torch.full((width,), settings.mask_token_id, dtype=torch.long, device=drafter.device)
    q = torch.zeros(0, 1, device=drafter.device)  # a width-0 draft: no call, nothing to verify
    step = 0
    while bool((tokens == settings.mask_token_id).any()):
        proposal, candidates, logits = propose(drafter.block(pending, last, tokens), settings, generator)
        pending = []
        masked = tokens == settings.mask_token_id
        if settings.steps is not None and settings.steps - step == 1:
            chosen = masked  # the last of K steps commits every slot still masked
        else:
            probs = logits.softmax(-1)
            chosen = commit_mask(settings, masked, scores(settings.unmask, probs, candidates, generator),
                                 probs.amax(-1), step)
        tokens = torch.where(chosen, candidates, tokens)
        q = proposal if step == 0 else torch.where(chosen[:, None], proposal, q)
        step += 1
    return Draft(tokens, q, step)
