"""Racing: stop a candidate once the prompts measured so far show it cannot reach the frontier.

A candidate runs on rungs of nested prompt prefixes n_0 = start, n_{j+1} = min(N, factor·n_j)
of the task's fixed order, so any two candidates measured that far share their first n
prompts and compare paired (races run at batch size 1). Metrics are ratios of sums over
prompts, the trial metrics' own (`metrics.PROMPT_SUMS`): accuracy = Σcorrect/n,
throughput_tps = Σnew_tokens/Σwall, and so on.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

import numpy as np

from orchestrator.analysis.metrics import PROMPT_SUMS, prompt_column, unsummed


@dataclass(frozen=True)
class Racing:
    """`search.racing`: rungs of `start`, `factor`× more, … prompts; `alpha` the error rate of
    one comparison (see `dominated`)."""

    start: int = 16
    factor: float = 2.0
    alpha: float = 0.01
    resamples: int = 1000


def race_order(indices: list[int], seed: int) -> list[int]:
    """The prompt order of a race: the task's prompts permuted by the sweep seed, so each
    rung's prompts are a uniform sample of them all (a task file can list its easiest first)."""
    order = list(indices)
    random.Random(f"racing:{seed}").shuffle(order)
    return order


def rungs(total: int, racing: Racing) -> list[int]:
    """The prompt counts a candidate is measured at: start, ⌈factor·start⌉, … up to `total`."""
    out, n = [], min(racing.start, total)
    while n < total:
        out.append(n)
        n = min(total, max(n + 1, int(np.ceil(n * racing.factor))))
    return out + [total]


# metrics fixed by the law of the output tokens alone: equal for two configurations that
# provably sample the same law (the same verifier's, under the same settings)
LAW_METRICS = ("accuracy",)


def columns(metric: str) -> tuple[str, str | None]:
    """(numerator, denominator) of a metric racing compares; ValueError for any other."""
    if metric not in PROMPT_SUMS:
        raise ValueError(f"racing: {unsummed([metric])}")
    return PROMPT_SUMS[metric]


def _column(records: list[dict], name: str | None) -> np.ndarray:
    """A per-prompt column (n,); a metric without a denominator divides by the prompt count."""
    return np.array([prompt_column(r, name) if name else 1.0 for r in records])


def value(records: list[dict], metric: str) -> float:
    """`metric` on `records`: Σ top / Σ bottom over the prompts (`PROMPT_SUMS`); NaN when the
    denominator is 0."""
    top, bottom = columns(metric)
    denominator = _column(records, bottom).sum()
    return float(_column(records, top).sum() / denominator) if denominator > 0 else float("nan")


def flips(n: int, racing: Racing, seed: int = 0) -> np.ndarray:
    """Swap patterns (S, n) of 0/1 for the paired sign-flip test at n prompts, row 0 the
    identity: all 2^n patterns when 2^n ≤ racing.resamples (the exact randomisation
    distribution), else the identity and `resamples` uniform draws (a Monte Carlo p-value,
    valid at every n). Shared by every comparison at n prompts (read-only: the same array is
    handed to each)."""
    if n < 20 and 2**n <= racing.resamples:
        return _every_flip(n)
    return _drawn_flips(n, racing.resamples, seed)


@functools.lru_cache(maxsize=64)
def _every_flip(n: int) -> np.ndarray:
    swaps = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(float)
    swaps.setflags(write=False)
    return swaps


@functools.lru_cache(maxsize=64)
def _drawn_flips(n: int, resamples: int, seed: int) -> np.ndarray:
    swaps = np.zeros((resamples + 1, n))
    swaps[1:] = np.random.default_rng([seed, n]).integers(0, 2, size=(resamples, n))
    swaps.setflags(write=False)
    return swaps


def better_p(rival: list[dict], candidate: list[dict], metric: str, sign: float,
             swaps: np.ndarray) -> float | None:
    """One-sided p-value of "the rival is better on `metric`" from n paired prompts, or None
    when the two agree on every prompt (nothing to test).

    Statistic: Δ = sign·(M(rival) − M(candidate)), M = Σ top / Σ bottom (`PROMPT_SUMS`). Under
    the null that at each prompt the two records are exchangeable (same law), swapping the
    pair at any set of prompts leaves the law of the data unchanged, so
    p = #{s : Δ(s) ≥ Δ(observed)} / S over the swap patterns s (`flips`) gives
    P(p ≤ α) ≤ α at every n (exactly, when all 2^n patterns are enumerated). With n = 1 the
    smallest p is 1/2: at α = 0.01 no rival can stop a candidate before 7 prompts. A
    candidate truly better on the metric makes a large Δ rarer still."""
    top, bottom = columns(metric)
    a_r, a_c = _column(rival, top), _column(candidate, top)
    b_r, b_c = _column(rival, bottom), _column(candidate, bottom)
    if np.array_equal(a_r, a_c) and np.array_equal(b_r, b_c):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        m_r = (a_r.sum() + swaps @ (a_c - a_r)) / (b_r.sum() + swaps @ (b_c - b_r))
        m_c = (a_c.sum() + swaps @ (a_r - a_c)) / (b_c.sum() + swaps @ (b_r - b_c))
    delta = sign * (m_r - m_c)
    if not np.isfinite(delta).all():
        return float("nan")
    # swapped sums round differently from the observed ones: ties within rounding count as ≥
    tolerance = 1e-9 * max(1.0, float(np.abs(delta).max()))
    return float(np.mean(delta >= delta[0] - tolerance))


