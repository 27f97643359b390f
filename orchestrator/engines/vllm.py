"""vLLM served as a real server: ServingConfig's space (method, num_speculative_tokens,
concurrency), its own load without speculation as the control, served by the worker.

vLLM verifies losslessly and drafts one pass per verification, so specsweep's own settings
other than those defaults have no vLLM setting and are refused when vLLM is the only engine.
"""

from __future__ import annotations

import json

from orchestrator.engines.engine import Choose, Config, Engine, Pick
from workloads.decoding.config import DecodeConfig
from workloads.decoding.kinds import PairKind
from workloads.serving.config import METHODS, RUNTIME_DRAFT, ServingConfig, ServingError
from workloads.serving.venv import cpu_build, vllm_python

# what specsweep's engine runs that vLLM has no setting for: dimension -> refused when
SPECSWEEP_ONLY = {"schedule": lambda v: v != "linear", "steps": lambda v: v != 1, "threshold": lambda v: True,
                  "rule": lambda v: v != "lossless", "leniency": lambda v: v != 0, "delta": lambda v: v != 0,
                  "unmask": lambda v: v != "ltr", "verify_order": lambda v: v != "ltr"}



def unserved(config: dict) -> list[str]:
    """What of a stored specsweep `config` vLLM has no setting for (SPECSWEEP_ONLY, the one rule
    for the space and for exports), as `name value`; a lenient rule with its leniency."""
    out = []
    for key, refused in SPECSWEEP_ONLY.items():
        value = config.get(key)
        if value is None or not refused(value) or (key == "leniency" and config.get("rule") != "lossless"):
            continue  # unset, servable, or named with its rule
        out.append(f"rule {value} (leniency {config.get('leniency')})" if key == "rule" else f"{key} {value}")
    return out


DSPARK_SETTINGS = ("dspark_draft_topk", "enable_adaptive_verification")
DSPARK = {"method": "dspark", "num_speculative_tokens": 1}  # the smallest DSpark config


