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


def search_world(seed: int, beside: bool, error: float = 0.0) -> tuple[int, int, ServingSearch, object]:
    """The search run to its end in world `seed`, each step's timings told their truth
    (with the settings `beside` the chosen one where asked): (loads at R = 3, timings, the
    search, the truth)."""
    gains, truth = world(random.Random(seed))
    search = ServingSearch(gains, [1, 4, 16], tolerance=0.05, error=error, repeats=3,
                           starts={s: s[0] for s in gains})  # a server a method, drafting n at run time
    loads = timed = 0
    while (step := search.next()) is not None:
        setting, where = step
        assert setting not in search.ratios or not set(where) & set(search.ratios[setting])
        for c in where:
            group = [setting, *(search.beside(setting, c) if beside else [])]
            assert all(c not in search.ratios.get(s, {}) for s in group)
            loads += 3 * len(group) + 4  # R loads each, R + 1 controls shared
            for s in group:
                search.tell(s, c, *truth(s, c))
            timed += len(group)
    return loads, timed, search, truth


@pytest.mark.parametrize("beside", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_the_pick_is_within_the_tolerance_of_the_best_in_a_world_of_its_model(seed, beside):
    _, timed, search, truth = search_world(seed, beside)
    for c, pick in search.picks().items():
        best = max(truth(s, c)[1] for s in search.gains)
        assert truth(pick, c)[1] >= best / 1.05 - 1e-9
    assert timed < len(search.gains) * 3 - 3  # it left some configurations untimed


# sweeps/serving.yaml's settings as their acceptance was measured (docs/results.md): DFlash
# drafts n a step, ngram fewer where no n-gram matches
MEASURED = {("none", 0): (1.0, 0.0)}
for n, accepted in zip((1, 3, 5, 7), (0.815, 2.307, 3.867, 4.557)):
    MEASURED["dflash", n] = (1 + accepted, n)
for n, accepted in zip((1, 3, 5, 7), (0.639, 1.328, 1.541, 1.541)):
    MEASURED["ngram", n] = (1 + accepted, 0.6 * n)


def test_the_draft_length_a_first_timing_seldom_rules_out_is_timed_beside_it():
    starts = {s: s[0] for s in MEASURED}  # a server a method, drafting n at run time
    search = ServingSearch(MEASURED, [1, 4, 16], tolerance=0.05, error=0.15, repeats=3, starts=starts)
    chosen, where = search.next()
    assert chosen == ("dflash", 7) and where == [1, 4, 16]
    # still wanted after dflash 7's timing at 20/32 of its possible ratios: 5/8 > 3/7
    assert search.still_wanted(("dflash", 5), chosen, 1) == pytest.approx(0.625)
    assert search.still_wanted(("dflash", 3), chosen, 1) < 3 / 7
    assert all(search.beside(chosen, c) == [("dflash", 5)] for c in where)  # never ngram's
    # a drafter started at each n (its family drafts no other n at run time): nothing beside
    started = ServingSearch(MEASURED, [1, 4, 16], tolerance=0.05, error=0.15, repeats=3,
                            starts={s: s for s in MEASURED})
    assert all(started.beside(chosen, c) == [] for c in where)
    search.tell(chosen, 1, 500.0, 2.28)
    search.tell(("dflash", 5), 1, 450.0, 2.05)
    assert search.beside(("dflash", 3), 1) == []  # nothing left to time at 1


@pytest.mark.parametrize("error", [0.0, 0.15])
def test_timing_beside_costs_no_more_loads_over_the_worlds_and_picks_as_well(error):
    alone = [search_world(seed, False, error) for seed in range(40)]
    beside = [search_world(seed, True, error) for seed in range(40)]
    assert sum(b[0] for b in beside) <= sum(a[0] for a in alone)
    for (_, _, a, truth), (_, _, b, _) in zip(alone, beside):
        for c, pick in b.picks().items():
            assert truth(pick, c)[1] >= truth(a.picks()[c], c)[1] / 1.05 - 1e-9
