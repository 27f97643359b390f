"""The serving search's bounds and its promise: in worlds where step costs follow its model
(y = o + b·W̄ per method and concurrency, o, b >= 0), timed without noise, the pick at every
concurrency is within the tolerance of the best configuration, timed or not."""

import random

import pytest

from orchestrator.search.servingsearch import ServingSearch, least_cost


def test_nothing_timed_bounds_a_step_by_a_plain_one():
    assert least_cost([], 3.0, 0.15) == 0.0


def test_one_timed_width_bounds_narrower_ones_by_the_line_through_the_origin():
    assert least_cost([(4.0, 2.0)], 2.0, 0.15) == pytest.approx(1.0)  # o = 0, b = 0.5
    assert least_cost([(4.0, 2.0)], 6.0, 0.15) == pytest.approx(2.0)  # b = 0: all of it fixed


def test_two_widths_give_the_line_less_its_error():
    assert least_cost([(1.0, 1.5), (5.0, 3.5)], 3.0, 0.1) == pytest.approx(2.5 * 0.9)


def world(rng: random.Random):
    """Settings with gains and widths, and true costs per (method, concurrency) on lines."""
    gains = {("none", 0): (1.0, 0.0)}
    for method, per_draft in (("dflash", 0.8), ("ngram", 0.25)):
        gain = 1.0
        for n in (1, 2, 3, 5, 7):
            gain += rng.uniform(0.0, per_draft) * (0.85 ** n)
            gains[method, n] = (gain, n if method == "dflash" else rng.uniform(0.2, 0.4) * n)
    lines = {(m, c): (rng.uniform(0.0, 1.5), rng.uniform(0.0, 0.5))
             for m in ("dflash", "ngram") for c in (1, 4, 16)}
    control = {c: rng.uniform(100, 2000) for c in (1, 4, 16)}

    def truth(setting, c):
        gain, width = gains[setting]
        o, b = lines.get((setting[0], c), (0.0, 0.0))
        return control[c] * gain / (1 + o + b * width), gain / (1 + o + b * width)

    return gains, truth


@pytest.mark.parametrize("seed", range(40))
def test_the_pick_is_within_the_tolerance_of_the_best_in_a_world_of_its_model(seed):
    gains, truth = world(random.Random(seed))
    search = ServingSearch(gains, [1, 4, 16], tolerance=0.05, error=0.0)
    timed = 0
    while (step := search.next()) is not None:
        setting, where = step
        assert setting not in search.ratios or not set(where) & set(search.ratios[setting])
        for c in where:
            search.tell(setting, c, *truth(setting, c))
            timed += 1
    for c, pick in search.picks().items():
        best = max(truth(s, c)[1] for s in gains)
        assert truth(pick, c)[1] >= best / 1.05 - 1e-9
    assert timed < len(gains) * 3 - 3  # it left some configurations untimed
