"""The racing rule's error rate, by simulation: how often it stops a candidate that is in
truth not dominated (search/racing.py promises ≤ α per comparison at every rung size).

Two candidates get per-prompt records from one law, paired by prompt (a prompt's length and
difficulty are shared; each candidate's wall time and answer are drawn on their own), so
neither dominates and every stop is an error. The same holds for a constraint set exactly
at the candidate's true accuracy, and for a lenient rival 10% faster than a lossless
candidate but wrong on 4% more prompts (the candidate is on the frontier: more accurate; on
a short rung the two often agree on every answer). Two noise shapes:
- `normal`: wall time ∝ length · (1 + 0.1·N(0, 1)), answers right with a per-prompt
  probability around 0.7;
- `heavy`: wall time ∝ length · LogNormal(0, 1) (skewed, heavy-tailed: one prompt can hold
  most of a candidate's time), lengths LogNormal too, answers right with probability ≈ 0.3.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from orchestrator.search.racing import Racing, dominated, infeasible

SHAPES = ("normal", "heavy")
OBJECTIVES = {"throughput_tps": "max", "accuracy": "max"}
SIZES = (*range(1, 17), 24, 32, 64)  # first-rung sizes simulated: every one up to 16, then beyond


def prompts(n: int, shape: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A prompt set's shared part: (lengths in tokens (n,), chance of a right answer (n,))."""
    if shape == "normal":
        return np.full(n, 32.0), rng.beta(7.0, 3.0, n)
    return np.maximum(1.0, np.round(np.exp(3.0 + rng.standard_normal(n)))), rng.beta(1.5, 3.5, n)


def candidate(lengths: np.ndarray, right: np.ndarray, shape: str, rng: np.random.Generator) -> list[dict]:
    """One candidate's records on the shared prompts, its noise drawn on its own."""
    n = len(lengths)
    noise = (np.maximum(0.05, 1.0 + 0.1 * rng.standard_normal(n)) if shape == "normal"
             else np.exp(rng.standard_normal(n)))
    correct = rng.random(n) < right
    return [{"index": i, "new_tokens": float(t), "wall_s": float(t / 200.0 * w), "correct": float(c)}
            for i, (t, w, c) in enumerate(zip(lengths, noise, correct))]


@dataclass(frozen=True)
class ErrorRate:
    shape: str
    alpha: float
    n: int  # prompts of the rung
    reps: int
    dominated: float  # share of the reps in which `dominated` wrongly stopped the candidate
    speed_only: float  # the same on throughput alone: one test, whose rate should sit near α
    accuracy_gap: float  # a faster, less accurate rival (a different law) stopping the candidate
    infeasible: float  # share in which `accuracy >= its true value` wrongly failed

    @property
    def margin(self) -> float:
        """Four binomial standard errors of a rate α over `reps`: the sampling error allowed.
        Four, not three: a table of ~300 rates would put one past three by chance alone."""
        return 4.0 * float(np.sqrt(self.alpha * (1 - self.alpha) / self.reps))

    @property
    def over(self) -> bool:
        """Whether some wrong-stop rate of this cell exceeds α by more than `margin`."""
        worst = max(self.dominated, self.speed_only, self.accuracy_gap, self.infeasible)
        return worst > self.alpha + self.margin

    def to_dict(self) -> dict:
        """The cell as `specsweep bench racing --json` prints it, with its margin."""
        return {**asdict(self), "margin": self.margin}


def error_rate(n: int, shape: str, alpha: float, reps: int, seed: int = 0) -> ErrorRate:
    """Wrong stops over `reps` simulated comparisons at n prompts (see the module docstring)."""
    rng = np.random.default_rng([seed, n, SHAPES.index(shape), int(alpha * 1e6)])
    racing = Racing(start=n, alpha=alpha)
    wrong_dominated = wrong_speed = wrong_gap = wrong_infeasible = 0
    for rep in range(reps):
        lengths, right = prompts(n, shape, rng)
        a, b = candidate(lengths, right, shape, rng), candidate(lengths, right, shape, rng)
        wrong_dominated += dominated(a, b, OBJECTIVES, racing, seed=rep)
        wrong_speed += dominated(a, b, {"throughput_tps": "max"}, racing, seed=rep)
        # the rival answers as the candidate does but slips on 4% of prompts, and is 10% faster
        slips = rng.random(n) < 0.04
        lenient = [{**r, "wall_s": r["wall_s"] / 1.1, "correct": 0.0 if slip else c["correct"]}
                   for r, c, slip in zip(candidate(lengths, right, shape, rng), a, slips)]
        wrong_gap += dominated(a, lenient, OBJECTIVES, racing, seed=rep)
        # the constraint's bound is the candidate's true accuracy: it holds, only just
        q = 0.7 if shape == "normal" else 0.3
        truth = [{**r, "correct": float(rng.random() < q)} for r in a]
        wrong_infeasible += infeasible(truth, [("accuracy", ">=", q)], racing)
    return ErrorRate(shape, alpha, n, reps, wrong_dominated / reps, wrong_speed / reps, wrong_gap / reps,
                     wrong_infeasible / reps)


def error_table(sizes=SIZES, alphas=(0.01, 0.05), reps: int = 2000, seed: int = 0) -> list[ErrorRate]:
    """`error_rate` for every size, shape and α."""
    return [error_rate(n, shape, alpha, reps, seed) for alpha in alphas for shape in SHAPES for n in sizes]


def table(rows: list[ErrorRate]) -> list[str]:
    """The lines `specsweep bench racing` prints: one per cell, flagged OVER past its margin."""
    lines = [f"wrongly stopped, share of {rows[0].reps} simulated comparisons; objectives throughput_tps "
             "and accuracy (max); constraint accuracy >= its true value",
             f"{'shape':<7} {'alpha':>5} {'n':>3} {'dominated':>9} {'speed only':>10} {'accuracy gap':>12} "
             f"{'infeasible':>10} {'margin':>6}"]
    return lines + [f"{r.shape:<7} {r.alpha:>5.2f} {r.n:>3} {r.dominated:>9.4f} {r.speed_only:>10.4f} "
                    f"{r.accuracy_gap:>12.4f} {r.infeasible:>10.4f} {r.margin:>6.4f}"
                    + ("  OVER" if r.over else "") for r in rows]