def dominated(candidate: list[dict], rival: list[dict], objectives: dict[str, str], racing: Racing,
              same_law: bool = False, seed: int = 0) -> bool:
    """Whether `rival` dominates `candidate` with confidence on their first n shared prompts
    (n = len(candidate) <= len(rival)): for every objective the paired sign-flip test says
    the rival is better (`better_p` ≤ α), and for at least one it says so; an objective of
    LAW_METRICS is passed over when the two provably sample one law (`same_law`: their true
    values are equal, so neither is worse). Two configurations that agree on every prompt
    of an objective they are not proven equal on are not compared: agreement on n prompts
    is no evidence that the rival is not worse (a lenient rival wrong on 4% of prompts
    agrees with a lossless candidate on all of 16 about half the time).

    Error rate: the test assumes each prompt's two records are exchangeable when neither
    configuration is better (as for two configurations that differ only in timing noise).
    If the candidate is in truth not dominated, some objective is not better for the rival
    and its test rejects with probability ≤ α, so the rule stops the candidate with
    probability ≤ α, at every n (an intersection-union test). A candidate compared with m
    rivals over k rungs is stopped wrongly with probability ≤ m·k·α (union bound). Records
    timed under changing load are not exchangeable: race where the `ar` controls do not
    drift.
    """
    n = len(candidate)
    if n == 0 or len(rival) < n:
        return False
    swaps = flips(n, racing, seed)
    better = False
    for metric, direction in objectives.items():
        if same_law and metric in LAW_METRICS:
            continue
        p = better_p(rival[:n], candidate, metric, 1.0 if direction == "max" else -1.0, swaps)
        if p is None or not p <= racing.alpha:  # NaN (an empty denominator) never stops
            return False
        better = True
    return better


def binomial_tail(k: int, n: int, p: float, upper: bool) -> float:
    """P(X ≤ k) (or P(X ≥ k) when `upper`) for X ~ Binomial(n, p):
    Σ_j C(n, j)·p^j·(1 − p)^(n−j) over j ≤ k (j ≥ k), summed in log space."""
    if p <= 0.0 or p >= 1.0:  # X is certain: 0 or n
        x = 0 if p <= 0.0 else n
        return float(x >= k if upper else x <= k)
    js = range(k, n + 1) if upper else range(0, k + 1)
    logs = [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
            + j * math.log(p) + (n - j) * math.log1p(-p) for j in js]
    top = max(logs, default=-math.inf)
    return 0.0 if top == -math.inf else min(1.0, math.exp(top) * sum(math.exp(x - top) for x in logs))


def infeasible(candidate: list[dict], constraints: list[tuple[str, str, float]], racing: Racing) -> bool:
    """Whether some constraint `metric op bound` fails with confidence. Racing tests only
    constraints on a share of prompts (a metric whose per-prompt value is 0 or 1 over the
    prompt count, such as accuracy), with the exact binomial test: for `>= bound`, k right
    of n stops when P(X ≤ k) ≤ α for X ~ Binomial(n, bound) (`<=`: P(X ≥ k) ≤ α); error rate
    ≤ α per constraint at every n. A constraint on any other metric has no small-sample test
    that holds whatever the law of its prompts, so it never stops a race: the finished
    trial's value decides it."""
    n = len(candidate)
    for metric, op, bound in constraints:
        top, bottom = PROMPT_SUMS.get(metric, (None, None))
        counts = _column(candidate, top) if top else None
        if not n or bottom or counts is None or not np.isin(counts, (0.0, 1.0)).all():
            continue
        if binomial_tail(int(counts.sum()), n, bound, upper=op == "<=") <= racing.alpha:
            return True
    return False


def stop(candidate: list[dict], rivals: list[tuple[list[dict], bool]], objectives: dict[str, str],
         constraints: list[tuple[str, str, float]], racing: Racing, seed: int = 0) -> bool:
    """The racing rule after a rung: stop `candidate` (its records so far, in prompt order)
    when it is infeasible with confidence or some rival (records, whether it provably samples
    the candidate's law) measured at least as far dominates it with confidence (`dominated`,
    `infeasible`)."""
    if infeasible(candidate, constraints, racing):
        return True
    return any(dominated(candidate, rival, objectives, racing, same, seed) for rival, same in rivals
               if len(rival) >= len(candidate))
