"""Compare search strategies cheaply: replay a measured grid from a table instead of
decoding again. Each strategy asks configurations of the same space; the answer is the
grid's measured objective values; hypervolume is read after fixed trial budgets."""

from __future__ import annotations

import random

import optuna

from orchestrator.frontier import default_reference, hypervolume
from orchestrator.space import choose_config, params_key
from orchestrator.spec import SweepSpec

STRATEGIES = ("grid", "random", "tpe", "nsga2", "guided")


def replay(
    spec: SweepSpec,
    table: dict[tuple, tuple],
    strategy: str,
    seed: int,
    budget: int,
    guide: list[dict] | None = None,
) -> list[tuple]:
    """Objective values of the first `budget` distinct configurations a strategy asks."""
    if strategy == "grid":  # exhaustive, in a seeded order
        keys = list(table)
        random.Random(seed).shuffle(keys)
        return [table[k] for k in keys[:budget]]
    samplers = {
        "random": optuna.samplers.RandomSampler,
        "tpe": optuna.samplers.TPESampler,
        "nsga2": optuna.samplers.NSGAIISampler,
        "guided": optuna.samplers.TPESampler,
    }
    directions = ["maximize" if d == "max" else "minimize" for d in spec.objectives.values()]
    study = optuna.create_study(directions=directions, sampler=samplers[strategy](seed=seed))
    for params in (guide or []) if strategy == "guided" else []:
        study.enqueue_trial(params)
    seen: dict[tuple, tuple] = {}
    untried = list(table)
    random.Random(seed).shuffle(untried)
    while len(seen) < min(budget, len(table)):
        trial = study.ask()
        choose_config(spec, trial.suggest_categorical)
        key = params_key(trial.params)
        if key in seen or key not in table:  # duplicate: an untried point instead, as the driver does
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            study.enqueue_trial(dict(next(k for k in untried if k not in seen)))
            continue
        seen[key] = table[key]
        study.tell(trial, list(table[key]))
    return list(seen.values())


def fractions(spec: SweepSpec, table: dict[tuple, tuple], points: list[tuple], shares=(0.1, 0.25, 0.5)):
    """Hypervolume after each share of the grid's size, as a fraction of the grid's own."""
    directions = tuple(spec.objectives.values())
    reference = default_reference(list(table.values()), directions)
    full = hypervolume(list(table.values()), directions, reference) or 1.0
    return [
        hypervolume(points[: max(1, round(share * len(table)))], directions, reference) / full
        for share in shares
    ]
