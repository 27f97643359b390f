"""The multi-fidelity search: every candidate measured cheaply, only those that can still
reach the frontier timed.

Work comes in steps (`MultiFidelity.step`: requests the caller runs, in any order, and
`tell`s back before asking again), all on prefixes of the race order
(`search.racing.race_order`), rung by rung (`search.racing.rungs`):

1. profile: every candidate still in the race decoded untimed, its new prompts in one batch,
   up to the next rung: tokens, accuracy and the work of each prompt (`search.costmodel`);
2. after the first rung, calibration: per pair, `calibration` configurations whose work per
   token spans the others' (`fidelity.spread`) timed at batch size 1 on the first
   `calibration_prompts` prompts; the pair's cost model is fitted on them, and refitted on
   every prompt timed later;
3. before every step, the race: the racing rule (`search.racing.stop`, its error rate α
   per comparison) on each candidate's records with the times not measured yet predicted
   as fast as the model's error E allows, against rivals' predicted as slow as it allows
   (measured times stay as measured); a candidate it stops leaves, and so does one that is
   infeasible with confidence;
4. once every profile is complete, timing: the candidates left, the most promising on the
   first objective first, timed at batch size 1 rung by rung, racing on what was measured,
   until every one left is timed on every prompt. The frontier is theirs, all measured.

A candidate the race stops was dominated with confidence provided the model's error on it
and on its rival is within E (the largest leave-one-configuration-out error of the fit,
`fidelity.fit`); `bench search` reports how the predictions compared with measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.analysis.outcome import constraint_terms
from orchestrator.search.costmodel import CostModel, fit, spread
from orchestrator.search.race import law, same_law
from orchestrator.search.racing import Racing, infeasible, rungs, stop, value
from orchestrator.search.samplers import mark_interrupted, tried_keys
from orchestrator.search.strategy import Decision, Measured, Request, Sweep
from orchestrator.spec.space import candidate_of, grid, params_key
from orchestrator.spec.sweep import FidelitySpec

PHASES = ("profile", "calibration", "timing")


@dataclass
class MultiFidelity:
    """The state of one multi-fidelity search over `pairs` (key -> its pair's name) and `laws`
    (key -> `search.race.law`)."""

    pairs: dict[tuple, str]
    laws: dict[tuple, tuple | None]
    total: int  # prompts of the task
    racing: Racing
    objectives: dict[str, str]
    constraints: list[tuple[str, str, float]]
    calibration: int = 5  # configurations per pair
    calibration_prompts: int = 8
    parallel: int = 1  # timing requests per step
    seed: int = 0
    profiles: dict[tuple, list[dict]] = field(default_factory=dict)  # key -> cheap records, race order
    timed: dict[tuple, list[dict]] = field(default_factory=dict)  # key -> timed records, race order
    stopped: dict[tuple, str] = field(default_factory=dict)  # key -> when the race stopped it
    predicted_before: dict[tuple, float] = field(default_factory=dict)  # first objective, before any timing
    spent: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))  # engine-seconds
    profile_s: dict[tuple, float] = field(default_factory=dict)  # key -> engine-seconds of its profiles
    calibrated: bool = False
    fitted: dict[str, CostModel | None] | None = None  # `models`, until the next `tell`
    outcomes: Outcomes = field(default_factory=lambda: Outcomes())

    @property
    def alive(self) -> list[tuple]:
        return sorted(k for k in self.pairs if k not in self.stopped)

    def models(self) -> dict[str, CostModel | None]:
        """Each pair's cost model, fitted on every prompt it has timed (with its profile record)."""
        if self.fitted is not None:
            return self.fitted
        out = {}
        for pair in sorted(set(self.pairs.values())):
            timed = {k: [(cheap, r["wall_s"]) for cheap, r in zip(self.profiles[k], records)]
                     for k, records in self.timed.items()
                     if self.pairs[k] == pair and k in self.profiles}
            out[pair] = fit(timed)
        self.fitted = out
        return out

    def records(self, key: tuple, model: CostModel | None, bias: float) -> list[dict] | None:
        """What the race compares of `key`: per profiled prompt the timed record where there is
        one, else the profile with its time predicted (`CostModel.predicted`, `bias`); None
        while an untimed prompt has no model to predict it."""
        profile, timed = self.profiles.get(key, []), self.timed.get(key, [])
        rest = profile[len(timed):]
        if rest and model is None:
            return None
        return timed[:len(profile)] + (model.predicted(rest, bias) if rest else [])

    def race(self) -> None:
        """Stop every candidate infeasible or dominated with confidence (module docstring, 3)."""
        models = self.models()
        alive = self.alive
        fast = {k: self.records(k, models[self.pairs[k]], -1.0) for k in alive}
        slow = {k: self.records(k, models[self.pairs[k]], +1.0) for k in alive}
        for key in alive:
            if fast[key] is None:
                if infeasible(self.profiles[key], self.constraints, self.racing):
                    self.stopped[key] = f"infeasible after {len(self.profiles[key])} prompts"
                continue
            rivals = [(slow[k], same_law(self.laws[key], self.laws[k])) for k in alive
                      if k != key and k not in self.stopped and slow[k] is not None]
            if stop(fast[key], rivals, self.objectives, self.constraints, self.racing, self.seed):
                self.stopped[key] = (f"stopped after {len(self.profiles[key])} prompts profiled, "
                                     f"{len(self.timed.get(key, []))} timed")

    def predicted(self, key: tuple, metric: str) -> float | None:
        """`metric` of `key` on its profiled prompts, times predicted where not measured."""
        records = self.records(key, self.models()[self.pairs[key]], 0.0)
        return None if not records else value(records, metric)

    def step(self) -> list[Request]:
        """The next requests; [] when the search is over."""
        self.race()
        alive = self.alive
        for n in rungs(self.total, self.racing):
            short = [k for k in alive if len(self.profiles.get(k, [])) < n]
            if short:
                return [Request(k, False, len(self.profiles.get(k, [])), n, "profile") for k in short]
            if not self.calibrated:
                self.calibrated = True
                chosen = self.calibration_keys()
                if chosen:
                    return [Request(k, True, 0, self.calibration_prompts, "calibration") for k in chosen]
        left = [k for k in alive if len(self.timed.get(k, [])) < self.total]
        first, direction = next(iter(self.objectives.items()))
        sign = 1.0 if direction == "max" else -1.0
        left.sort(key=lambda k: -sign * (self.predicted(k, first) or 0.0))
        requests = []
        for key in left[:self.parallel]:
            done = len(self.timed.get(key, []))
            if not done:  # a prediction from the profile alone, to compare with what timing finds
                self.predicted_before[key] = self.predicted(key, first)
            end = next(n for n in rungs(self.total, self.racing) if n > done)
            requests.append(Request(key, True, done, end, "timing"))
        return requests

    def calibration_keys(self) -> list[tuple]:
        """Per pair, `calibration` profiled configurations spread over work per token."""
        chosen = []
        for pair in sorted(set(self.pairs.values())):
            profiles = {k: self.profiles[k] for k in self.alive if self.pairs[k] == pair}
            chosen += spread(profiles, self.calibration, self.seed)
        return chosen

    def tell(self, request: Request, measured: Measured) -> None:
        """The records of a request (prompts start..end-1, race order) and the engine-seconds
        it took; a request that failed takes its candidate out of the search."""
        if self.outcomes.told(request, measured):
            self.fail(request.key, measured.error)
            return
        kept = self.timed if request.timed else self.profiles
        kept[request.key] = kept.get(request.key, [])[:request.start] + measured.records
        self.fitted = None
        self.spent[request.phase] += measured.seconds
        if not request.timed:
            self.profile_s[request.key] = self.profile_s.get(request.key, 0.0) + measured.seconds

    def ask(self, in_flight: int) -> list[Request]:
        """`step`, once every request of the last one is told."""
        return [] if in_flight else self.outcomes.over_if(self.step())

    def decided(self) -> list[Decision]:
        return self.outcomes.decisions(self, self.objectives)

    def frontier(self) -> list[tuple]:
        """The candidates left, once the search is over: all timed on every prompt."""
        return [k for k in self.alive if len(self.timed.get(k, [])) >= self.total]

    def fail(self, key: tuple, why: str) -> None:
        """A candidate whose decode failed leaves the search."""
        self.stopped[key] = f"failed: {why}"

    def note(self, step: list[Request]) -> str:
        """What a step of the search does, for the progress line."""
        left = len(self.alive)
        first = step[0]
        if first.phase == "profile":
            return f"profiling {len(step)} candidates to {first.end} prompts, untimed"
        if first.phase == "calibration":
            return f"calibrating the cost model: timing {len(step)} configurations on {first.end} prompts"
        return f"timing {len(step)} of {left} candidates left, to {max(r.end for r in step)} prompts"


@dataclass
class Outcomes:
    """What a multi-fidelity search (this one or the vLLM one) hands over as decisions: each
    candidate's timed shards' results and errors, kept as told; once the search is over,
    every candidate an earlier session did not record (`recorded`), with how it was decided
    (the `fidelity` trial attribute: prompts profiled and timed, predicted objectives, why it
    stopped)."""

    recorded: set = field(default_factory=set)
    results: dict[tuple, list[dict]] = field(default_factory=dict)  # key -> its timed shards' results
    errors: dict[tuple, str] = field(default_factory=dict)
    over: bool = False

    def told(self, request: Request, measured: Measured) -> bool:
        """Keep a request's results (a timing's) or error; whether it failed."""
        if measured.error is not None:
            self.errors[request.key] = measured.error
            return True
        if request.timed:
            self.results.setdefault(request.key, []).extend(measured.results)
        return False

    def over_if(self, step: list[Request]) -> list[Request]:
        self.over = self.over or not step
        return step

    def decisions(self, search, objectives) -> list[Decision]:
        """Every candidate of `search` not recorded yet, once the search is over (then never
        again)."""
        if not self.over:
            return []
        out = []
        for key in sorted(k for k in search.pairs if k not in self.recorded):
            predicted = {m: search.predicted(key, m) for m in objectives}
            fidelity = {"profiled": len(search.profiles.get(key, [])),
                        "timed": len(search.timed.get(key, [])),
                        "predicted": predicted, "stopped": search.stopped.get(key),
                        "predicted_before_timing": search.predicted_before.get(key),
                        "profile_engine_s": search.profile_s.get(key, 0.0)}
            out.append(Decision(key, None, self.results.get(key, []), self.errors.get(key),
                                key in search.stopped, {"fidelity": fidelity},
                                search.profiles.get(key, []), predicted, why=search.stopped.get(key)))
            self.recorded.add(key)
        return out


def for_sweep(sweep: Sweep) -> MultiFidelity:
    """The multi-fidelity search over a sweep's grid, with its racing and calibration; the
    trials a killed session left running are marked interrupted (the search records every
    candidate not recorded yet, those included)."""
    spec = sweep.spec
    mark_interrupted(sweep.study)
    r, f = spec.search.race(), spec.search.fidelity or FidelitySpec()
    pairs, laws = {}, {}
    for params in grid(spec):
        candidate = candidate_of(spec, params)
        pairs[params_key(params)] = candidate.pair
        laws[params_key(params)] = law(candidate.pair, candidate.config)
    sweep.progress.target = len(pairs)
    racing = Racing(start=r.start, factor=r.factor, alpha=r.alpha)
    return MultiFidelity(pairs, laws, len(sweep.indices), racing,
                         dict(spec.objectives), constraint_terms(spec.constraints),
                         calibration=f.calibration, calibration_prompts=f.calibration_prompts,
                         parallel=spec.search.parallel, seed=spec.search.seed,
                         outcomes=Outcomes(tried_keys(sweep.study)))
