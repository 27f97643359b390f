"""The balanced order that times served trials beside shared controls, and the control each is
compared with (the servers themselves: tests/orchestrator/sweep/test_serving.py)."""

import statistics

import pytest

from orchestrator.engines.serverpool import balanced_order, neighbouring_control


def test_the_order_brackets_every_pass_with_controls_and_reverses_each_other_pass():
    assert balanced_order(3, 2) == [None, 0, 1, 2, None, 2, 1, 0, None]
    assert balanced_order(1, 3) == [None, 0, None, 0, None, 0, None]


@pytest.mark.parametrize(("candidates", "repeats"), [(1, 1), (2, 2), (4, 3), (4, 4), (7, 2)])
def test_each_candidate_is_timed_repeats_times_between_r_plus_one_controls(candidates, repeats):
    order = balanced_order(candidates, repeats)
    assert order.count(None) == repeats + 1 and order[0] is None and order[-1] is None
    assert all(order.count(j) == repeats for j in range(candidates))
    positions = {j: [at for at, x in enumerate(order) if x == j] for j in range(candidates)}
    if repeats % 2 == 0:  # a drift linear in time falls on every candidate alike
        assert len({statistics.mean(at) for at in positions.values()}) == 1


def test_each_candidate_is_compared_with_the_controls_around_its_passes():
    assert neighbouring_control([1.0, 3.0]) == 2.0
    assert neighbouring_control([1.0, 3.0, 5.0, 100.0]) == 4.0  # the median of 2, 4, 52.5
    # a clock that drifts linearly: candidates as fast as the control read the control's speed
    order = balanced_order(3, 2)
    walls = [1.0 + 0.02 * at for at in range(len(order))]
    control = neighbouring_control([w for w, j in zip(walls, order) if j is None])
    for j in range(3):
        assert statistics.median(w for w, x in zip(walls, order) if x == j) == pytest.approx(control)
