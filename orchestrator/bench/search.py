"""Compare search strategies cheaply: replay a measured grid from a table instead of
decoding again. Each strategy asks configurations of the same space (with the sampler and
the duplicate rule a live sweep uses); the answer is the grid's measured objective values;
hypervolume is read after fixed trial budgets."""

from __future__ import annotations

import random
from pathlib import Path

import optuna

from orchestrator.analysis.frontier import default_reference, hypervolume
from orchestrator.sweep.search import directions, make_sampler, replacement
from orchestrator.sweep.space import choose_config, config_of, params_key
from orchestrator.sweep.spec import SweepSpec

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
    sampler = make_sampler(spec, "tpe" if strategy == "guided" else strategy, seed)
    study = optuna.create_study(directions=directions(spec), sampler=sampler)
    for params in (guide or []) if strategy == "guided" else []:
        study.enqueue_trial(params)
    seen: dict[tuple, tuple] = {}
    while len(seen) < min(budget, len(table)):
        trial = study.ask()
        choose_config(spec, trial.suggest_categorical)
        key = params_key(trial.params)
        if key in seen or key not in table:  # duplicate: an untried point instead, as the driver does
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            study.enqueue_trial(replacement([dict(k) for k in table if k not in seen], trial.number))
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


def compare_strategies(root: Path, sweep: str, seeds: int, calibration: str | None = None
                       ) -> tuple[int, dict[str, list[list[float]]]]:
    """Replay every strategy `seeds` times on the finished grid sweep `sweep`: (grid points,
    {strategy: per seed, the hypervolume fractions after 10%, 25% and 50% of the grid})."""
    import json

    from orchestrator.sweep.study import load_sweep

    spec, study = load_sweep(root, sweep)
    if spec.search.sampler != "grid":
        raise ValueError(f"{sweep}: needs a grid sweep to replay (search.sampler: grid)")
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    table = {params_key(t.params): tuple(t.values) for t in complete}
    guide = None
    if calibration:
        from orchestrator.analysis.throughput import predicted_frontier

        calibrated = json.loads(Path(calibration).read_text())
        guide = predicted_frontier([(dict(k), config_of(spec, dict(k))) for k in table], calibrated)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = {strategy: [fractions(spec, table, replay(spec, table, strategy, s, len(table) // 2 + 1, guide))
                       for s in range(seeds)]
            for strategy in STRATEGIES if strategy != "guided" or guide is not None}
    return len(table), rows
