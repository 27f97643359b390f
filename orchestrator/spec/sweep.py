"""SweepSpec: the YAML a user launches, validated before anything runs.

Every error is one line naming the offending key (`spec: space.leniency: ...`).
"""

from __future__ import annotations

import math
import re
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.analysis.metrics import (
    FRACTIONS,
    SERVING_METRICS,
    TRIAL_METRICS,
    unmeetable,
    unsummed,
)
from orchestrator.analysis.outcome import CONSTRAINT, constraint_terms
from orchestrator.engines import DIMENSIONS as ENGINE_DIMENSIONS
from orchestrator.engines import listed, space_error
from orchestrator.engines.specsweep import LENIENCY, SAMPLING
from orchestrator.errors import count_text, did_you_mean, misplaced, shorten
from orchestrator.spec.serving import ServingSpec, serving_metrics_error, serving_search_error
from workloads.decoding.config import MAX_SEED, ConfigError, DecodeConfig
from workloads.decoding.kinds import PairKind
from workloads.models.families import pair_kind
from workloads.models.pairspec import PairError
from workloads.tasks import TASKS

# Dimensions of the joint space: DecodeConfig fields, plus δ (`delta`), which is the
# leniency under rule cactus while `leniency` is λ under linear and match (LENIENCY).
# batch_size: prompts decoded together; not a DecodeConfig field (space.Candidate holds it).
# engine and each engine's own settings: orchestrator.engines.
DIMENSIONS = ("schedule", "block", "steps", "threshold", "rule", "leniency", "delta", *SAMPLING, "batch_size",
              *ENGINE_DIMENSIONS)
METRICS = (*TRIAL_METRICS, *SERVING_METRICS)  # what objectives and constraints may name

# What a spec may expand to, checked before anything is built; real sweeps stay far below
# (the shipped ones: 17 values a dimension, 2,040 configurations at most); the file's own
# bounds are in orchestrator/documents.py.
MAX_VALUES = 10_000  # values of one dimension: a list, or a range's (high - low) / step + 1
MAX_GRID = 100_000  # configurations of the space: the product of the dimension sizes (and pairs)


