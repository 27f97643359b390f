"""The strategy of Optuna's samplers (`Sampled`: grid, random, tpe, nsga2, gp), with or
without racing, and the rules it keeps: the sampler a spec names, no configuration measured
twice (a duplicate proposal is replaced by an untried point), interrupted configurations asked
again on resume. `bench search` replays it through the same protocol
(`strategy.run`), so a replay asks exactly what a live sweep would."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from functools import cached_property

import optuna

from orchestrator.analysis.outcome import shard_records
from orchestrator.engines.shard import measured_together
from orchestrator.search.race import Race, in_order, law
from orchestrator.search.strategy import Decision, Measured, Request, Sweep
from orchestrator.spec.space import (
    Candidate,
    candidate_of,
    choose_config,
    grid,
    modelled,
    params_key,
    together_key,
)
from orchestrator.spec.sweep import SweepSpec
from orchestrator.stored import STOPPED


def directions(spec: SweepSpec) -> list[str]:
    return ["maximize" if d == "max" else "minimize" for d in spec.objectives.values()]


def constrain(trial: optuna.Trial, values: list[float]) -> None:
    """Record a trial's constraint values (<= 0 is feasible): as Optuna's constraints, which
    every sampler that supports them reads (`Trial.set_constraint`), and as the user
    attribute `constraints` the frontier reads."""
    for i, v in enumerate(values):
        trial.set_constraint(f"constraint {i}", v)
    trial.set_user_attr("constraints", values)


def make_sampler(spec: SweepSpec, sampler: str | None = None, seed: int | None = None
                 ) -> optuna.samplers.BaseSampler:
    """The sampler named by `sampler` (default: the spec's), seeded by `seed` (default: the
    spec's); grid and random sweeps both get a random sampler, grid points being enqueued.
    Samplers that support constraints read those each trial was given (`constrain`)."""
    name = sampler or spec.search.sampler
    seed = spec.search.seed if seed is None else seed
    if name in ("grid", "random", "multifidelity"):
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.GPSampler(seed=seed)


def replacement(untried: list[dict], trial_number: int) -> dict:
    """The configuration asked instead of a duplicate proposal (TPE exploits and proposes
    points already measured): an untried one, chosen reproducibly from the trial's number."""
    return random.Random(trial_number).choice(untried)


def ask_untried(study: optuna.Study, spec: SweepSpec, tried: Callable[[tuple, int], bool],
                untried: Callable[[], list[dict]]) -> tuple[optuna.Trial, Candidate] | None:
    """The next trial of `study` on a configuration not tried yet, with its candidate: a
    proposal `tried(params key, trial number)` says was tried is pruned as a duplicate and an
    `untried()` point (`replacement`) enqueued instead; None when none is left. The one
    duplicate rule of live sweeps and of their replays."""
    while True:
        trial = study.ask()
        candidate = choose_config(spec, trial.suggest_categorical)
        if not tried(params_key(trial.params), trial.number):
            return trial, candidate
        trial.set_user_attr("duplicate", True)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        left = untried()
        if not left:
            return None
        study.enqueue_trial(replacement(left, trial.number))


def guided_start(spec: SweepSpec, space: list[dict], tried: set, budget: int) -> list[dict]:
    """Model-guided start: the untried configurations the calibrated throughput model
    predicts on the (throughput, quality) frontier, at most `budget // 2` of them."""
    import json
    from pathlib import Path

    from orchestrator.analysis.throughput import predicted_frontier

    calibration = json.loads(Path(spec.search.guide).expanduser().read_text())
    front = predicted_frontier([modelled(spec, p) for p in space], calibration)
    return [p for p in front if params_key(p) not in tried][: max(1, budget // 2)]


def finished_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Complete, failed and racing-stopped trials, not counting the interrupted (they are
    asked again) or the pruned duplicates."""
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)
    return [t for t in study.get_trials(deepcopy=False, states=states) if not t.user_attrs.get("interrupted")
            and (t.state != optuna.trial.TrialState.PRUNED or STOPPED in t.user_attrs)]


def tried_keys(study: optuna.Study, exclude: int = -1) -> set:
    """params_key of every configuration finished, failed, stopped by racing or in flight
    (interrupted ones are asked again), other than trial `exclude`'s."""
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    return {params_key(t.params) for t in finished_trials(study) + running if t.number != exclude}


def remaining_grid(study: optuna.Study, space: list[dict]) -> tuple[list[dict], int]:
    """(grid points neither finished nor already enqueued, in grid order; how many are
    enqueued and waiting)."""
    waiting = [t.system_attrs.get("fixed_params", {})
               for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))]
    tried = [t.params for t in finished_trials(study)] + waiting
    return [p for p in space if p not in tried], len(waiting)


def mark_interrupted(study: optuna.Study) -> None:
    """Trials left RUNNING by a killed session, marked failed-interrupted."""
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)


