"""A schedule's switches, and the sign test that refuses one keeping its stated error rate,
by simulation at every repeat count the export allows."""

import math
import random

import pytest

from orchestrator.analysis.schedule import MAX_REPEATS, Switch, always_slower, moved, refusal_error, switches

RANGES = [[1, 1, 7], [2, 4, 3], [5, 16, 1]]


def test_switches_sit_between_ranges_and_a_refused_one_moves_towards_where_it_lost():
    assert switches(RANGES) == [Switch(1, 2, 7, 3), Switch(4, 5, 3, 1)]
    # lost at 5 (above): n = 3 drafts there; lost at 4 (below): n = 1 drafts there
    assert moved(RANGES, Switch(4, 5, 3, 1), 5) == [[1, 1, 7], [2, 5, 3], [6, 16, 1]]
    assert moved(RANGES, Switch(4, 5, 3, 1), 4) == [[1, 1, 7], [2, 3, 3], [4, 16, 1]]
    # a one-size range left empty is dropped; two refusals in a row keep each other's move
    once = moved(RANGES, Switch(1, 2, 7, 3), 1)
    assert once == [[1, 4, 3], [5, 16, 1]]
    assert moved(once, Switch(4, 5, 3, 1), 5) == [[1, 5, 3], [6, 16, 1]]
    assert switches([[1, 16, 3]]) == []
    assert switches([[1, 1, 3], [2, 4, 3], [5, 16, 0]]) == [Switch(4, 5, 3, 0)]


def test_the_sign_test_needs_every_pair_slower():
    assert always_slower([2.0, 2.1], [1.0, 2.0]) and not always_slower([2.0, 1.9], [1.0, 2.0])
    assert not always_slower([], [])


@pytest.mark.parametrize("repeats", range(1, MAX_REPEATS + 1))
def test_a_switch_as_fast_as_the_other_n_is_refused_within_the_bound(repeats):
    """Equal speed: both sides' loads from one noisy law (log-normal, drifting between pairs
    as a machine does); a refusal is a sign test failing at either side."""
    rng, runs = random.Random(repeats), 4000
    refused = 0
    for _ in range(runs):
        sides = []
        for _side in range(2):
            drift = [math.exp(rng.gauss(0, 0.3)) for _ in range(repeats)]
            ours = [d * math.exp(rng.gauss(0, 0.1)) for d in drift]
            theirs = [d * math.exp(rng.gauss(0, 0.1)) for d in drift]
            sides.append(always_slower(ours, theirs))
        refused += any(sides)
    bound = refusal_error(repeats)
    assert refused / runs <= bound + 3 * math.sqrt(bound * (1 - bound) / runs) + 1e-9


def test_a_clearly_slower_switch_is_refused():
    rng = random.Random(0)
    ours = [1.3 * math.exp(rng.gauss(0, 0.05)) for _ in range(5)]
    theirs = [math.exp(rng.gauss(0, 0.05)) for _ in range(5)]
    assert always_slower(ours, theirs)
