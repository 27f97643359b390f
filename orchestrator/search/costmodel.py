"""The arithmetic of the multi-fidelity search: a decode's work, the cost model that turns
work into seconds, and the choice of configurations to calibrate it on.

A decode's work is counted, not timed: at temperature 0 an untimed decode in a large batch
emits the same tokens, drafts and forward passes as a timed one at batch size 1, so its
records give every count (accuracy, accepted length) exactly and its time only through a
model. The model, per pair: the wall time of a prompt decoded alone is

    wall ≈ θ₀ + θ₁·nfe + θ₂·rows + θ₃·iterations,   θ ≥ 0

(a fixed cost per prompt, one per forward pass, one per token row evaluated, one per
iteration's acceptance and bookkeeping), fitted by non-negative least squares on the
prompts timed so far. Its error E is the largest relative error of Σwall over a timed
configuration when that configuration is left out of the fit, and never under FLOOR.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

WORK = ("nfe", "rows", "iterations")  # the counted work per prompt, besides the prompt itself
FLOOR = 0.05  # the smallest error the model is credited with: timing noise of one configuration


def work(record: dict) -> list[float]:
    """A record's features: (1, nfe, rows, iterations)."""
    return [1.0, *(float(record[name]) for name in WORK)]


def fit_theta(pairs: list[tuple[dict, float]]) -> np.ndarray:
    """θ ≥ 0 minimising Σ (work(record)·θ − wall)² over (cheap record, timed wall) pairs."""
    from scipy.optimize import nnls

    features = np.array([work(record) for record, _ in pairs])
    walls = np.array([wall for _, wall in pairs])
    return nnls(features, walls)[0]


@dataclass(frozen=True)
class CostModel:
    """A pair's fitted θ and its error E (see the module docstring)."""

    theta: tuple[float, ...]
    error: float

    def wall(self, record: dict) -> float:
        return float(np.dot(work(record), self.theta))

    def predicted(self, records: list[dict], bias: float = 0.0) -> list[dict]:
        """`records` with wall_s (and batch_wall_s: each alone) replaced by the model's,
        scaled by 1 + bias·E: bias −1 the fastest the model allows, +1 the slowest."""
        scale = 1.0 + bias * self.error
        return [{**r, "wall_s": self.wall(r) * scale, "batch_wall_s": self.wall(r) * scale} for r in records]


def fit(timed: dict[tuple, list[tuple[dict, float]]]) -> CostModel | None:
    """The cost model of one pair from its timed configurations (key -> (cheap record, timed
    wall) per prompt); None with fewer than two, whose error could not be told."""
    if len(timed) < 2:
        return None
    errors = []
    for held, pairs in timed.items():
        theta = fit_theta([p for key, rest in timed.items() if key != held for p in rest])
        predicted = sum(float(np.dot(work(record), theta)) for record, _ in pairs)
        errors.append(abs(predicted / sum(wall for _, wall in pairs) - 1))
    theta = fit_theta([p for pairs in timed.values() for p in pairs])
    return CostModel(tuple(float(t) for t in theta), max(FLOOR, *errors))


def per_token(records: list[dict]) -> np.ndarray:
    """A configuration's work per emitted token: Σnfe, Σrows, Σiterations over Σnew_tokens."""
    tokens = max(1, sum(r["new_tokens"] for r in records))
    return np.array([sum(r[name] for r in records) / tokens for name in WORK])


def spread(profiles: dict[tuple, list[dict]], count: int, seed: int) -> list[tuple]:
    """`count` configurations whose work per token spans the others' (farthest-point order in
    per_token, each feature over its spread): the first drawn by `seed`, then each the one
    farthest from those chosen. A model fitted on them interpolates, where one fitted on
    alike configurations extrapolates with an error its own leave-one-out cannot see."""
    keys = sorted(profiles)
    if len(keys) <= count:
        return keys
    points = {k: per_token(profiles[k]) for k in keys}
    scale = np.std(np.array(list(points.values())), axis=0) + 1e-12
    chosen = [random.Random(seed).choice(keys)]
    while len(chosen) < count:
        chosen.append(max((k for k in keys if k not in chosen),
                          key=lambda k: min(np.linalg.norm((points[k] - points[c]) / scale) for c in chosen)))
    return chosen
