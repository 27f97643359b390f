"""The racing rule on constructed per-prompt records: frontier candidates are never stopped,
clearly dominated ones stop at the first rung, and candidates that are not dominated in
truth are stopped at about the stated rate α or less."""

import numpy as np

from orchestrator.analysis.racing import Racing, dominated, infeasible, rungs, stop

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
        assert not stop(fast[:rung], [accurate], OBJECTIVES, [], RACING)
        assert not stop(accurate[:rung], [fast], OBJECTIVES, [], RACING)
    assert stop(slow_and_wrong[:16], [fast, accurate], OBJECTIVES, [], RACING)
    # a rival measured on fewer prompts cannot stop a candidate measured further
    assert not stop(slow_and_wrong[:32], [fast[:16]], OBJECTIVES, [], RACING)


def test_identical_answers_count_as_not_worse():
    """Two lossless configurations answer alike; the faster one dominates."""
    slow = records(32, 100.0, 0.8, seed=4)
    fast = [{**r, "wall_s": r["wall_s"] / 2} for r in slow]
    assert dominated(slow[:16], fast, OBJECTIVES, RACING)
    assert not dominated(fast[:16], slow, OBJECTIVES, RACING)


def test_infeasible_with_confidence_stops():
    weak = records(32, 300.0, 0.2, seed=5)
    assert infeasible(weak[:16], [("accuracy", ">=", 0.9)], RACING)
    assert not infeasible(records(32, 300.0, 0.95, seed=6)[:16], [("accuracy", ">=", 0.9)], RACING)


def test_a_rival_no_better_in_truth_stops_a_candidate_at_most_about_alpha_of_the_time():
    """Same true speed and accuracy: dominance is false, so every stop is an error."""
    stops = sum(dominated(records(16, 200.0, 0.7, seed=100 + s), records(16, 200.0, 0.7, seed=500 + s),
                          OBJECTIVES, Racing(alpha=0.05, resamples=400), seed=s) for s in range(200))
    assert stops <= 0.05 * 200
