"""specsweep's own decoding engine: DecodeConfig's space, `ar` controls, decoded in the worker."""

from __future__ import annotations

from orchestrator.engines.engine import Choose, Config, Engine, Pick
from workloads.decoding.config import DecodeConfig
from workloads.decoding.kinds import PairKind

# Settings chosen after the schedule, effort and rule (spec.space).
SAMPLING = (
    "unmask",
    "temperature",
    "top_k",
    "top_p",
    "draft_temperature",
    "draft_top_k",
    "draft_top_p",
    "max_new_tokens",
)
# rule -> the dimension holding its DecodeConfig.leniency (λ for linear and match, δ for cactus)
LENIENCY = {"linear": "leniency", "match": "leniency", "cactus": "delta"}


def effort(config: dict) -> str:
    """A config's drafting effort as the tables and plots show it: `τ=<threshold>` or `K=<steps>`."""
    if config.get("threshold") is not None:
        return f"τ={config['threshold']:g}"
    return f"K={config.get('steps') or 1}"


class SpecsweepEngine(Engine):
    name = "specsweep"
    title = "specsweep's engine"
    served = False
    controls = "ar"
    baseline = "ar"

    def choose(self, dims: dict[str, list], kind: PairKind, pick: Pick, choose: Choose) -> tuple[Config, int]:
        """Schedule and block (quadratic only, and B >= 2, on dual-mode pairs; `|<kind>` names
        when a list is cut), the effort kind (steps or threshold, when both are given; none for
        one-step drafts), K (only values <= B, under a per-B name), τ, rule, then λ or δ, the
        sampling settings (the unmasking policy not chosen for one-step drafts, which commit
        every slot at once: the first listed is kept), and last the batch size."""
        settings: dict = {}
        fits = {"schedule": kind.runs, "block": lambda b: b >= kind.min_block}
        for key, allowed in fits.items():
            if key in dims:
                values = [v for v in dims[key] if allowed(v)]
                label = key if values == dims[key] else f"{key}|{kind.name}"
                settings[key] = values[0] if len(values) == 1 else choose(label, values)
        block = settings.get("block", DecodeConfig.block)
        chosen = "steps" if "steps" in dims else "threshold" if "threshold" in dims else None
        if kind.one_step(settings.get("schedule", DecodeConfig.schedule)):
            chosen = None
        if "steps" in dims and "threshold" in dims:
            chosen = choose("effort", ["steps", "threshold"])
        if chosen == "steps":
            allowed = [k for k in dims["steps"] if k <= block]
            if allowed:
                label = "steps" if allowed == dims["steps"] else f"steps|B={block}"
                settings["steps"] = allowed[0] if len(allowed) == 1 else choose(label, allowed)
            else:
                settings["steps"] = block  # every listed K exceeds this B: one token per step
        elif chosen == "threshold":
            settings["threshold"] = pick("threshold")
        if "rule" in dims:
            settings["rule"] = pick("rule")
        rule = settings.get("rule", DecodeConfig.rule)
        if LENIENCY.get(rule) in dims:
            settings["leniency"] = pick(LENIENCY[rule])
        single = "threshold" not in settings and settings.get("steps", 1) == 1
        for key in SAMPLING:
            if key == "unmask" and single and key in dims:
                settings[key] = dims[key][0]  # one step commits every slot: the order changes nothing
            elif key in dims:
                settings[key] = pick(key)
        return DecodeConfig(**settings), pick("batch_size") if "batch_size" in dims else 1

    def control(self, config: Config, ar: DecodeConfig | None) -> Config | None:
        return ar

    def measure(self, worker, shard, items: list) -> dict:
        return worker.decode(shard, items)

    def columns(self, config: dict) -> dict:
        return {"schedule": config["schedule"], "block": config["block"], "effort": effort(config),
                "rule": config["rule"], "leniency": config["leniency"]}

    def label(self, config: dict) -> str:
        """`linear B8 K=1 λ0.5` (no rule where it is lossless), or `ar`."""
        if config["schedule"] == "ar":
            return "ar"
        shown = {"lossless": "", "linear": " λ{:g}", "cactus": " δ{:g}", "match": " match λ{:g}"}
        rule = shown[config["rule"]]
        return f"{config['schedule']} B{config['block']} {effort(config)}{rule.format(config['leniency'])}"

    def drift_key(self, pair: str) -> str:
        return pair
