"""What a spec must hold for the multi-fidelity search on vLLM (sweep/servingfidelity.py): it
measures acceptance greedy, once per setting, and maximises one speed objective at each
concurrency. Checked by sweep.spec, which turns the message into its one-line error."""

from __future__ import annotations

from orchestrator.analysis.metrics import UNTIMED
from orchestrator.engines import listed

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
