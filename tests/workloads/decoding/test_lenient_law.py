"""The law of lenient rules: what a drafted position emits equals what the rule's target
prescribes, and a deliberately wrong residual is caught by the same test.

* linear λ: the emitted law is t = (1 − λ)·p + λ·q.
* Cactus δ: t depends on the drafted y (h_y puts γ(p(y), δ) on y and scales the rest of p
  by (1 − γ)/(1 − p(y))), so the emitted law is Σ_y q(y)·[min(1, h_y(y)/q(y))·1{x = y} +
  (1 − min(1, h_y(y)/q(y)))·[h_y − q]₊(x)/Σ[h_y − q]₊].

Expected laws are computed here from those formulas (γ by root finding in scipy), not with
the engine's `target`, so a wrong target fails too. Chi-square goodness of fit at ALPHA,
fixed seeds.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import chisquare

from tests.workloads.decoding.laws import PROMPT, TOK, A, B, ar_b, draft_b, law_pair, law_self, seeded_decodes
from workloads.decoding import DecodeConfig, acceptance, decode
from workloads.decoding.acceptance import verify_rows

pytestmark = pytest.mark.slow  # sampled rule-law harness: thousands of decodes per case

ALPHA = 1e-3
RULES = {"linear": 0.5, "cactus": 0.3}  # rule -> λ or δ


def cactus_gamma(pi: float, delta: float) -> float:
    kl = lambda g: g * math.log(g / pi) + ((1 - g) * math.log((1 - g) / (1 - pi)) if g < 1 else 0)  # noqa: E731
    if pi <= 0:
        return 0.0
    if delta >= -math.log(pi):
        return 1.0
    return brentq(lambda g: kl(g) - delta, pi, 1 - 1e-15, xtol=1e-14)


def emitted_law(rule: str, leniency: float, p: list[float], q: list[float]) -> list[float]:
    """The law of the token a drafted position emits, y ~ q verified against p."""
    if rule == "linear":
        return [(1 - leniency) * a + leniency * b for a, b in zip(p, q)]
    law = [0.0] * len(p)
    for y, qy in enumerate(q):
        if qy == 0:
            continue
        gamma = cactus_gamma(p[y], leniency)
        scale = (1 - gamma) / (1 - p[y]) if p[y] < 1 else 0.0
        h = [gamma if x == y else scale * px for x, px in enumerate(p)]
        keep = min(1.0, h[y] / qy)
        rest = [max(0.0, hx - qx) for hx, qx in zip(h, q)]
        law[y] += qy * keep
        for x, r in enumerate(rest):
            law[x] += qy * (1 - keep) * r / sum(rest) if sum(rest) > 0 else 0.0
    return law


def pvalue(counts: Counter, law: list[float]) -> float:
    n = sum(counts.values())
    cells = [x for x, m in enumerate(law) if m > 0]
    assert sum(counts[x] for x in cells) == n  # nothing emitted outside the law's support
    mass = sum(law[x] for x in cells)  # 1 up to float32 rounding of P and Q
    return chisquare([counts[x] for x in cells], [law[x] * n / mass for x in cells]).pvalue


# -- the rule itself, on fixed distributions -------------------------------------------------

P = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])  # (B + 1, V)
Q = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.6, 0.1, 0.1, 0.2]])  # (B, V)
DRAWS = 4000


def verify_draws(rule: str, leniency: float) -> tuple[Counter, Counter]:
    """What position 1 emits, and what position 2 emits when position 1 was accepted, over
    DRAWS drafts verified as the rows of one batch."""
    g = torch.Generator().manual_seed(7)
    draft = torch.multinomial(Q, DRAWS, replacement=True, generator=g).T  # (DRAWS, B)
    uniforms, noise = torch.rand(DRAWS, 2, generator=g), torch.empty(DRAWS, 3, 4).exponential_(generator=g)
    accepted, token = verify_rows(rule, P.expand(DRAWS, -1, -1), Q.expand(DRAWS, -1, -1), draft,
                                  torch.full((DRAWS,), 2), uniforms, noise, leniency)
    first = torch.where(accepted >= 1, draft[:, 0], token)
    second = torch.where(accepted == 2, draft[:, 1], token)[accepted >= 1]
    return Counter(first.tolist()), Counter(second.tolist())


@pytest.mark.parametrize("rule", RULES)
def test_each_drafted_position_emits_the_rule_law(rule):
    first, second = verify_draws(rule, RULES[rule])
    assert pvalue(first, emitted_law(rule, RULES[rule], P[0].tolist(), Q[0].tolist())) > ALPHA
    assert pvalue(second, emitted_law(rule, RULES[rule], P[1].tolist(), Q[1].tolist())) > ALPHA
    lossless = emitted_law(rule, 0.0, P[0].tolist(), Q[0].tolist())
    assert pvalue(first, lossless) < ALPHA  # leniency really moves the law away from p


WRONG_RESIDUALS = {
    "target-itself": lambda t, q: t,  # forgets to take away what acceptance already emitted
    "half-q": lambda t, q: (t - 0.5 * q).clamp_min(0),
}


@pytest.mark.parametrize("wrong", WRONG_RESIDUALS)
@pytest.mark.parametrize("rule", RULES)
def test_a_wrong_residual_is_detected(monkeypatch, rule, wrong):
    monkeypatch.setattr(acceptance, "residual", WRONG_RESIDUALS[wrong])
    first, _ = verify_draws(rule, RULES[rule])
    assert pvalue(first, emitted_law(rule, RULES[rule], P[0].tolist(), Q[0].tolist())) < ALPHA


# -- through the engine, on the context-dependent stubs --------------------------------------

SAMPLES = 1500


def engine_law(rule: str, leniency: float) -> dict[tuple[int, int], float]:
    """The law of new tokens 1 and 2: the first from the verifier, the second the first
    drafted position of a one-step draft from the prefix (prompt, x1)."""
    prompt = TOK(PROMPT).input_ids
    law = {}
    for x1 in (A, B):
        p1 = ar_b(prompt)
        p = [1 - ar_b(prompt + [x1]), ar_b(prompt + [x1])]
        qb = draft_b(prompt + [x1, TOK.mask_token_id], x1)
        second = emitted_law(rule, leniency, p, [1 - qb, qb])
        for i, x2 in enumerate((A, B)):
            law[x1, x2] = (p1 if x1 == B else 1 - p1) * second[i]
    return law


def engine_pvalue(pair, config: DecodeConfig) -> float:
    counts, drafted = Counter(), 0
    for result in seeded_decodes(pair, config, range(20_000, 20_000 + SAMPLES)):
        counts[tuple(result.token_ids[:2])] += 1
        drafted += result.drafted
    assert drafted >= SAMPLES  # the second token always went through a verified draft
    law = engine_law(config.rule, config.leniency)
    cells = sorted(law)
    return chisquare([counts[c] for c in cells], [law[c] * SAMPLES for c in cells]).pvalue


SCHEDULES = [("two-model", "linear"), ("two-model", "packed"), ("self", "linear"), ("self", "packed"),
             ("self", "quadratic")]



def lenient(schedule: str, rule: str) -> DecodeConfig:
    return DecodeConfig(schedule=schedule, block=4, rule=rule, leniency=RULES[rule], temperature=1.0,
                        max_new_tokens=3)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize(("kind", "schedule"), SCHEDULES)
def test_engine_emits_the_rule_law_at_drafted_positions(kind, schedule, rule):
    pair = law_pair() if kind == "two-model" else law_self()
    config = lenient(schedule, rule)
    assert not decode(pair, PROMPT, config).exact
    assert engine_pvalue(pair, config) > ALPHA


def test_engine_with_a_wrong_residual_is_detected(monkeypatch):
    """Through the engine too (linear λ; on two-point laws Cactus's residual has too little
    room for this sample size, and the rule-level test above catches it)."""
    monkeypatch.setattr(acceptance, "residual", WRONG_RESIDUALS["target-itself"])
    assert engine_pvalue(law_pair(), lenient("linear", "linear")) < ALPHA
