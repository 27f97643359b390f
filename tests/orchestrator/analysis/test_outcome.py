"""A trial's outcome from its shards' results, decoded for real on the toy pair by a worker
body (no Ray): its metrics, its ratios against the `ar` baseline and the controls timed beside
it, its cost in engine-seconds; and its constraint values, feasible at <= 0."""

import math

import pytest

from orchestrator.analysis.outcome import (
    constraint_terms,
    constraint_values,
    engine_seconds,
    shard_records,
    trial_outcome,
)
from orchestrator.engines.shard import Shard
from orchestrator.sweep.workers import PairWorker
from workloads.decoding import DecodeConfig
from workloads.tasks import get_task

TRIAL = DecodeConfig(schedule="linear", block=4, max_new_tokens=12)
AR = DecodeConfig(schedule="ar", max_new_tokens=12)


@pytest.fixture(scope="module")
def decoded():
    """Two shards of a trial (each with its `ar` controls) and the `ar` baseline's records."""
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    examples = get_task("arith").examples(n=8, seed=0)
    items = [(e, e.prompt) for e in examples]
    shards = [worker.run([Shard(0, "toy", TRIAL, tuple(range(a, b)), control=AR)], items[a:b])[0]
              for a, b in ((0, 4), (4, 8))]
    (ar,) = worker.run([Shard(-1, "toy", AR, tuple(range(8)))], items)
    return shards, ar["records"]


def test_records_come_back_in_prompt_order_whatever_the_shard_order(decoded):
    shards, _ = decoded
    assert [r["index"] for r in shard_records(shards[::-1])] == list(range(8))


def test_a_trial_is_scored_against_its_baseline_and_its_own_controls(decoded):
    shards, ar = decoded
    metrics, control = trial_outcome(shards, ar, seed=0)
    assert metrics["throughput_tps"] > 0 and 0 <= metrics["accuracy"] <= 1
    assert metrics["throughput_ratio_lo"] <= metrics["throughput_ratio"] <= metrics["throughput_ratio_hi"]
    assert metrics["baseline_slowdown"] > 0  # the ratios are against the ar decodes timed beside it
    assert metrics["control_decodes"] == 6 == control["decodes"]  # 3 a shard
    assert control["ms_per_token"] > 0
    assert control["at"] == min(c["at"] for s in shards for c in s["controls"])
    assert metrics["engine_s"] == pytest.approx(engine_seconds(shards)) and metrics["engine_s"] > 0
    assert metrics["warmup_decodes"] == sum(s["warmup"] for s in shards)


def test_a_trial_without_controls_or_baseline_has_its_own_metrics_only(decoded):
    shards, _ = decoded
    bare = [{**s, "controls": []} for s in shards]
    metrics, control = trial_outcome(bare, None, seed=0)
    assert control is None and metrics["control_decodes"] == 0 and "throughput_ratio" not in metrics
    paired, _ = trial_outcome(bare, decoded[1], seed=0)  # against the baseline alone: no slowdown to read
    assert paired["throughput_ratio"] > 0 and "baseline_slowdown" not in paired


def test_constraints_are_feasible_at_or_below_zero_and_a_missing_metric_is_not():
    terms = ["accuracy >= 0.5", "latency_s <= 2"]
    assert constraint_terms(terms) == [("accuracy", ">=", 0.5), ("latency_s", "<=", 2.0)]
    assert constraint_values({"accuracy": 0.75, "latency_s": 1.0}, terms) == [-0.25, -1.0]
    assert constraint_values({"accuracy": 0.25}, terms) == [0.25, math.inf]
