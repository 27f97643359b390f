"""The sustained-rate search keeps its stated error rates, by simulation: at every repeat
count and step count the command allows, a rate whose loads meet the SLO a fraction q of the
time or less is labelled sustained at most q^R of the time, and the reported rate exceeds r_q
(the highest rate met a fraction q of the time) at most (steps + 2) · q^R of the time; for q =
1/2 and 1/4."""

import math
import random

import pytest

from orchestrator.search.bisection import (
    MAX_REPEATS,
    MAX_STEPS,
    label_error,
    midpoint,
    overshoot_bound,
    search,
)

RUNS = 2000


def curve(half: float, slope: float):
    """p(r): a logistic fall in log rate, 1/2 at `half`."""
    return lambda rate: 1 / (1 + math.exp(min(50.0, slope * (math.log(rate) - math.log(half)))))


def crossing(half: float, slope: float, q: float) -> float:
    """r_q of `curve(half, slope)`: where p(r) = q."""
    return half * math.exp(math.log(1 / q - 1) / slope)


def simulate(p, low, high, steps, repeats, rng):
    return search(lambda rate, i: rng.random() < p(rate), low, high, steps, repeats)


def test_a_clear_curve_is_bracketed_around_its_crossing():
    rng = random.Random(0)
    found = simulate(curve(10.0, 400.0), 1.0, 64.0, 6, 3, rng)
    assert found.sustained < 10.0 < found.failed
    assert found.failed / found.sustained <= 64 ** (1 / 2 ** 6) + 1e-9
    assert [r for r, _, _ in found.probes][:3] == [64.0, 1.0, midpoint(1.0, 64.0)]


def test_the_ends_of_the_range_are_reported_as_such():
    rng = random.Random(0)
    assert simulate(lambda r: 1.0, 1.0, 64.0, 4, 3, rng).sustained == 64.0
    below = simulate(lambda r: 0.0, 1.0, 64.0, 4, 3, rng)
    assert below.sustained is None and below.failed == 1.0 and len(below.probes) == 2


@pytest.mark.parametrize("repeats", range(1, MAX_REPEATS + 1))
def test_a_rate_met_half_the_time_or_less_is_labelled_sustained_at_most_2_to_the_minus_r(repeats):
    rng = random.Random(repeats)
    for p in (0.5, 0.3, 0.25, 0.1):
        # one probe: the range's high end, labelled sustained or not
        labelled = sum(search(lambda rate, i, p=p: rng.random() < p, 1.0, 2.0, 0, repeats).sustained == 2.0
                       for _ in range(RUNS))
        bound = label_error(p, repeats)
        assert bound <= (0.5 if p > 0.25 else 0.25) ** repeats
        assert labelled / RUNS <= bound + 3 * math.sqrt(bound * (1 - bound) / RUNS) + 1e-9


@pytest.mark.parametrize("repeats", range(1, MAX_REPEATS + 1))
@pytest.mark.parametrize("steps", range(MAX_STEPS + 1))
def test_the_reported_rate_overshoots_r_q_within_the_bound(repeats, steps):
    """Over curves steep and shallow, crossing inside the range and near its ends."""
    rng = random.Random(repeats * 100 + steps)
    runs = RUNS // 4
    for half, slope in ((10.0, 2.0), (10.0, 20.0), (1.5, 5.0), (50.0, 5.0)):
        p = curve(half, slope)
        reported = [simulate(p, 1.0, 64.0, steps, repeats, rng).sustained or 0.0 for _ in range(runs)]
        for q in (0.5, 0.25):
            bound = overshoot_bound(steps, repeats, q)
            over = sum(rate > crossing(half, slope, q) for rate in reported) / runs
            assert over <= bound + 3 * math.sqrt(bound * (1 - bound) / runs) + 1e-9


def test_a_search_cut_short_keeps_its_probes_in_the_bracket_given():
    """`sustain` keeps what a setting's search found before its server was lost twice."""
    from orchestrator.search.bisection import Bracket

    def meets(rate, i):
        if rate < 8:  # the second rate probed: the engine fails under it
            raise RuntimeError("engine lost")
        return False

    found = Bracket()
    with pytest.raises(RuntimeError):
        search(meets, 1.0, 64.0, 2, 3, found)
    assert found.failed == 64.0 and found.sustained is None and found.probes == [(64.0, 0, 1)]
