"""Acceptance rules: which drafted tokens the verifier keeps, and the token it adds.

Vocabulary (as in vLLM's rejection sampler): the leading drafted tokens the rule keeps are
*accepted*; at the first rejection the rule emits a *recovered* token drawn from the
residual; after a fully accepted draft it emits a *bonus* token drawn from p_{B+1}.

Every rule is rejection sampling against a target t_i built from the verifier's p_i and the
drafter's proposal q_i (the distribution y_i was actually drawn from, after temperature and
truncation):

* lossless: t = p.
* linear (λ ∈ [0, 1]): t = (1 − λ)·p + λ·q; λ = 0 is lossless, λ = 1 accepts everything.
* cactus (δ ≥ 0): t puts γ on the drafted y and scales the rest of p by (1 − γ)/(1 − π),
  π = p(y), γ the largest value ≥ π with KL(Bern(γ) ‖ Bern(π)) ≤ δ.
* match: draw x_i ~ t_i and accept y_i only if y_i = x_i; exact for any drafter.

Randomness comes in as arguments so the functions are pure: `uniforms` (B,) for the
accept tests and `noise` (B + 1, V) of Exp(1) draws, used as argmax(w / noise) to sample
from any non-negative weights w without normalising them (no NaN from a zero residual).
"""

from __future__ import annotations

import numpy as np
import torch

RULES = ("lossless", "linear", "cactus", "match")


