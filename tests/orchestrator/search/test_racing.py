"""The racing rule on constructed per-prompt records: frontier candidates are never stopped,
clearly dominated ones stop at the first rung, and candidates that are not dominated in
truth are stopped at about the stated rate α or less."""

import numpy as np
import pytest

from orchestrator.bench.racing import SHAPES, SIZES, error_table
from orchestrator.search.racing import (
    Racing,
    better_p,
    binomial_tail,
    dominated,
    flips,
    infeasible,
    rungs,
    stop,
)

OBJECTIVES = {"throughput_tps": "max", "accuracy": "max"}
RACING = Racing(start=16, factor=2.0, alpha=0.01, resamples=500)


def records(n: int, speed: float, accuracy: float, seed: int, noise: float = 0.1) -> list[dict]:
    """n prompts of 20 tokens each at about `speed` tok/s, answered right with prob `accuracy`."""
    rng = np.random.default_rng(seed)
    correct = rng.random(n) < accuracy
    walls = 20 / speed * np.exp(noise * rng.standard_normal(n))
    return [{"index": i, "new_tokens": 20, "wall_s": float(w), "correct": float(c)}
            for i, (w, c) in enumerate(zip(walls, correct))]


def test_rungs_grow_by_the_factor_up_to_every_prompt():
    assert rungs(64, RACING) == [16, 32, 64]
    assert rungs(100, Racing(start=16, factor=2.0)) == [16, 32, 64, 100]
    assert rungs(10, RACING) == [10]


def test_frontier_candidates_survive_and_dominated_ones_stop_at_the_first_rung():
    fast = records(64, 300.0, 0.6, seed=1)  # the frontier: fastest, and most accurate
    accurate = records(64, 150.0, 1.0, seed=2)
    slow_and_wrong = records(64, 100.0, 0.3, seed=3)  # dominated by both, clearly
    for rung in rungs(64, RACING):
        assert not stop(fast[:rung], [(accurate, False)], OBJECTIVES, [], RACING)
        assert not stop(accurate[:rung], [(fast, False)], OBJECTIVES, [], RACING)
    assert stop(slow_and_wrong[:16], [(fast, False), (accurate, False)], OBJECTIVES, [], RACING)
    # a rival measured on fewer prompts cannot stop a candidate measured further
    assert not stop(slow_and_wrong[:32], [(fast[:16], False)], OBJECTIVES, [], RACING)


def test_one_law_passes_over_accuracy_and_agreement_alone_proves_nothing():
    """Two lossless configurations of one verifier answer alike by construction: the faster
    dominates. Two that only happened to agree on these prompts are not compared on speed
    alone: a lenient rival wrong on a few prompts often agrees on a short rung."""
    slow = records(32, 100.0, 0.8, seed=4)
    fast = [{**r, "wall_s": r["wall_s"] / 2} for r in slow]
    assert dominated(slow[:16], fast, OBJECTIVES, RACING, same_law=True)
    assert not dominated(fast[:16], slow, OBJECTIVES, RACING, same_law=True)
    assert not dominated(slow[:16], fast, OBJECTIVES, RACING, same_law=False)


def test_infeasible_with_confidence_stops():
    weak = records(32, 300.0, 0.2, seed=5)
    assert infeasible(weak[:16], [("accuracy", ">=", 0.9)], RACING)
    assert not infeasible(records(32, 300.0, 0.95, seed=6)[:16], [("accuracy", ">=", 0.9)], RACING)


def test_one_prompt_can_never_stop_a_candidate():
    """The smallest sign-flip p-value at n prompts is 2^-n: a rival faster on every prompt
    stops nothing before 2^-n <= alpha (7 prompts at alpha 0.01)."""
    slow = records(16, 100.0, 0.5, seed=7)
    fast = [{**r, "wall_s": r["wall_s"] / 10} for r in slow]  # the same answers, 10x faster
    stops = [dominated(slow[:n], fast, OBJECTIVES, Racing(alpha=0.01), same_law=True) for n in range(1, 17)]
    assert stops == [False] * 6 + [True] * 10


def test_exchangeable_swaps_give_an_exact_p_value():
    rival, candidate = records(8, 200.0, 0.5, seed=8), records(8, 200.0, 0.5, seed=9)
    swaps = flips(8, RACING)
    assert swaps.shape == (256, 8) and len({tuple(r) for r in swaps}) == 256  # every pattern, once
    p = better_p(rival, candidate, "throughput_tps", 1.0, swaps)
    assert p in {k / 256 for k in range(1, 257)}
    assert better_p(rival, rival, "accuracy", 1.0, swaps) is None  # agree on every prompt


def test_binomial_tail_matches_scipy():
    from scipy.stats import binom

    for k, n, q in [(3, 16, 0.9), (0, 1, 0.5), (12, 40, 0.3), (900, 1000, 0.95), (5, 5, 1.0), (0, 4, 0.0)]:
        assert abs(binomial_tail(k, n, q, upper=False) - binom.cdf(k, n, q)) < 1e-9
        assert abs(binomial_tail(k, n, q, upper=True) - binom.sf(k - 1, n, q)) < 1e-9


def test_only_share_constraints_stop_a_race():
    """A constraint on latency has no test that holds at small n whatever its law: it waits
    for the finished value."""
    slow = records(32, 10.0, 0.2, seed=10)
    assert not infeasible(slow, [("latency_s", "<=", 0.01)], RACING)
    assert infeasible(slow, [("accuracy", ">=", 0.9)], RACING)


@pytest.mark.slow
def test_wrongly_stopped_at_most_alpha_at_every_first_rung_size_two_shapes_two_alphas():
    """Candidates not dominated in truth (one law for both, or a faster rival less accurate)
    and constraints met exactly: the
    share stopped stays <= alpha within 4 standard errors at every simulated rung size."""
    rows = error_table(reps=600, seed=1)
    assert {(r.shape, r.alpha) for r in rows} == {(s, a) for s in SHAPES for a in (0.01, 0.05)}
    assert {r.n for r in rows} == set(SIZES) and set(range(1, 17)) <= set(SIZES)
    over = [r for r in rows if r.over]
    assert not over, over
    # not vacuous: the single test sits near alpha once 2^-n allows it to reject at all
    late = [r.speed_only for r in rows if r.n >= 16 and r.alpha == 0.05]
    assert 0.03 < sum(late) / len(late) < 0.07
