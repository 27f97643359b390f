"""Racing: stop a candidate once the prompts measured so far show it cannot reach the frontier.

A candidate runs on rungs of nested prompt prefixes n_0 = start, n_{j+1} = min(N, factor·n_j)
of the task's fixed order, so any two candidates measured that far share their first n
prompts and compare paired. Metrics are ratios of sums over prompts (batches, at batch size
above 1): accuracy = Σcorrect/n, throughput_tps = Σnew_tokens/Σwall, and so on (`COLUMNS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STOPPED = "racing_stopped"  # trial attribute: the prompts a trial racing stopped was measured on

# metric -> (numerator, denominator) per prompt; a metric is Σ numerator / Σ denominator
COLUMNS = {
    "accuracy": ("correct", None),
    "latency_s": ("wall_s", None),
    "throughput_tps": ("new_tokens", "wall_s"),
    "tokens_per_nfe": ("new_tokens", "nfe"),
    "time_per_nfe_s": ("wall_s", "nfe"),
    "acceptance_rate": ("accepted", "drafted"),
    "mean_accept_len": ("accepted", "iterations"),
    "overhead_frac": ("overhead_s", "wall_s"),
}


def unsummed(metrics) -> str | None:
    """Why racing cannot compare on `metrics`: the first that is not a sum over prompts, or None."""
    for metric in metrics:
        if metric not in COLUMNS:
            return f"objective {metric} is not a sum over prompts; race on one of {', '.join(COLUMNS)}"
    return None


@dataclass(frozen=True)
class Racing:
    """`search.racing`: rungs of `start`, `factor`× more, … prompts; `alpha` the error rate of
    one comparison (see `dominated`)."""

    start: int = 16
    factor: float = 2.0
    alpha: float = 0.01
    resamples: int = 1000


def rungs(total: int, racing: Racing) -> list[int]:
    """The prompt counts a candidate is measured at: start, ⌈factor·start⌉, … up to `total`."""
    out, n = [], min(racing.start, total)
    while n < total:
        out.append(n)
        n = min(total, max(n + 1, int(np.ceil(n * racing.factor))))
    return out + [total]


def _values(records: list[dict], metric: str, draws: np.ndarray) -> np.ndarray:
    """`metric` on each resample of `records` (draws: (R, n) prompt positions) -> (R,)."""
    if metric not in COLUMNS:
        raise ValueError(f"racing: {unsummed([metric])}")
    top, bottom = COLUMNS[metric]
    numerator = np.array([float(r.get(top) or 0.0) for r in records])[draws].sum(axis=1)
    denominator = (np.array([float(r.get(bottom) or 0.0) for r in records])[draws].sum(axis=1) if bottom
                   else np.full(draws.shape[0], float(draws.shape[1])))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan)


def value(records: list[dict], metric: str) -> float:
    """`metric` on `records` themselves (no resampling)."""
    return float(_values(records, metric, np.arange(len(records))[None])[0])


def draws(n: int, racing: Racing, seed: int = 0) -> np.ndarray:
    """Resampled prompt positions (R + 1, n), row 0 the observed sample, shared by every
    candidate compared at n prompts so the comparison is paired."""
    rng = np.random.default_rng([seed, n])
    return np.vstack([np.arange(n)[None], rng.integers(0, n, size=(racing.resamples, n))])


def dominated(candidate: list[dict], rival: list[dict], objectives: dict[str, str], racing: Racing,
              seed: int = 0) -> bool:
    """Whether `rival` dominates `candidate` with confidence on their first n shared prompts
    (n = len(candidate) <= len(rival)).

    For each objective, Δ = (rival − candidate), signed so that larger is better, over a
    paired bootstrap of the n prompts; the rival dominates when the lower α-quantile of Δ is
    ≥ 0 for every objective and > 0 for at least one (exact ties, such as the same answers
    of two lossless configurations, count as "not worse").

    Error rate: if the candidate is in truth not dominated by the rival, some objective has
    true Δ < 0 (or every Δ = 0) and its one-sided test rejects with probability ≤ α, so the
    rule stops it with probability ≤ α (an intersection-union test; percentile bootstrap,
    asymptotically). A candidate compared with m rivals over k rungs is stopped wrongly with
    probability ≤ m·k·α (union bound).
    """
    n = len(candidate)
    if n == 0 or len(rival) < n:
        return False
    picks = draws(n, racing, seed)
    better = False
    for metric, direction in objectives.items():
        sign = 1.0 if direction == "max" else -1.0
        delta = sign * (_values(rival[:n], metric, picks) - _values(candidate, metric, picks))
        if np.isnan(delta).any():
            return False
        low = float(np.quantile(delta[1:], racing.alpha))
        if low < 0:
            return False
        better = better or low > 0
    return better


def infeasible(candidate: list[dict], constraints: list[tuple[str, str, float]], racing: Racing,
               seed: int = 0) -> bool:
    """Whether some constraint `metric op bound` fails with confidence: the upper α-quantile
    of the metric below the bound for `>=` (the lower above it for `<=`). Error rate ≤ α per
    constraint, as for `dominated`."""
    if not candidate:
        return False
    picks = draws(len(candidate), racing, seed)
    for metric, op, bound in constraints:
        values = _values(candidate, metric, picks)[1:]
        if np.isnan(values).any():
            continue
        if op == ">=" and float(np.quantile(values, 1 - racing.alpha)) < bound:
            return True
        if op == "<=" and float(np.quantile(values, racing.alpha)) > bound:
            return True
    return False


def stop(candidate: list[dict], rivals: list[list[dict]], objectives: dict[str, str],
         constraints: list[tuple[str, str, float]], racing: Racing, seed: int = 0) -> bool:
    """The racing rule after a rung: stop `candidate` (its records so far, in prompt order)
    when it is infeasible with confidence or some rival measured at least as far dominates
    it with confidence (`dominated`, `infeasible`)."""
    if infeasible(candidate, constraints, racing, seed):
        return True
    return any(dominated(candidate, rival, objectives, racing, seed) for rival in rivals
               if len(rival) >= len(candidate))