def draw(weights: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Sample index ~ weights / Σweights as argmax(weights / noise), noise ~ Exp(1).

    weights, noise: (..., V) -> (...). Works on unnormalised, sparse or one-hot weights.
    """
    return (weights / noise).argmax(-1)


def cactus_gamma(pi: torch.Tensor, delta: float, iters: int = 12) -> torch.Tensor:
    """γ(π, δ) = max{γ ∈ [π, 1] : γ·log(γ/π) + (1 − γ)·log((1 − γ)/(1 − π)) ≤ δ}.

    The Bernoulli KL is increasing in γ on [π, 1] and equals −log π at γ = 1, so γ = 1 when
    δ ≥ −log π. Otherwise Newton's method in float64 from γ₀ = π + √(δ/2), which Pinsker's
    inequality (KL ≥ 2(γ − π)²) puts at or above the root: KL is convex there, so every
    step stays at or above the root and converges to it quadratically (12 steps leave
    KL − δ < 1e-15 over π ∈ [1e-4, 1), δ ∈ [1e-6, 3]).
    π = 0 gives γ = 0 (a token the verifier rules out is never accepted).
    """
    pi64 = pi.double().clamp(0.0, 1.0)
    gamma = (pi64 + (delta / 2) ** 0.5).clamp(max=1 - 1e-12)
    for _ in range(iters):
        excess = bernoulli_kl(gamma, pi64) - delta
        slope = torch.log(gamma / pi64) - torch.log((1 - gamma) / (1 - pi64))  # d KL / dγ
        gamma = torch.where(excess > 0, gamma - excess / slope, gamma)
    full = delta >= -torch.log(pi64)
    gamma = torch.where(full, torch.ones_like(pi64), gamma)
    return torch.where(pi64 <= 0, torch.zeros_like(pi64), gamma).to(pi.dtype)


def bernoulli_kl(gamma: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """KL(Bern(γ) ‖ Bern(π)) = γ·log(γ/π) + (1 − γ)·log((1 − γ)/(1 − π)), with 0·log 0 = 0."""
    a = torch.where(gamma > 0, gamma * torch.log(gamma / pi), torch.zeros_like(gamma))
    b = torch.where(gamma < 1, (1 - gamma) * torch.log((1 - gamma) / (1 - pi)), torch.zeros_like(gamma))
    return a + b


def residual(t: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Unnormalised law of the recovered token at the first rejection: [t − q]₊.

    Accepting y ~ q with probability min(1, t(y)/q(y)) emits y with mass min(t, q)(y); the
    rejection mass, Σ[t − q]₊, then makes the emitted token's law exactly t. t, q: (V,)."""
    return (t - q).clamp_min(0)


def target(rule: str, p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, leniency: float) -> torch.Tensor:
    """The distribution t_i the rule accepts against.

    p, q: (..., B, V) verifier and proposal distributions; draft: (..., B) drafted ids -> (..., B, V).
    """
    if rule == "lossless" or (rule == "match" and leniency == 0):
        return p
    if rule in ("linear", "match"):
        return (1 - leniency) * p + leniency * q
    if rule == "cactus":
        pi = p.gather(-1, draft[..., None]).squeeze(-1)  # (..., B)
        gamma = cactus_gamma(pi, leniency)
        scale = torch.where(pi < 1, (1 - gamma) / (1 - pi).clamp_min(1e-30), torch.zeros_like(pi))
        t = p * scale[..., None]
        return t.scatter(-1, draft[..., None], gamma[..., None])
    raise ValueError(f"rule must be one of {', '.join(RULES)}; got {rule!r}")


def verify_rows(rule: str, p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, lengths: torch.Tensor,
                uniforms: torch.Tensor, noise: torch.Tensor, leniency: float = 0.0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept drafted tokens left to right until the first rejection, in R rows at once, row
    r's draft the first lengths[r] of draft[r] (the rest is padding, never accepted):
    p (R, B + 1, V) verifier distributions p_i = p(· | h, y_<i), row B (after the last
    draft) giving the bonus; q (R, B, V) proposal distributions; draft (R, B) drafted ids;
    lengths (R,); uniforms (R, B) U(0, 1); noise (R, B + 1, V) Exp(1); leniency λ for
    linear/match, δ for cactus, ignored otherwise. Returns (accepted (R,): how many leading
    drafted tokens were kept, token (R,): the recovered token at the first rejection, or the
    bonus after a fully accepted draft).

    Rejection rules accept y_i when u_i·q_i(y_i) < t_i(y_i) (that is, with probability
    min(1, t_i(y_i)/q_i(y_i))) and recover from [t_i − q_i]₊ at the first rejection; after
    a fully accepted draft the bonus is drawn from p at row lengths[r].
    """
    rows, width = draft.shape
    index = torch.arange(rows, device=draft.device)
    if width == 0:
        return torch.zeros(rows, dtype=torch.long, device=draft.device), draw(p[:, 0], noise[:, 0])
    t = target(rule, p[:, :width], q, draft, leniency)  # (R, B, V)
    if rule == "match":
        sampled = draw(t, noise[:, :width])  # (R, B)
        ok = sampled == draft
    else:
        drafted = draft[..., None]
        ok = uniforms * q.gather(-1, drafted).squeeze(-1) < t.gather(-1, drafted).squeeze(-1)
    ok &= torch.arange(width, device=draft.device) < lengths[:, None]
    accepted = ok.long().cumprod(1).sum(1)
    bonus = draw(p[index, accepted], noise[index, accepted])
    at = accepted.clamp(max=width - 1)
    if rule == "match":  # a slot emits its own draw x ~ t whether or not the drafted y matched it
        recovered = sampled[index, at]
    else:
        weights = residual(t[index, at], q[index, at])
        none = ~weights.gt(0).any(-1, keepdim=True)  # t ≈ q up to rounding: any draw from t is right
        recovered = draw(torch.where(none, t[index, at], weights), noise[index, at])
    return accepted, torch.where(accepted == lengths, bonus, recovered)


def verify_greedy_rows(logits: torch.Tensor, drafted: torch.Tensor, lengths: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """`lossless` at verifier temperature 0, without sampling machinery: p_i is one-hot at
    argmax, so y_i is accepted iff it is the argmax, and the recovered or bonus token is the
    argmax of the first row not accepted. logits (R, B + 1, V), drafted
    (R, B), lengths (R,) -> (accepted (R,), token (R,)), on the host: past the argmax the
    rule is a few small-array steps, cheaper in numpy than as tensor ops (the caller reads
    both at once anyway)."""
    best = logits.argmax(-1).cpu().numpy()  # (R, B + 1)
    drafted, lengths = drafted.cpu().numpy(), lengths.cpu().numpy()
    width = drafted.shape[1]
    ok = (best[:, :width] == drafted) & (np.arange(width) < lengths[:, None])
    accepted = np.logical_and.accumulate(ok, 1).sum(1)
    return torch.from_numpy(accepted), torch.from_numpy(best[np.arange(best.shape[0]), accepted])
