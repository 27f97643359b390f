"""Frontier analysis over any 2–3 objectives (max or min), as pure functions.

Hypervolume is the volume dominated by the points and bounded by a reference point r:
HV(P, r) = vol(∪_{p ∈ P} [p, r]) after turning every objective into one to minimize
(max objectives negated). The default r is the worst observed value of each objective.
"""

from __future__ import annotations

import numpy as np
import optuna

from orchestrator.analysis.metrics import pareto_front
from orchestrator.stored import batch_size as stored_batch_size
from orchestrator.stored import load


def _as_loss(points, directions) -> np.ndarray:
    signs = np.array([-1.0 if d == "max" else 1.0 for d in directions])
    return np.asarray(points, dtype=float).reshape(-1, len(directions)) * signs


def default_reference(points: list[tuple[float, ...]], directions: tuple[str, ...]) -> tuple[float, ...]:
    """The worst observed value of each objective."""
    worst = _as_loss(points, directions).max(axis=0)
    signs = [-1.0 if d == "max" else 1.0 for d in directions]
    return tuple(float(w * s) for w, s in zip(worst, signs))


def hypervolume(
    points: list[tuple[float, ...]], directions: tuple[str, ...], reference: tuple[float, ...]
) -> float:
    """HV of `points` against `reference` (see module docstring); points that do not
    strictly improve on the reference in every objective add nothing."""
    from optuna._hypervolume import compute_hypervolume  # private in Optuna 5: wrapped here only

    if not points:
        return 0.0
    loss = _as_loss(points, directions)
    ref = _as_loss([reference], directions)[0]
    inside = loss[(loss < ref).all(axis=1)]
    if len(inside) == 0:
        return 0.0
    return float(compute_hypervolume(inside, ref, assume_pareto=False))


def hypervolume_history(
    points: list[tuple[float, ...]], directions: tuple[str, ...], reference: tuple[float, ...]
) -> list[float]:
    """HV of the first n points, for n = 1 .. len(points) (trial order)."""
    return [hypervolume(points[: n + 1], directions, reference) for n in range(len(points))]


def overlaps(a: dict, b: dict, keys: tuple[str, ...] = ("accuracy", "throughput_ratio")) -> bool:
    """Whether the 95% intervals of a and b overlap in every metric both carry."""
    shared = [k for k in keys if f"{k}_lo" in a and f"{k}_lo" in b]
    return bool(shared) and all(a[f"{k}_lo"] <= b[f"{k}_hi"] and b[f"{k}_lo"] <= a[f"{k}_hi"] for k in shared)


def tied(points: list[tuple[float, ...]], metrics: list[dict], directions: tuple[str, ...]) -> list[bool]:
    """For each frontier point: whether a point that dominates it on the point estimates
    would exist within its intervals, i.e. another frontier point better in some objective
    whose intervals overlap its own in every metric with intervals. Such a point is not
    distinguishable from its neighbour and is reported `tied`."""
    front = pareto_front(points, directions)
    out = [False] * len(points)
    for i in front:
        out[i] = any(overlaps(metrics[i], metrics[j]) for j in front if j != i)
    return out


def feasible(trial) -> bool:
    """Whether a trial meets every constraint (stored values <= 0)."""
    return all(c <= 0 for c in trial.user_attrs.get("constraints", []))


def frontier_trials(study, spec, batch_size: int | None = None) -> list:
    """Feasible completed trials that no other feasible trial of the same load dominates on
    the objectives: one frontier per batch size (speed at batch 8 is not comparable with speed
    at batch 1) and request rate (`stored.load`), or only those at `batch_size`."""
    groups: dict[tuple, list] = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if feasible(t) and batch_size in (None, stored_batch_size(t)):
            groups.setdefault(load(t), []).append(t)
    directions, front = tuple(spec.objectives.values()), []
    for trials in groups.values():
        front += [trials[i] for i in pareto_front([tuple(t.values) for t in trials], directions)]
    return sorted(front, key=lambda t: t.number)
