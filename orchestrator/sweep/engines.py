"""The engine axis of a sweep spec: `space.engine` (specsweep, vllm) and the dimensions a vLLM
trial sets (workloads.serving.config.ServingConfig: method, num_speculative_tokens,
concurrency; temperature and max_new_tokens as in specsweep), and what vLLM has no setting
for."""

from __future__ import annotations

from workloads.serving.config import ENGINES, METHODS

SERVING = ("engine", "method", "num_speculative_tokens", "concurrency")
# what specsweep's engine runs that vLLM has no setting for: dimension -> refused when
SPECSWEEP_ONLY = {"schedule": lambda v: v != "linear", "steps": lambda v: v != 1, "threshold": lambda v: True,
                  "rule": lambda v: v != "lossless", "leniency": lambda v: v != 0, "delta": lambda v: v != 0,
                  "unmask": lambda v: v != "ltr", "verify_order": lambda v: v != "ltr"}


def serving_error(dims: dict[str, list], racing: bool) -> str | None:
    """Why the space's vLLM dimensions cannot run, in one line, or None: known engines and
    methods, whole numbers, only with engine vllm, K listed with a speculative method, no
    racing with vllm; under vllm alone, none of specsweep's own settings (the first named)."""
    engines = dims.get("engine", ["specsweep"])
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        return f"spec: space.engine: {unknown[0]!r} is not an engine; known: {', '.join(ENGINES)}"
    serving = [key for key in SERVING[1:] if key in dims]
    if serving and "vllm" not in engines:
        return f"spec: space.{serving[0]}: a vLLM setting; add vllm to space.engine"
    methods = [m for m in dims.get("method", []) if m not in METHODS]
    if methods:
        return f"spec: space.method: {methods[0]!r} is not a vLLM method; known: {', '.join(METHODS)}"
    for key in ("num_speculative_tokens", "concurrency"):
        for value in dims.get(key, []):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                return f"spec: space.{key}: {value!r} is not a whole number >= 1"
    speculative = set(dims.get("method", ["none"])) - {"none"}
    if "vllm" in engines and speculative and "num_speculative_tokens" not in dims:
        return "spec: space.num_speculative_tokens: needed with a speculative method (e.g. [3, 7])"
    if "vllm" in engines and racing:
        return "spec: search.racing: races run in specsweep's engine only (space.engine)"
    asked = [(key, v) for key, refused in SPECSWEEP_ONLY.items() for v in dims.get(key, []) if refused(v)]
    if engines == ["vllm"] and asked:
        key, value = asked[0]
        return (f"spec: space.{key}: {value} has no vLLM setting (vLLM drafts in one pass and verifies "
                "losslessly, left to right); measure it under engine specsweep")
    return None
