"""The serving replay (bench/servingsearch.py): its ledger (resident servers: a start per
method served, the control's once), a grid point answered as a trial that measures what the
grid did, and the registered strategies replayed through the search protocol on a small grid
whose ratios follow the multi-fidelity search's cost model, its profiles decoded for real."""

import math

from orchestrator.analysis.outcome import trial_outcome
from orchestrator.bench.servingsearch import (
    Grid,
    Ledger,
    Point,
    grid_ledger,
    multifidelity,
    per_concurrency,
    picked,
    sampled,
    served_result,
    spent_on,
)
from orchestrator.spec.space import candidate_of, grid, params_key
from orchestrator.spec.sweep import parse_spec
from orchestrator.sweep.prompts import spec_prompts


def point(method, drafts, c, ratio, start=20.0):
    first = c == 1  # the grid records a setting's start on its first trial
    return Point(method, drafts, c, 100.0 * c * ratio, ratio, 1.0, 10.0 + (start if first else 0.0),
                 start if first else 0.0)


def served_grid(ratio) -> Grid:
    """toy-dflash under vLLM: none and DFlash n = 1, 3, 5, 7 at concurrency 1 and 4, each
    point's ratio `ratio(setting, concurrency)`."""
    spec = parse_spec({"name": "replayed", "pairs": ["toy-dflash"], "task": {"name": "arith", "limit": 8},
                       "space": {"engine": ["vllm"], "method": ["none", "dflash"],
                                 "num_speculative_tokens": [1, 3, 5, 7], "concurrency": [1, 4],
                                 "max_new_tokens": 16},
                       "objectives": {"throughput_ratio": "max", "accuracy": "max"},
                       "search": {"sampler": "grid", "trials": 10}})
    points = {}
    for params in grid(spec):
        config = candidate_of(spec, params).config
        setting = (config.method, config.num_speculative_tokens if config.method != "none" else 0)
        points[params_key(params)] = point(*setting, config.concurrency, ratio(setting, config.concurrency))
    _, examples, prompts = spec_prompts(spec)
    return Grid(spec, points, [e.index for e in examples], prompts)


def test_a_worker_pays_the_controls_start_once_and_a_start_per_method_it_turns_to():
    points = {("none", 0, 1): point("none", 0, 1, 1.0),
              ("ngram", 3, 1): point("ngram", 3, 1, 1.2, start=15.0)}
    for c in (1, 4):
        for n in (1, 3):
            points["dflash", n, c] = point("dflash", n, c, 2.0)
    ledger = Ledger(points)
    for key in (("dflash", 1, 1), ("dflash", 1, 4), ("dflash", 3, 4), ("dflash", 1, 4)):
        ledger.run(points[key])  # one resident DFlash server drafts n = 1 and 3
    assert ledger.spent == 20 + (20 + 10) + 10 + 10 + 10 and ledger.starts == 2
    ledger.run(points["ngram", 3, 1])
    ledger.run(points["dflash", 3, 4])  # turning back to DFlash starts it again
    assert ledger.spent == 20 + (20 + 10) + 10 + 10 + 10 + (15 + 10) + (20 + 10) and ledger.starts == 4


def test_a_replayed_timing_measures_what_the_grid_measured():
    grid_point = Point("dflash", 5, 4, 812.5, 1.73, 0.625, 30.0, 0.0)
    metrics, _ = trial_outcome([served_result(grid_point)], None, 0)
    assert math.isclose(metrics["throughput_tps"], 812.5) and math.isclose(metrics["throughput_ratio"], 1.73)
    assert metrics["accuracy"] == 0.625


def test_every_registered_strategy_replays_within_its_budget():
    replayed = served_grid(lambda setting, c: 1.0 + setting[1] / (1 + c))
    full = grid_ledger(replayed.points)
    assert set(sampled(replayed, "grid", 0, math.inf)) == set(replayed.points.values())
    for strategy in ("random", "tpe"):
        found = sampled(replayed, strategy, 1, full.spent / 2)
        assert 0 < len(found) < len(replayed.points)
        assert spent_on(replayed.points, found).spent <= full.spent / 2


def test_the_search_picks_the_best_at_each_concurrency_and_times_less_than_the_grid():
    """Replayed once to read the acceptance it measures (its profiles, decoded here), then on a
    grid whose ratios follow its cost line g / (1.6 + 0.1·c·W̄): it picks the grid's best at
    each concurrency, timing fewer points, on one start for the control and one for DFlash."""
    search, _, _ = multifidelity(served_grid(lambda setting, c: 1.0), tolerance=0.05, error=0.0)
    gains = {setting[:2]: gain for setting, gain in next(iter(search.searches.values())).gains.items()}
    assert all(gains["dflash", n][0] > 1.0 for n in (1, 3, 5, 7))  # DFlash accepts drafts here
    replayed = served_grid(lambda s, c: 1.0 if s[0] == "none"
                           else gains[s][0] / (1.6 + 0.1 * c * gains[s][1]))
    search, spent, ledger = multifidelity(replayed, tolerance=0.05, error=0.0)
    points = replayed.points
    full = grid_ledger(points)
    picks = next(iter(search.searches.values())).picks()
    timed = [points[k] for k in search.timed]
    for c in (1, 4):
        best = max((p for p in points.values() if p.concurrency == c), key=lambda p: p.ratio)
        assert picked(search, points, picks[c], c) == best
        assert per_concurrency(points, timed, c, "throughput_ratio", best)["pick_gap"] == 0.0
    assert len(timed) < len(points) - 2 and ledger.spent < full.spent and spent > ledger.spent  # + profiles
    assert ledger.starts == full.starts == 2  # the control's and DFlash's, n drafted at run time
