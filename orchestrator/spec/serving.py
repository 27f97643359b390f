"""A spec's serving section (ServingSpec), and what a spec must hold for serving metrics and for
the multi-fidelity search on vLLM (search/servingfidelity.py: it measures acceptance greedy, once
per setting, and maximises one speed objective at each concurrency). Checked by spec.sweep,
which turns a message into its one-line error."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.analysis.metrics import PERCENTILES, SERVING_METRICS, SLO_FAMILIES, UNTIMED
from orchestrator.engines import listed

SLO_KEYS = tuple(f"{family}_p{q}_s" for family in SLO_FAMILIES for q in PERCENTILES)
SLO_METRICS = ("request_goodput", "slo_attainment", "slo_met")  # measured against serving.slo


class ServingSpec(BaseModel):
    """How loads served by a serving engine (engine: vllm) are timed and judged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # each trial's load served this many times, in passes between its control's loads (C A C A
    # C ...; trials on one server start share the controls: C A B C B A C); the median wall of
    # each trial against its neighbouring controls' gives the ratio, so one disturbed load does
    # not move it
    repeats: int = Field(1, ge=1, le=9)
    # service-level objectives, {`<ttft|tpot|latency>_p<50|90|99>_s`: seconds}: a request meets
    # them when its own TTFT / TPOT / latency is within each limit (request_goodput counts those)
    slo: dict[str, float] = {}

    @field_validator("slo")
    @classmethod
    def _slo(cls, v: dict) -> dict:
        for key, limit in v.items():
            if key not in SLO_KEYS:
                raise ValueError(f"{key!r} is not an SLO; known: {', '.join(SLO_KEYS)}")
            if not math.isfinite(limit) or limit <= 0:
                raise ValueError(f"{key}: {limit} is not a number of seconds > 0")
        return v


def serving_metrics_error(spec, dims: dict[str, list], named: list[str]) -> str | None:
    """Why the metrics `named` by objectives and constraints, or the SLO, cannot be measured:
    serving metrics only where every listed engine serves (another engine's trials would lack
    them), an SLO only with a serving engine; goodput needs an SLO."""
    engines = listed(dims)
    if not any(e.served for e in engines) and spec.serving.slo:
        return "spec: serving.slo: needs a serving engine (space.engine: [vllm])"
    for name in named:
        unserved = [e.name for e in engines if not e.served]
        if name in SERVING_METRICS and unserved:
            return (f"spec: {name}: measured by a serving engine only; space.engine lists {unserved[0]}, "
                    "whose trials would have none")
        if name in SLO_METRICS and not spec.serving.slo:
            return (f"spec: {name}: counts requests within serving.slo; state one "
                    "(e.g. slo: {ttft_p99_s: 0.5, tpot_p99_s: 0.05})")
    return None


AXES = ("engine", "method", "num_speculative_tokens", "concurrency")  # what the search varies
SPEED = ("throughput_ratio", "throughput_tps")  # the objectives it maximises (and predicts)


def serving_search_error(spec, dims: dict) -> str | None:
    """Why `spec` (its space's values `dims`) cannot run the search on vLLM; None if it can."""
    where = "spec: search.sampler: multifidelity"
    if not all(e.served for e in listed(dims)):
        return (f"{where}: times one kind of engine; list vllm alone in space.engine, or sweep "
                "specsweep's engine in another spec")
    if spec.search.racing is not None:
        return f"{where} on vLLM: times whole trials and never races; remove search.racing"
    if "request_rate" in dims:
        return (f"{where} on vLLM: predicts loads at fixed concurrency; remove space.request_rate "
                "(sweep rates on a grid, or find each setting's sustained rate with `specsweep sustain`)")
    varied = [k for k, v in dims.items() if len(v) > 1 and k not in AXES]
    if varied:
        return (f"{where} on vLLM: space.{varied[0]} must hold one value (it searches method, "
                "num_speculative_tokens and concurrency)")
    if any(t != 0 for t in dims.get("temperature", [0])):
        return f"{where} on vLLM: space.temperature must be 0 (acceptance is measured greedy)"
    speed = [m for m in spec.objectives if m not in UNTIMED]
    if len(speed) != 1 or speed[0] not in SPEED or spec.objectives[speed[0]] != "max":
        return (f"{where} on vLLM: objectives: throughput_ratio (or throughput_tps): max, and "
                f"otherwise only metrics known without timing ({', '.join(UNTIMED)})")
    return None