def requeue_interrupted(study: optuna.Study) -> None:
    """Ask interrupted configurations again.

    Trials left RUNNING by a killed session are first marked failed-interrupted (a Ctrl-C
    marks its own). Then every interrupted trial's configuration that is not finished, in
    flight or already waiting is enqueued once, whatever the sampler: a grid would reach it
    again, but TPE, random, NSGA-II or GP would never propose it again on their own. Its
    finished shards come from the cache."""
    mark_interrupted(study)
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    asked = tried_keys(study) | {params_key(t.system_attrs.get("fixed_params", {})) for t in waiting}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)):
        if t.user_attrs.get("interrupted") and params_key(t.params) not in asked:
            study.enqueue_trial(t.params, skip_if_exists=False)
            asked.add(params_key(t.params))


def describe(trial: optuna.Trial, candidate: Candidate) -> None:
    """What a trial runs, on the trial: its pair, config, batch size and exactness."""
    trial.set_user_attr("pair", candidate.pair)
    trial.set_user_attr("config", candidate.config.to_dict())
    trial.set_user_attr("batch_size", candidate.batch_size)
    trial.set_user_attr("exact", candidate.config.exact)


def trial_on(study: optuna.Study, spec: SweepSpec, key: tuple) -> tuple[optuna.Trial, Candidate]:
    """A new trial on the grid point `key` (a candidate a strategy decided without one)."""
    study.enqueue_trial(dict(key))
    trial = study.ask()
    candidate = choose_config(spec, trial.suggest_categorical)  # the enqueued params, as the trial's
    describe(trial, candidate)
    return trial, candidate


