"""What a user is told to deploy: routes and picks rank by the sweep's own speed objective, so a
configuration another beats on that objective and on accuracy is never recommended."""

import dataclasses
from pathlib import Path

from orchestrator.analysis.choice import by_batch_size, pick, routes, speed_metric
from orchestrator.analysis.export import holds, recommendation
from orchestrator.spec.file import load_spec
from workloads.decoding.config import DecodeConfig

DEMO = load_spec(Path(__file__).parents[3] / "sweeps" / "demo.yaml")


def _row(trial: int, config: DecodeConfig, exact: bool, **metrics) -> dict:
    return {"trial": trial, "pair": "toy-dflash", "batch_size": 1, "exact": exact,
            "config": dataclasses.asdict(config), "metrics": metrics, "tied": False, "timing_flagged": False}


# the demo's frontier at batch size 1, as it came out: trial 76 is there only through its
# acceptance length; on raw tokens/s it looks faster, because it ran while the machine was fast
LOSSLESS = _row(75, DecodeConfig(schedule="linear", block=8, steps=1), True, throughput_ratio=2.983,
                throughput_tps=508.3, accuracy=1.0, mean_accept_len=5.1)
LENIENT = _row(76, DecodeConfig(schedule="linear", block=8, steps=1, rule="linear", leniency=0.5), False,
               throughput_ratio=2.504, throughput_tps=536.1, accuracy=0.708, mean_accept_len=6.3)
FRONTIER = [LOSSLESS, LENIENT]


def test_the_demo_frontier_recommends_the_faster_and_more_accurate_configuration():
    speed = speed_metric(DEMO.objectives, FRONTIER)
    assert speed == "throughput_ratio"  # the demo's own speed objective, not raw tokens/s
    table = routes(FRONTIER, speed, (0.5, 0.75))
    assert [r["trial"] for r in table] == [75, 75]
    assert table[0]["ranked_by"] == "throughput_ratio" and table[0]["throughput_ratio"] == 2.983
    lines = recommendation(DEMO, FRONTIER, (0.5, 0.75))
    assert len(lines) == 1 and lines[0].startswith("batch size 1, accuracy >= 0.5 to 0.75: trial75.yaml")
    assert "2.98x the speed of ar timed beside it, 508.3 tok/s, accuracy 1" in lines[0]
    assert pick(FRONTIER, "fastest", speed) == [LOSSLESS]
    assert by_batch_size(FRONTIER, "all", speed) == {1: LOSSLESS}


def test_every_route_is_undominated_on_speed_and_accuracy():
    """Over many random frontiers (ties included), no route names a row that another row of its
    load meeting the floor beats on both the speed objective and accuracy."""
    import random

    rng = random.Random(0)
    for _ in range(300):
        rows = [{"trial": i, "batch_size": rng.choice((1, 4)),
                 "metrics": {"throughput_ratio": rng.choice((1.0, 1.5, 2.0, rng.uniform(1, 3))),
                             "throughput_tps": rng.uniform(100, 600),
                             "accuracy": rng.choice((0.5, 0.7, 1.0))}}
                for i in range(rng.randint(1, 6))]
        for route in routes(rows, "throughput_ratio", (0.5, 0.75, 0.9)):
            if route["trial"] is None:
                continue
            chosen = next(r for r in rows if r["trial"] == route["trial"])
            peers = [r for r in rows if r["batch_size"] == chosen["batch_size"]
                     and r["metrics"]["accuracy"] >= route["accuracy_floor"]]
            point = lambda r: (r["metrics"]["throughput_ratio"], r["metrics"]["accuracy"])  # noqa: E731
            assert not any(point(o) != point(chosen) and all(a >= b for a, b in zip(point(o), point(chosen)))
                           for o in peers)  # no peer at least as good in both and better in one


def test_speed_falls_back_to_the_ratio_then_tokens_per_second():
    assert speed_metric({"request_goodput": "max", "tpot_p99_s": "min"}, FRONTIER) == "request_goodput"
    assert speed_metric({"accuracy": "max", "latency_s": "min"}, FRONTIER) == "throughput_ratio"
    assert speed_metric({"accuracy": "max"}, [{"metrics": {"throughput_tps": 1.0}}]) == "throughput_tps"


def test_by_batch_size_says_first_what_it_holds():
    specsweep_only = {1: {"config": LENIENT["config"]}}
    line = holds(specsweep_only, False, "all", "throughput_ratio")
    assert line == ("per batch size, the frontier configuration --pick fastest chose there, ranked by "
                    "throughput_ratio and accuracy; at batch size 1 no vLLM setting (specsweep only: "
                    "specsweep decode --config trialN.yaml)")
    served_at_4 = {4: {"config": LOSSLESS["config"], "serving": {"vllm": {}}}}
    mixed = holds({**specsweep_only, **served_at_4}, False, "all", "throughput_ratio")
    assert mixed.endswith("at batch size 1 no vLLM setting (specsweep only: specsweep decode --config "
                          "trialN.yaml); the rest carry theirs under serving.vllm")
    served = {1: {"config": LOSSLESS["config"], "serving": {"vllm": {}}}}
    line = holds(served, False, "knee", "throughput_ratio")
    assert line.endswith("each entry's serving.vllm is its vLLM setting")
