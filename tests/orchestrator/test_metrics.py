import itertools
import random

import pytest

from orchestrator.metrics import paired_bootstrap, pareto_front, trial_metrics


def record(i, wall, tokens, correct=1.0, **kw):
    base = dict(
        index=i,
        wall_s=wall,
        new_tokens=tokens,
        nfe=tokens,
        overhead_s=0.1 * wall,
        accepted=2,
        drafted=4,
        iterations=2,
        correct=correct,
    )
    return base | kw


def test_trial_metrics_follow_their_formulas():
    rs = [record(0, 1.0, 10, 1.0), record(1, 3.0, 30, 0.0, nfe=10)]
    m = trial_metrics(rs)
    assert m["accuracy"] == 0.5 and m["latency_s"] == 2.0 and m["throughput_tps"] == 10.0
    assert m["tokens_per_nfe"] == 40 / 20 and m["time_per_nfe_s"] == 4 / 20
    assert m["acceptance_rate"] == 0.5 and m["mean_accept_len"] == 1.0
    assert m["overhead_frac"] == pytest.approx(0.1)
    assert "accuracy" not in trial_metrics([record(0, 1, 1, correct=None)])
    assert "acceptance_rate" not in trial_metrics([record(0, 1, 1, drafted=0)])


def brute_force(points, directions):
    def better_eq(a, b, d):
        return a >= b if d == "max" else a <= b

    front = []
    for i, p in enumerate(points):
        dominated = False
        for q in points:
            if all(better_eq(x, y, d) for x, y, d in zip(q, p, directions)) and q != p:
                dominated = True
        if not dominated:
            front.append(i)
    return front


@pytest.mark.parametrize(
    "directions", list(itertools.product(("max", "min"), repeat=3))[:4] + [("max", "min")]
)
def test_pareto_front_matches_brute_force(directions):
    rng = random.Random(len(directions))
    for _ in range(50):
        points = [tuple(rng.choice([0, 1, 2, 3]) for _ in directions) for _ in range(12)]
        assert pareto_front(points, directions) == brute_force(points, directions)


def test_paired_bootstrap_brackets_the_point_ratio():
    base = [record(i, 1.0, 10) for i in range(20)]
    trial = [record(i, 0.5 + 0.05 * (i % 3), 10, correct=float(i % 4 != 0)) for i in range(20)]
    b = paired_bootstrap(trial, base, resamples=500)
    assert b["throughput_ratio_lo"] <= b["throughput_ratio"] <= b["throughput_ratio_hi"]
    assert 1.6 < b["throughput_ratio"] < 2.0 and b["latency_ratio"] == pytest.approx(
        1 / b["throughput_ratio"]
    )
    assert b["accuracy_lo"] <= 0.75 <= b["accuracy_hi"]


def test_bootstrap_intervals_cover_the_truth_at_about_the_nominal_rate():
    """Synthetic trials: correct ~ Bernoulli(0.7), walls ~ lognormal with a known mean ratio
    2 against the baseline. The 95% intervals should cover the truth ~95% of the time."""
    rng = random.Random(11)
    covered_acc = covered_ratio = 0
    runs = 200
    for run in range(runs):
        base, trial = [], []
        for i in range(60):
            wall = rng.lognormvariate(0, 0.3)
            base.append(record(i, wall, 20))
            trial.append(record(i, wall * rng.lognormvariate(-0.693 - 0.02, 0.2), 20,
                                correct=float(rng.random() < 0.7)))
        b = paired_bootstrap(trial, base, resamples=1000, seed=run)
        covered_acc += b["accuracy_lo"] <= 0.7 <= b["accuracy_hi"]
        covered_ratio += b["throughput_ratio_lo"] <= 2.0 <= b["throughput_ratio_hi"]
    assert 0.88 <= covered_acc / runs <= 0.99
    assert 0.85 <= covered_ratio / runs <= 0.99
