"""The joint decoding space of a sweep as one conditional decision procedure.

`choose_config(spec, choose)` walks the dimensions in a fixed order and asks `choose(name,
values)` for each one that applies: the pair (when several), the engine (when several; under
vllm: the method, its drafts per verification and the concurrency, `_served`), schedule and block (quadratic
only, and B >= 2, on dual-mode pairs; `|self` / `|two-model` names when a list is cut), the
effort kind (steps or threshold, when both are given; none for packed/quadratic on dual-mode
pairs, which draft inside the verify call in one step), K (only values <= B, under a per-B
name), τ, rule, then λ (`leniency`, rules linear and match) or δ (`delta`, rule cactus),
then the sampling settings and the unmasking policy (not chosen for one-step drafts, which
commit every slot at once: the first listed policy is kept), and last the batch size.
Optuna trials answer through suggest_categorical; the grid enumerates every path of the
same procedure, so both see the same space.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.sweep.spec import LENIENCY, SAMPLING, SweepSpec
from workloads.decoding.config import DecodeConfig
from workloads.decoding.kinds import PairKind
from workloads.serving.config import ServingConfig

Choose = Callable[[str, list], object]


@dataclass(frozen=True)
class Candidate:
    pair: str
    config: DecodeConfig | ServingConfig  # seed is set per prompt by the worker
    batch_size: int = 1  # prompts decoded together


def batch_sizes(spec: SweepSpec) -> list[int]:
    """The batch sizes a sweep measures (baselines run once for each)."""
    return list(spec.dimension_values().get("batch_size", [1]))


def choose_config(spec: SweepSpec, choose: Choose) -> Candidate:
    dims = spec.dimension_values()

    def pick(name: str, key: str | None = None):
        values = dims[key or name]
        return values[0] if len(values) == 1 else choose(name, values)

    names = [p.name for p in spec.pairs]
    pair = names[0] if len(names) == 1 else choose("pair", names)
    kind = spec.pair_kinds[pair]
    engines = dims.get("engine", ["specsweep"])
    if (engines[0] if len(engines) == 1 else choose("engine", engines)) == "vllm":
        return _served(dims, pair, kind, pick, choose)
    settings: dict = {}
    fits = {"schedule": kind.runs, "block": lambda b: b >= kind.min_block}
    for key, allowed in fits.items():
        if key in dims:
            values = [v for v in dims[key] if allowed(v)]
            label = key if values == dims[key] else f"{key}|{kind.name}"
            settings[key] = values[0] if len(values) == 1 else choose(label, values)
    block = settings.get("block", DecodeConfig.block)
    effort = "steps" if "steps" in dims else "threshold" if "threshold" in dims else None
    if kind.one_step(settings.get("schedule", DecodeConfig.schedule)):
        effort = None
    if "steps" in dims and "threshold" in dims:
        effort = choose("effort", ["steps", "threshold"])
    if effort == "steps":
        allowed = [k for k in dims["steps"] if k <= block]
        if allowed:
            label = "steps" if allowed == dims["steps"] else f"steps|B={block}"
            settings["steps"] = allowed[0] if len(allowed) == 1 else choose(label, allowed)
        else:
            settings["steps"] = block  # every listed K exceeds this B: one token per step
    elif effort == "threshold":
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
    return Candidate(pair, DecodeConfig(**settings), pick("batch_size") if "batch_size" in dims else 1)


def _served(dims: dict, pair: str, kind: PairKind, pick, choose: Choose) -> Candidate:
    """The vLLM branch: the method (those the pair's kind can be served with; `method|<kind>`
    when the list is cut), its drafts per verification, the concurrency (the candidate's
    batch size), then temperature and max_new_tokens."""
    listed = dims.get("method", ["none"])
    methods = [m for m in listed if m in kind.serving_methods] or ["none"]
    label = "method" if methods == listed else f"method|{kind.name}"
    settings: dict = {"method": methods[0] if len(methods) == 1 else choose(label, methods)}
    if settings["method"] != "none":
        settings["num_speculative_tokens"] = pick("num_speculative_tokens")
    settings["concurrency"] = pick("concurrency") if "concurrency" in dims else 1
    for key in ("temperature", "max_new_tokens"):
        if key in dims:
            settings[key] = pick(key)
    return Candidate(pair, ServingConfig(**settings), settings["concurrency"])


def config_of(spec: SweepSpec, params: dict) -> DecodeConfig:
    """The decode config a trial with these params runs."""
    return candidate_of(spec, params).config


def candidate_of(spec: SweepSpec, params: dict) -> Candidate:
    """The candidate (pair, config, batch size) a trial with these params runs."""
    return choose_config(spec, lambda name, values: params[name])


def modelled(spec: SweepSpec, params: dict) -> tuple[dict, DecodeConfig, int]:
    """(params, config, draft width W) of a trial, as the throughput model reads it."""
    candidate = candidate_of(spec, params)
    return params, candidate.config, spec.pair_kinds[candidate.pair].draft_width(candidate.config.block)


def params_key(params: dict) -> tuple:
    """A hashable identity of a point of the space (its params)."""
    return tuple(sorted(params.items()))


def grid(spec: SweepSpec) -> list[dict]:
    """Every path through choose_config: the params (name -> value) of each grid point."""
    points, stack = [], [[]]
    while stack:
        prefix = stack.pop()
        made: list = []

        def choose(name, values, prefix=prefix, made=made):
            if len(made) < len(prefix):
                value = prefix[len(made)]
            else:
                value = values[0]
                for alt in reversed(values[1:]):
                    stack.append([v for _, v in made] + [alt])
            made.append((name, value))
            return value

        choose_config(spec, choose)
        points.append(dict(made))
    return points


def baseline_config(spec: SweepSpec, kind: str) -> DecodeConfig:
    """`ar` (verifier alone) or `diffusion` (drafter alone, one token per step) with the
    sweep's first sampling settings and output budget."""
    dims = spec.dimension_values()
    first = {k: dims[k][0] for k in ("temperature", "top_k", "top_p", "max_new_tokens") if k in dims}
    if kind == "ar":
        return DecodeConfig(schedule="ar", **first)
    block = dims.get("block", [DecodeConfig.block])[0]
    return DecodeConfig(schedule="diffusion", block=block, steps=block, **first)