class VllmEngine(Engine):
    name = "vllm"
    title = "vLLM"
    served = True
    settings = ("method", "num_speculative_tokens", "concurrency", "request_rate", "burstiness",
                "dspark_draft_topk", "enable_adaptive_verification")
    controls = "vLLM without speculation"
    section = "vllm"

    def own_setting(self, config: dict, drafter: str | None) -> dict | None:
        return {"speculative_config": ServingConfig.from_dict(config).speculative_config(drafter)}

    def prepare(self, dims: dict[str, list]) -> None:
        """vLLM set up (`make vllm`), and able to serve what the space lists: the CPU build
        refuses DSpark's adaptive verification at start, so it is refused here, before a start."""
        vllm_python()
        if True in dims.get("enable_adaptive_verification", []) and cpu_build():
            raise ServingError("spec: space.enable_adaptive_verification: true is refused by vLLM's CPU "
                               "build (its V1 model runner has no adaptive verification); list false, or "
                               "run on a GPU machine")

    def space_error(self, dims: dict[str, list], racing: bool, alone: bool) -> str | None:
        """Known methods, whole numbers, rates and burstiness > 0, num_speculative_tokens listed
        with a speculative method, no racing; alone, none of specsweep's own settings (the first named)."""
        methods = [m for m in dims.get("method", []) if m not in METHODS]
        if methods:
            return f"spec: space.method: {methods[0]!r} is not a vLLM method; known: {', '.join(METHODS)}"
        for key in ("num_speculative_tokens", "concurrency"):
            for value in dims.get(key, []):
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    return f"spec: space.{key}: {value!r} is not a whole number >= 1"
        for key in ("request_rate", "burstiness", *DSPARK_SETTINGS):
            for value in dims.get(key, []):
                try:  # DSpark's settings are checked on a DSpark config: they belong to no other
                    ServingConfig(**{key: value, **(DSPARK if key in DSPARK_SETTINGS else {})})
                except ServingError as err:
                    return f"spec: space.{err}"
        listed = [key for key in DSPARK_SETTINGS if key in dims]
        if listed and "dspark" not in dims.get("method", []):
            return (f"spec: space.{listed[0]}: a setting of method dspark, which space.method does not list "
                    "(it would be dropped from every trial)")
        if "burstiness" in dims and "request_rate" not in dims:
            return "spec: space.burstiness: shapes the arrivals of space.request_rate; list a rate too"
        speculative = set(dims.get("method", ["none"])) - {"none"}
        if speculative and "num_speculative_tokens" not in dims:
            return "spec: space.num_speculative_tokens: needed with a speculative method (e.g. [3, 7])"
        if racing:
            return "spec: search.racing: races run in specsweep's engine only (space.engine)"
        asked = [(key, v) for key, refused in SPECSWEEP_ONLY.items() for v in dims.get(key, []) if refused(v)]
        if alone and asked:
            key, value = asked[0]
            return (f"spec: space.{key}: {value} has no vLLM setting (vLLM drafts in one pass and verifies "
                    "losslessly, left to right); measure it under engine specsweep")
        return None

    def pairs_error(self, dims: dict[str, list], kinds: dict[str, PairKind]) -> str | None:
        """The first listed method no pair's kind is served with, or None."""
        for method in dims.get("method", []):
            if not any(method in kind.serving_methods for kind in kinds.values()):
                served = "; ".join(f"{name} serves {', '.join(kind.serving_methods)}"
                                   for name, kind in kinds.items())
                return f"spec: space.method: no pair of this sweep can be served with {method} ({served})"
        return None

    def choose(self, dims: dict[str, list], kind: PairKind, pick: Pick, choose: Choose) -> tuple[Config, int]:
        """The method (those the pair's kind can be served with; `method|<kind>` when the list
        is cut), its drafts per verification, the concurrency (the candidate's batch size),
        then the request rate, burstiness, temperature and max_new_tokens."""
        listed = dims.get("method", ["none"])
        methods = [m for m in listed if m in kind.serving_methods] or ["none"]
        label = "method" if methods == listed else f"method|{kind.name}"
        settings: dict = {"method": methods[0] if len(methods) == 1 else choose(label, methods)}
        if settings["method"] != "none":
            settings["num_speculative_tokens"] = pick("num_speculative_tokens")
        settings["concurrency"] = pick("concurrency") if "concurrency" in dims else 1
        for key in ("request_rate", "burstiness", "temperature", "max_new_tokens"):
            if key in dims:
                settings[key] = pick(key)
        for key in DSPARK_SETTINGS:  # DSpark's own
            if key in dims and settings["method"] == "dspark":
                settings[key] = pick(key)
        return ServingConfig(**settings), settings["concurrency"]

    def start_key(self, pair: str, config: Config) -> object | None:
        """The pair and the speculative settings its server starts with, but the draft length
        of a method whose resident server drafts it at run time (RUNTIME_DRAFT)."""
        settings = config.speculative_config(pair) or {}  # the pair stands for its drafter
        if config.method in RUNTIME_DRAFT:
            settings.pop("num_speculative_tokens")
        return pair, json.dumps(settings, sort_keys=True)

    def control(self, config: Config, ar: DecodeConfig | None) -> Config | None:
        return config.unspeculative()

    def repeats(self, asked: int) -> int:
        return asked

    def draft_ceiling(self, dims: dict[str, list]) -> int | None:
        return max(dims.get("num_speculative_tokens") or [0]) or None

    def measurer(self, worker):
        from orchestrator.engines.serverpool import Serving

        return Serving(worker)

    def columns(self, config: dict) -> dict:
        """`vllm <method>`, no block, `n=<num_speculative_tokens>` (its drafts per
        verification; '-' without speculation), lossless."""
        drafts = config["num_speculative_tokens"]
        return {"schedule": f"vllm {config['method']}", "block": "-",
                "effort": f"n={drafts}" if drafts else "-", "rule": "lossless", "leniency": 0}

    def label(self, config: dict) -> str:
        """Its method and num_speculative_tokens, and DSpark's settings where set: `dflash n=3`,
        `dspark n=7 topk=4 adaptive`."""
        drafts = config["num_speculative_tokens"]
        extra = (f" topk={config['dspark_draft_topk']}" if config.get("dspark_draft_topk") else "") + (
            " adaptive" if config.get("enable_adaptive_verification") else "")
        return config["method"] + (f" n={drafts}" if drafts else "") + extra
