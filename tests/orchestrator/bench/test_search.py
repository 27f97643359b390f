import json

from orchestrator.bench.search import fractions, replay_values, replayed_strategies
from orchestrator.spec.space import grid
from orchestrator.spec.sweep import parse_spec

SPEC = parse_spec(
    {
        "name": "r",
        "pairs": ["toy"],
        "task": {"name": "arith", "limit": 2},
        "space": {
            "block": [2, 4, 8],
            "steps": [1, 2, 4],
            "rule": ["lossless", "linear"],
            "leniency": [0.5, 1.0],
        },
        "objectives": {"throughput_tps": "max", "accuracy": "max"},
    }
)


def table():
    out = {}
    for p in grid(SPEC):
        speed = 100 * p.get("block", 2) / (p.get("steps|B=4", p.get("steps|B=8", p.get("steps", 1))))
        out[tuple(sorted(p.items()))] = (speed + 50 * p.get("leniency", 0), 1.0 - 0.5 * p.get("leniency", 0))
    return out


def test_every_registered_strategy_asks_distinct_grid_points_and_full_grid_reaches_all(tmp_path):
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps({"steps": [1, 2], "d_k": [0.5, 0.3], "draft_cost": [0.001, 0.002],
                                       "verify_cost": 0.003, "block": 4}))
    t = table()
    strategies = replayed_strategies(guided=True)
    assert {"grid", "random", "tpe", "nsga2", "gp", "guided"} <= set(strategies)
    for strategy in strategies:
        points = replay_values(SPEC, t, strategy, seed=0, trials=len(t), guide=str(calibration))
        assert len(points) == len(t) and set(points) <= set(t.values())
        assert fractions(SPEC, t, points, shares=(1.0,)) == [1.0]
    partial = fractions(SPEC, t, replay_values(SPEC, t, "tpe", 0, 5), shares=(0.1, 0.25))
    assert all(0 <= f <= 1 for f in partial)