class Sampled:
    """Trials asked of the spec's Optuna sampler (the grid's points enqueued in grid order), up
    to `search.parallel` in flight (the grid's trials timed together counting as one) and
    `progress.target` in all, never on a configuration
    tried already; each over every prompt, or with `search.racing` rung by rung (race.py),
    stopped once dominated or infeasible with confidence. Interrupted configurations of an
    earlier session are asked again first (`requeue_interrupted`)."""

    def __init__(self, sweep: Sweep):
        self.spec, self.study, self.progress = sweep.spec, sweep.study, sweep.progress
        self.indices = sweep.indices
        requeue_interrupted(self.study)
        self.race = Race(self.spec, len(self.indices)) if self.spec.search.racing else None
        if self.race is not None:
            self.race.load(self.study, self.indices)  # rivals finished or stopped by earlier sessions
        self.started = False
        self.planned: list[dict] | None = None  # grid: points not enqueued yet, in order
        self.results: dict[int, list[dict]] = {}  # trial number -> its shards' results so far
        self.began: dict[int, float] = {}
        self.next_rungs: list[Request] = []  # racing trials going on
        self.joined: set[int] = set()  # trials in flight that the next one was asked to join
        self.done: list[Decision] = []

    @cached_property
    def space(self) -> list[dict]:
        """Every point of the space, built only when needed: a guided start, the grid, or a
        duplicate proposal to replace."""
        return grid(self.spec)

    def _start(self) -> None:
        """A guided start's enqueued points, or the grid still to run (the target shrinks to
        what it holds)."""
        self.started = True
        if self.spec.search.guide and self.spec.search.sampler != "grid" and not finished_trials(self.study):
            for params in guided_start(self.spec, self.space, tried_keys(self.study), self.progress.target):
                self.study.enqueue_trial(params)
        if self.spec.search.sampler == "grid":
            self.planned, waiting = remaining_grid(self.study, self.space)
            left = self.progress.finished + len(self.planned) + waiting
            self.progress.target = min(self.progress.target, left)

    def ask(self, in_flight: int) -> list[Request]:
        """Racing trials' next rungs, then new trials up to `search.parallel` in flight and no
        more than the target; when the space holds no untried configuration the target
        becomes what has started."""
        if not self.started:
            self._start()
        requests, self.next_rungs = self.next_rungs, []
        in_flight += len(requests)
        started = self.progress.finished + in_flight
        units = in_flight - len(self.joined)  # trials timed together count as one
        while units < self.spec.search.parallel and started < self.progress.target:
            waiting = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
            if self.planned is not None and not waiting:
                if not self.planned:
                    break
                self.study.enqueue_trial(self.planned.pop(0))
            asked = ask_untried(self.study, self.spec, self._tried, self._untried)
            if asked is None:
                self.progress.target = started
                break
            trial, candidate = asked
            describe(trial, candidate)
            self.results[trial.number], self.began[trial.number] = [], time.time()
            end = self.race.first() if self.race is not None else len(self.indices)
            requests.append(Request(params_key(trial.params), True, 0, end, "trial", trial=trial))
            started += 1
            if self._joined_by_next(trial.params):
                self.joined.add(trial.number)
            else:
                units += 1
        return requests

    def _joined_by_next(self, params: dict) -> bool:
        """Whether the next point asked (an enqueued one: an interrupted trial's again, or the
        grid's next) is timed together with this trial (measured_together: one control and
        server start), so it is asked now whatever `search.parallel`: trials share their
        controls only when they are in flight together."""
        key = together_key(self.spec, params)
        if key is None:  # it starts nothing of its own (specsweep's engine): timed alone
            return False
        waiting = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        following = waiting[0].system_attrs.get("fixed_params") if waiting else (
            self.planned[0] if self.planned else None)
        try:
            return following is not None and measured_together(key, together_key(self.spec, following))
        except KeyError:  # an enqueued point whose other params the sampler chooses (one interrupted
            return False  # before they were asked)

    def _tried(self, key: tuple, number: int) -> bool:
        return key in tried_keys(self.study, number)

    def _untried(self) -> list[dict]:
        tried = tried_keys(self.study)
        return [p for p in self.space if params_key(p) not in tried]

    def tell(self, request: Request, measured: Measured) -> None:
        """A trial's rung: with racing and no error, it goes on to the next rung or is decided
        (stopped, or measured on every prompt); otherwise decided. A decided racing trial
        leaves its per-prompt columns on the study for the races of later sessions."""
        trial = request.trial
        results = self.results[trial.number]
        results += measured.results
        stopped = False
        if self.race is not None and measured.error is None:
            records = in_order(shard_records(results), self.indices)
            candidate = candidate_of(self.spec, trial.params)
            rung = self.race.after(trial.number, records, law(candidate.pair, candidate.config))
            if rung.next is not None:
                self.next_rungs.append(Request(request.key, True, len(records), rung.next, "trial",
                                               trial=trial))
                self.progress.rungs += 1
                return
            self.race.keep(trial, records)
            stopped = rung.stopped
        del self.results[trial.number]
        self.joined.discard(trial.number)
        self.done.append(Decision(request.key, trial, results, measured.error, stopped,
                                  start=self.began.pop(trial.number)))

    def decided(self) -> list[Decision]:
        done, self.done = self.done, []
        return done

    def note(self, requests: list[Request]) -> str:
        return ""
