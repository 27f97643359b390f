"""Per-trial metrics from per-prompt records (names from DESIGN.md), pure functions.

A record is one decoded prompt: the DecodeResult measurements plus `index` and `correct`.
"""

from __future__ import annotations

import numpy as np

TRIAL_METRICS = (
    "accuracy",
    "latency_s",
    "throughput_tps",
    "tokens_per_nfe",
    "time_per_nfe_s",
    "acceptance_rate",
    "mean_accept_len",
    "overhead_frac",
    "throughput_ratio",
    "latency_ratio",
)
DIRECTIONS = ("max", "min")


def _sum(records: list[dict], key: str) -> float:
    return float(sum(r[key] for r in records))


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def trial_metrics(records: list[dict]) -> dict[str, float]:
    """accuracy = mean correct; latency_s = mean wall_s; throughput_tps = Σnew_tokens/Σwall_s;
    tokens_per_nfe = Σnew_tokens/Σnfe; time_per_nfe_s = Σwall_s/Σnfe; acceptance_rate =
    Σaccepted/Σdrafted; mean_accept_len = Σaccepted/Σiterations; overhead_frac =
    Σoverhead_s/Σwall_s. A metric without a defined value (no drafts, no score) is left out."""
    n = len(records)
    wall = _sum(records, "wall_s")
    values = {
        "latency_s": wall / n,
        "throughput_tps": _ratio(_sum(records, "new_tokens"), wall),
        "tokens_per_nfe": _ratio(_sum(records, "new_tokens"), _sum(records, "nfe")),
        "time_per_nfe_s": _ratio(wall, _sum(records, "nfe")),
        "acceptance_rate": _ratio(_sum(records, "accepted"), _sum(records, "drafted")),
        "mean_accept_len": _ratio(_sum(records, "accepted"), _sum(records, "iterations")),
        "overhead_frac": _ratio(_sum(records, "overhead_s"), wall),
    }
    if all(r.get("correct") is not None for r in records):
        values["accuracy"] = sum(r["correct"] for r in records) / n
    return {k: v for k, v in values.items() if v is not None}


def paired_bootstrap(trial: list[dict], baseline: list[dict], resamples: int = 2000,
                     seed: int = 0) -> dict[str, float]:
    """95% percentile intervals over prompts, resampling the same prompt indices for both:
    accuracy, throughput_ratio = throughput(trial)/throughput(baseline) and latency_ratio =
    latency(trial)/latency(baseline). Records are paired by `index`. Also the point ratios."""
    base = {r["index"]: r for r in baseline}
    pairs = [(r, base[r["index"]]) for r in trial if r["index"] in base]
    if not pairs:
        return {}
    columns = {name: np.array([[a[name] for a, _ in pairs], [b[name] for _, b in pairs]], dtype=float)
               for name in ("new_tokens", "wall_s")}
    scored = all(a.get("correct") is not None for a, _ in pairs)
    correct = np.array([a["correct"] if scored else 0.0 for a, _ in pairs])
    n = len(pairs)
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    rows = np.vstack([np.arange(n)[None], draws])  # row 0 is the observed sample

    def total(name: str, side: int) -> np.ndarray:
        return columns[name][side][rows].sum(axis=1)

    stats = {"throughput_ratio": (total("new_tokens", 0) / total("wall_s", 0))
             / (total("new_tokens", 1) / total("wall_s", 1)),
             "latency_ratio": total("wall_s", 0) / total("wall_s", 1)}
    if scored:
        stats["accuracy"] = correct[rows].mean(axis=1)
    result = {k: float(v[0]) for k, v in stats.items() if k != "accuracy"}
    for key, values in stats.items():
        result[f"{key}_lo"], result[f"{key}_hi"] = (float(x) for x in np.percentile(values[1:], [2.5, 97.5]))
    return result


def pareto_front(points: list[tuple[float, ...]], directions: tuple[str, ...]) -> list[int]:
    """Indices of the non-dominated points. a dominates b when a is at least as good in every
    objective (max: ≥, min: ≤) and strictly better in one."""
    signs = [1 if d == "max" else -1 for d in directions]
    scaled = [[s * v for s, v in zip(signs, p)] for p in points]

    def dominates(a, b):
        return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))

    return [i for i, p in enumerate(scaled) if not any(dominates(q, p) for q in scaled)]
