import itertools
import random

import pytest

from orchestrator.analysis.frontier import default_reference, hypervolume, hypervolume_history, tied


def brute_hypervolume(points, directions, reference):
    """Count the unit cells (integer grid) that some point dominates, inside the reference."""
    signs = [-1 if d == "max" else 1 for d in directions]
    loss = [[s * v for s, v in zip(signs, p)] for p in points]
    ref = [int(round(s * v)) for s, v in zip(signs, reference)]
    lows = [min([p[k] for p in loss] + [ref[k]]) for k in range(len(ref))]
    cells = itertools.product(*[range(lo, r) for lo, r in zip(lows, ref)])
    return sum(any(all(p[k] <= c[k] for k in range(len(c))) for p in loss) for c in cells)


@pytest.mark.parametrize("directions", [("max", "max"), ("max", "min"), ("min", "max", "max"), ("max",) * 3])
def test_hypervolume_matches_brute_force_with_ties(directions):
    rng = random.Random(len(directions) * 7 + (directions[1] == "min"))
    for _ in range(40):
        points = [tuple(rng.randint(0, 4) for _ in directions) for _ in range(rng.randint(1, 8))]
        points += points[:2]  # exact ties
        reference = default_reference(points, directions)
        assert hypervolume(points, directions, reference) == pytest.approx(
            brute_hypervolume(points, directions, reference)
        )


def test_reference_and_history():
    points = [(1.0, 0.0), (0.0, 1.0), (1.0, 1.0)]
    assert default_reference(points, ("max", "max")) == (0.0, 0.0)
    assert hypervolume_history(points, ("max", "max"), (0.0, 0.0)) == [0.0, 0.0, 1.0]
    assert hypervolume(points, ("max", "max"), (-1.0, -1.0)) == 4.0


def test_tied_frontier_points_have_overlapping_intervals():
    points = [(10.0, 0.9), (11.0, 0.85), (20.0, 0.2)]
    metrics = [
        {"accuracy_lo": 0.8, "accuracy_hi": 0.95, "throughput_ratio_lo": 1.0, "throughput_ratio_hi": 1.2},
        {"accuracy_lo": 0.8, "accuracy_hi": 0.9, "throughput_ratio_lo": 1.1, "throughput_ratio_hi": 1.3},
        {"accuracy_lo": 0.1, "accuracy_hi": 0.3, "throughput_ratio_lo": 1.9, "throughput_ratio_hi": 2.1},
    ]
    assert tied(points, metrics, ("max", "max")) == [True, True, False]