class SpecError(ValueError):
    """An invalid sweep spec; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PairSpec(_Strict):
    name: str
    drafter: str | None = None
    verifier: str | None = None
    model: str | None = None
    profile: dict[str, Any] | None = None
    # Loading options for every model of the pair (workloads/models/pair.py).
    dtype: Literal["bfloat16", "float16", "float32"] | None = None
    device: str | None = None  # cuda in a GPU worker means that worker's GPU
    attn_implementation: str | None = None
    trust_remote_code: bool = False
    runtime_env: dict[str, Any] | None = None  # Ray runtime_env of this pair's workers (placement: split)

    def load_spec(self) -> str | dict:
        """What `load_pair` takes: the bundled name, or the mapping of paths / hub ids."""
        refs = {
            k: v
            for k, v in (("drafter", self.drafter), ("verifier", self.verifier), ("model", self.model))
            if v is not None
        }
        if not refs:
            return self.name
        options = {k: getattr(self, k) for k in ("profile", "dtype", "device", "attn_implementation")
                   if getattr(self, k) is not None}
        if self.trust_remote_code:
            options["trust_remote_code"] = True
        return {"name": self.name, **refs, **options}


class TaskSpec(_Strict):
    name: str
    limit: int | None = Field(None, ge=1, le=1_000_000)  # arith generates its prompts: bound them
    seed: int = Field(0, ge=0, le=MAX_SEED)
    data: str | None = None
    chat: bool = False  # wrap prompts in each pair's chat template
    system: str | None = None  # system prompt (needs chat)
    shots: int = Field(0, ge=0)  # solved examples before each question

    @model_validator(mode="after")
    def _system_needs_chat(self):
        if self.system is not None and not self.chat:
            raise ValueError("system: a system prompt needs chat: true")
        return self


class RangeSpec(_Strict):
    low: float = Field(allow_inf_nan=False)
    high: float = Field(allow_inf_nan=False)
    step: float = Field(gt=0, allow_inf_nan=False)

    def steps(self) -> float:
        """(high − low) / step, the count of values less one, computed without overflow (inf
        when it exceeds a float, e.g. a step of 1e-320 across a wide range)."""
        width = self.high - self.low
        if math.isfinite(width):
            return width / self.step
        return self.high / self.step - self.low / self.step  # the width overflowed: divide first

    def values(self) -> list[float | int]:
        ints = all(float(v).is_integer() for v in (self.low, self.high, self.step))
        count = int(round(self.steps())) + 1
        out = [self.low + i * self.step for i in range(count) if self.low + i * self.step <= self.high + 1e-9]
        return [int(round(v)) for v in out] if ints else [round(v, 10) for v in out]


class RacingSpec(_Strict):
    """Race candidates on growing prompt sets (orchestrator/search/racing.py)."""

    start: int = Field(16, ge=1)  # prompts of the first rung
    factor: float = Field(2.0, gt=1.0, allow_inf_nan=False)  # growth of the prompt set per rung
    alpha: float = Field(0.01, gt=0.0, lt=0.5)  # error rate of one comparison


class FidelitySpec(_Strict):
    """The multi-fidelity search's settings: in specsweep's engine its calibration
    (orchestrator/search/fidelity.py), on vLLM when to time (orchestrator/search/servingsearch.py)."""

    calibration: int = Field(5, ge=2)  # configurations per pair timed to fit its cost model
    calibration_prompts: int = Field(8, ge=2)  # prompts each of them is timed on
    tolerance: float = Field(0.05, ge=0.0, lt=1.0)  # vLLM: time only what could beat the pick by more
    error: float = Field(0.15, ge=0.0, lt=1.0)  # vLLM: the error credited to a timing and a cost line


class SearchSpec(_Strict):
    sampler: Literal["grid", "random", "tpe", "nsga2", "gp", "multifidelity"] = "tpe"
    trials: int = Field(20, ge=1)
    parallel: int = Field(2, ge=1)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    storage: str | None = None  # Optuna RDB URL (postgresql://...) on a cluster; default: local journal
    guide: str | None = None  # calibration JSON (`model calibrate`): enqueue the predicted frontier first
    racing: RacingSpec | None = None  # stop candidates early once dominated (None: every prompt)
    fidelity: FidelitySpec | None = None  # sampler multifidelity: its calibration (None: the defaults)

    @property
    def whole_grid(self) -> bool:
        """Whether the search decides every grid point (the multi-fidelity search: timed,
        stopped by racing, or only profiled), rather than `trials` of them."""
        return self.sampler == "multifidelity"

    def race(self) -> RacingSpec | None:
        """The racing a sweep runs: its own, or the multi-fidelity search's (which always
        races: from 8 prompts, where the rule can first stop a candidate at α = 0.01)."""
        if self.whole_grid:
            return self.racing or RacingSpec(start=8)
        return self.racing


class TrackingSpec(_Strict):
    uri: str | None = None  # default: sqlite store in the sweep directory
    experiment: str | None = None  # default: the sweep name


class ClusterSpec(_Strict):
    address: str = "local"
    # Worker slots (actors). "auto": every slot of the cluster, i.e. all GPUs (or all units of a
    # custom resource), or cpu_slots_per_node on every node for cpu.
    slots: int | Literal["auto"] = 2
    resource: str = "cpu"  # cpu | gpu | a custom Ray resource name (simulated GPU slots)
    cpu_slots_per_node: int = Field(1, ge=1)
    placement: Literal["shared", "split"] = "shared"  # every worker serves every pair, or pairs split

    @field_validator("slots")
    @classmethod
    def _positive(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError("must be >= 1 or 'auto'")
        return v


class SweepSpec(_Strict):
    name: str
    pairs: list[PairSpec] = Field(min_length=1)
    task: TaskSpec
    space: dict[str, Any]
    objectives: dict[str, Literal["max", "min"]]
    constraints: list[str] = []
    search: SearchSpec = SearchSpec()
    baselines: list[Literal["ar", "diffusion"]] = ["ar"]
    tracking: TrackingSpec = TrackingSpec()
    cluster: ClusterSpec = ClusterSpec()
    serving: ServingSpec = ServingSpec()

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", v):
            raise ValueError("letters, digits, '.', '_' or '-' (at most 64), e.g. my-sweep")
        return v

    @field_validator("pairs", mode="before")
    @classmethod
    def _names(cls, v):
        return [{"name": p} if isinstance(p, str) else p for p in v] if isinstance(v, list) else v

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, v: dict) -> dict:
        if not 2 <= len(v) <= 3:
            raise ValueError(f"give 2 or 3 objectives; got {len(v)}")
        for name in v:
            if name not in METRICS:
                raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
        return v

    @field_validator("constraints")
    @classmethod
    def _constraints(cls, v: list[str]) -> list[str]:
        for c in v:
            m = CONSTRAINT.match(c)
            if not m or m.group(1) not in METRICS:
                raise ValueError(
                    f"{c!r}: expected '<metric> >= <number>' or '<=' with a metric of "
                    f"{', '.join(METRICS)}"
                )
            if not math.isfinite(float(m.group(3))):
                raise ValueError(f"{c!r}: {m.group(3)} is not a finite number")
            if unmeetable(m.group(1), m.group(2), float(m.group(3))):
                within = "[0, 1]" if m.group(1) in FRACTIONS else ">= 0"
                raise ValueError(f"{c!r}: no trial can meet it ({m.group(1)} is {within})")
        return v

    @model_validator(mode="after")
    def _pairs_unique(self):
        names = [p.name for p in self.pairs]
        if len(set(names)) != len(names):
            raise ValueError("pairs: pair names must be unique")
        if any(p.runtime_env for p in self.pairs) and self.cluster.placement != "split":
            raise ValueError("pairs: runtime_env needs cluster.placement: split (one pair per worker)")
        return self

    def dimension_values(self) -> dict[str, list]:
        return {k: _values(k, v) for k, v in self.space.items()}

    @cached_property
    def pair_kinds(self) -> dict[str, PairKind]:
        """Pair name -> kind, checked once per spec (it reads each local model's files)."""
        return {p.name: pair_kind(p.load_spec()) for p in self.pairs}


def _values(key: str, raw: Any) -> list:
    if isinstance(raw, dict):
        try:
            rng = RangeSpec(**raw)
        except ValidationError as err:
            raise SpecError(f"spec: space.{key}: a range needs finite low, high, step>0 "
                            f"({_first(err)})") from None
        if rng.high < rng.low:
            raise SpecError(f"spec: space.{key}: range high < low")
        if not rng.steps() + 1 <= MAX_VALUES:  # counted before any value is made
            raise SpecError(f"spec: space.{key}: the range holds {count_text(rng.steps() + 1)} values "
                            f"((high - low) / step + 1); at most {MAX_VALUES:,} a dimension: widen the step")
        return rng.values()
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise SpecError(f"spec: space.{key}: empty list")
    if len(values) > MAX_VALUES:
        raise SpecError(f"spec: space.{key}: {len(values):,} values; at most {MAX_VALUES:,} a dimension")
    return values


def _check_size(spec: SweepSpec, dims: dict[str, list]) -> None:
    """Refuse a space of more than MAX_GRID configurations, counted as the product of the
    dimension sizes (and the pairs) before any is enumerated: the grid sampler, a guided start
    and the replacement of a duplicate trial all enumerate it."""
    size = len(spec.pairs)
    for values in dims.values():
        size *= len(values)
    if size > MAX_GRID:
        sizes = " x ".join([f"{len(spec.pairs)} pairs"] * (len(spec.pairs) > 1)
                           + [f"{len(v)} {k}" for k, v in dims.items() if len(v) > 1])
        raise SpecError(f"spec: space: {size:,} configurations ({sizes}); at most {MAX_GRID:,}: "
                        "list fewer values")


def _check_space(spec: SweepSpec) -> None:
    if not spec.space:
        raise SpecError("spec: space: empty; give at least one dimension (e.g. schedule: [linear, packed])")
    for key in spec.space:
        if key not in DIMENSIONS:
            raise SpecError(f"spec: space.{key}: unknown dimension{did_you_mean(key, DIMENSIONS)}; known: "
                            f"{', '.join(DIMENSIONS)}")
    dims = spec.dimension_values()
    _check_size(spec, dims)
    blocks = dims.get("block", [DecodeConfig.block])
    for value in dims.get("batch_size", []):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"spec: space.batch_size: {value!r} is not a whole number >= 1")
    served_search = spec.search.whole_grid and any(e.served for e in listed(dims))
    if served_search:
        why = serving_search_error(spec, dims)  # it times whole trials: no racing
        if why:
            raise SpecError(why)
    why = space_error(dims, spec.search.race() is not None and not served_search)
    if why:
        raise SpecError(why)
    for key, values in dims.items():
        if key == "batch_size" or key in ENGINE_DIMENSIONS:
            continue
        for value in values:
            base: dict[str, Any] = {
                "block": max(b for b in blocks if isinstance(b, int))
                if key == "steps"
                else DecodeConfig.block
            }
            field = key
            if key in LENIENCY.values():
                base["rule"] = next(rule for rule, dim in LENIENCY.items() if dim == key)
                field = "leniency"
            try:
                DecodeConfig(**{**base, field: value})
            except ConfigError as err:
                raise SpecError(shorten(f"spec: space.{key}: {err}")) from None
            except TypeError:
                raise SpecError(shorten(f"spec: space.{key}: bad value {value!r}")) from None
    if spec.search.race() is not None and not served_search:
        where = "search.racing" if spec.search.racing else "search.sampler: multifidelity"
        why = unsummed(spec.objectives)
        if why:
            raise SpecError(f"spec: {where}: {why}")
        if any(b != 1 for b in dims.get("batch_size", [1])):
            raise SpecError(f"spec: {where}: races at batch size 1 only (space.batch_size)")
    named = [*spec.objectives, *(m for m, _, _ in constraint_terms(spec.constraints))]
    why = serving_metrics_error(spec, dims, named)
    if why:
        raise SpecError(why)
    if spec.search.fidelity is not None and not spec.search.whole_grid:
        raise SpecError("spec: search.fidelity: applies to sampler multifidelity only")
    kinds = list(spec.pair_kinds.values())
    for schedule in dims.get("schedule", []):
        if not any(kind.runs(schedule) for kind in kinds):
            raise SpecError(f"spec: space.{kinds[0].refusal(schedule)}")
    for engine in listed(dims):
        why = engine.pairs_error(dims, spec.pair_kinds)
        if why:
            raise SpecError(why)
    if "ar" in dims.get("schedule", []) or "diffusion" in dims.get("schedule", []):
        raise SpecError("spec: space.schedule: ar and diffusion are baselines; list them under baselines")


