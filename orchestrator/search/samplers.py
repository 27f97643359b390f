"""What to try next: the sampler a spec names, and the rule that keeps a sweep from
measuring one configuration twice. The driver and the search benchmark's replay both use
these, so a replayed strategy asks exactly what a live sweep would."""

from __future__ import annotations

import random
from collections.abc import Callable

import optuna

from orchestrator.spec.space import Candidate, choose_config, modelled, params_key
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
