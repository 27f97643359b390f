"""The joint decoding space of a sweep as one conditional decision procedure.

`choose_config(spec, choose)` walks the dimensions in a fixed order and asks `choose(name,
values)` for each one that applies: the pair (when several), the engine (when several), then
the engine's own dimensions (`Engine.choose`: under specsweep schedule and block, the effort
kind, K or τ, rule, λ or δ, the sampling settings and the batch size; under vllm the method,
its drafts per verification and the concurrency), names cut to what the pair's kind runs
(`|<kind>`) where a list is cut.
Optuna trials answer through suggest_categorical; the grid enumerates every path of the
same procedure, so both see the same space.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from orchestrator.engines import ENGINES, SPECSWEEP, engine_of, listed
from orchestrator.engines.engine import Choose
from orchestrator.spec.sweep import SweepSpec
from workloads.decoding.config import DecodeConfig
from workloads.serving.config import ServingConfig


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
    engine = ENGINES[pick("engine")] if "engine" in dims else SPECSWEEP
    config, size = engine.choose(dims, spec.pair_kinds[pair], pick, choose)
    return Candidate(pair, config, size)


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
    """Every path through choose_config: the params (name -> value) of each grid point, the
    points that start the same thing (Engine.start_key: a vLLM server) brought together where
    the first of them is, so that a grid run in this order starts each once."""
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
    return in_start_order(spec, points)


def together_key(spec: SweepSpec, params: dict) -> tuple | None:
    """A grid point's trial's key for the trials it is timed with (shard.measured_together, as
    Shard.together holds it for its shards): its server start (Engine.start_key), None where its
    control's own server serves it, and its pair and control; None where it starts nothing."""
    candidate = candidate_of(spec, params)
    engine = engine_of(candidate.config)
    start = engine.start_key(candidate.pair, candidate.config)
    if start is None:
        return None
    control = engine.control(candidate.config, None)
    return (None if control == candidate.config else start,
            (candidate.pair, json.dumps(control.to_dict(), sort_keys=True)))


def in_start_order(spec: SweepSpec, points: list[dict]) -> list[dict]:
    """`points` stably ordered by where the first point of their start (Engine.start_key) is,
    then, within a start, by where the first point with their control is, so the trials timed
    together come one after another (`together_key`); a point its control's own server serves
    goes with the first start's points of its control; a point that starts nothing of its own
    stays where it is."""
    if not any(engine.served for engine in listed(spec.dimension_values())):
        return points
    keys = [together_key(spec, params) for params in points]
    starts: dict = {}  # start -> where its first point is
    groups: dict = {}  # (start, pair and control) -> where its first point is
    joins: dict = {}  # pair and control -> the key of the first start's points of it
    for at, key in enumerate(keys):
        if key is not None and key[0] is not None:
            starts.setdefault(key[0], at)
            groups.setdefault(key, at)
            joins.setdefault(key[1], key)
    places = []
    for at, key in enumerate(keys):
        if key is not None and key[0] is None:  # served by its control's server: with a start's
            key = joins.get(key[1], key)
        places.append((at, at) if key is None or key[0] is None else (starts[key[0]], groups[key]))
    return [points[at] for _, at in sorted(zip(places, range(len(points))))]


def baseline_config(spec: SweepSpec, kind: str) -> DecodeConfig:
    """`ar` (verifier alone) or `diffusion` (drafter alone, one token per step) with the
    sweep's first sampling settings and output budget."""
    dims = spec.dimension_values()
    first = {k: dims[k][0] for k in ("temperature", "top_k", "top_p", "max_new_tokens") if k in dims}
    if kind == "ar":
        return DecodeConfig(schedule="ar", **first)
    block = dims.get("block", [DecodeConfig.block])[0]
    return DecodeConfig(schedule="diffusion", block=block, steps=block, **first)