def _first(err: ValidationError) -> str:
    e = err.errors()[0]
    where = ".".join(str(p) for p in e["loc"])
    hint = misplaced(str(e["loc"][-1]), where, SweepSpec) if e["type"] == "extra_forbidden" else ""
    return (f"{where}: {e['msg'].removeprefix('Value error, ')}" if where else e["msg"]) + hint


def parse_spec(data: Any, source: str = "spec") -> SweepSpec:
    if not isinstance(data, dict):
        raise SpecError(f"spec: {source} must hold a mapping (name, pairs, task, space, objectives, ...)")
    try:
        spec = SweepSpec(**data)
    except ValidationError as err:
        raise SpecError(f"spec: {_first(err)}") from None
    if spec.task.name not in TASKS:
        raise SpecError(
            f"spec: task.name: unknown task {spec.task.name!r}; known: {', '.join(sorted(TASKS))}"
        )
    if spec.search.guide is not None and not Path(spec.search.guide).expanduser().is_file():
        raise SpecError(f"spec: search.guide: no calibration file {spec.search.guide}")
    if spec.task.data is not None and not Path(spec.task.data).expanduser().exists():
        raise SpecError(f"spec: task.data: {spec.task.data} does not exist")
    try:
        spec.pair_kinds  # noqa: B018 (checks every pair's files)
    except PairError as err:
        raise SpecError(f"spec: pairs: {err}") from None
    _check_space(spec)
    return spec


def check_runnable(spec: SweepSpec, local: bool) -> None:
    """What a valid spec still needs before it runs: a prompt count for the generated task,
    and (on a local Ray head) a slot count that does not depend on the cluster."""
    if spec.task.name == "arith" and spec.task.limit is None:
        raise SpecError("spec: task.limit: arith generates its prompts; say how many (e.g. 40)")
    c = spec.cluster
    if local and c.slots == "auto" and c.resource not in ("cpu", "gpu"):
        raise SpecError(f"spec: cluster.slots: auto needs a cluster that declares {c.resource!r}; "
                        "give a number of slots for a local run")
