"""What a finished trial measured, from its shards' results: the metrics it is judged on,
its speed ratios against the pair's `ar` baseline, and its constraint values."""

from __future__ import annotations

import math
import re

from orchestrator.analysis.metrics import (
    NUMBER,
    batches,
    control_speed,
    controlled_ratios,
    paired_bootstrap,
    served_ratios,
    trial_metrics,
)

# a constraint: `metric >= bound` or `metric <= bound`
CONSTRAINT = re.compile(rf"^\s*([a-z][a-z0-9_]*)\s*(>=|<=)\s*({NUMBER})\s*$")


def shard_records(results: list[dict]) -> list[dict]:
    """Every prompt's record of a job, in prompt order."""
    return sorted((r for out in results for r in out["records"]), key=lambda r: r["index"])


def trial_outcome(results: list[dict], ar: list[dict] | None, seed: int,
                  slo: dict[str, float] | None = None) -> tuple[dict, dict | None]:
    """(metrics, control) of a trial: its trial metrics (goodput under `slo`); with the `ar`
    baseline's records, the paired-bootstrap ratios and the ratios against the controls timed
    beside it; the counts of control and warm-up decodes. `control` ({at, decodes, ms_per_token}) is None
    when no shard timed a control."""
    records = shard_records(results)
    metrics = trial_metrics(records, slo)
    if "ttft_s" in metrics:  # served by a serving engine: compared with it unspeculative
        metrics.update(served_ratios([(out["records"], out.get("controls", [])) for out in results]))
    elif ar:
        metrics.update(paired_bootstrap(records, ar, seed=seed))
        by_shard = [(batches(out["records"]), out.get("controls", [])) for out in results]
        metrics.update(controlled_ratios(by_shard, batches(ar), seed=seed))
    controls = [c for out in results for c in out.get("controls", [])]
    metrics["control_decodes"] = len(controls)
    if any("engine_start_s" in out for out in results):  # serving engines started for this trial
        metrics["engine_start_s"] = sum(out.get("engine_start_s", 0.0) for out in results)
        metrics["engine_restarts"] = sum(out.get("engine_restarts", 0) for out in results)
        metrics["engine_starts"] = sum(out.get("engine_starts", 0) for out in results)
    metrics["warmup_decodes"] = sum(out.get("warmup", 0) for out in results)
    metrics["engine_s"] = engine_seconds(results)
    control = None
    if controls:
        control = {"at": min(c["at"] for c in controls), "decodes": len(controls),
                   "ms_per_token": control_speed(controls)}
    return metrics, control


def engine_seconds(results: list[dict]) -> float:
    """A job's cost in engine-seconds: the wall time its workers spent on its shards, warm-up,
    controls and engine starts included (each shard's `engine_s`)."""
    return float(sum(out.get("engine_s", 0.0) for out in results))


def constraint_values(metrics: dict, constraints: list[str]) -> list[float]:
    """One value per constraint, feasible when <= 0 (Optuna's convention): `m >= b` gives
    b − m, `m <= b` gives m − b; a metric the trial lacks is infeasible."""
    return [(bound - metrics.get(m, -math.inf)) if op == ">=" else (metrics.get(m, math.inf) - bound)
            for m, op, bound in constraint_terms(constraints)]


def constraint_terms(constraints: list[str]) -> list[tuple[str, str, float]]:
    """(metric, operator, bound) of each constraint string."""
    return [(m.group(1), m.group(2), float(m.group(3))) for m in map(CONSTRAINT.match, constraints)]
