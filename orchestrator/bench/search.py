"""Compare search strategies cheaply: replay a measured grid instead of decoding again. Each
strategy asks configurations of the same space (with the sampler and the duplicate rule a
live sweep uses); the answer is the grid's measured objective values; hypervolume is read
after fixed trial budgets (`compare_strategies`). `race_strategies` replays the grid's
per-prompt records instead, with and without racing (search/racing.py), and the
multi-fidelity search (search/fidelity.py), and counts cost in engine-seconds: the wall time
of every decode a strategy runs (for the grid's own, the batch-1 decodes it timed)."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from pathlib import Path

import optuna

from orchestrator.analysis.frontier import default_reference, hypervolume
from orchestrator.analysis.frontier import feasible as meets_constraints
from orchestrator.analysis.metrics import pareto_front, unsummed
from orchestrator.analysis.outcome import constraint_terms
from orchestrator.search.race import in_order, law, same_law
from orchestrator.search.racing import Racing, race_order, rungs, stop, value
from orchestrator.search.samplers import ask_untried, directions, make_sampler
from orchestrator.spec.space import batch_sizes, candidate_of, grid, modelled, params_key
from orchestrator.spec.sweep import SweepSpec

STRATEGIES = ("grid", "random", "tpe", "nsga2", "guided")
SHARES = (0.1, 0.25, 0.5)  # of the grid's trial count, where `compare_strategies` reads hypervolume
RACED = ("grid", "random", "tpe", "gp", "nsga2", "auto")  # race_strategies, with the multi-fidelity search


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
        trial, _ = ask_untried(study, spec, lambda key, _: key in seen or key not in table,
                               lambda: [dict(k) for k in table if k not in seen])
        key = params_key(trial.params)
        seen[key] = table[key]
        study.tell(trial, list(table[key]))
    return list(seen.values())


def fractions(spec: SweepSpec, table: dict[tuple, tuple], points: list[tuple], shares=SHARES):
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
    {strategy: per seed, the hypervolume fractions after 10%, 25% and 50% of the grid (`SHARES`)})."""
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
        guide = predicted_frontier([modelled(spec, dict(k)) for k in table], calibrated)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = {strategy: [fractions(spec, table, replay(spec, table, strategy, s, len(table) // 2 + 1, guide))
                       for s in range(seeds)]
            for strategy in STRATEGIES if strategy != "guided" or guide is not None}
    return len(table), rows


@dataclass
class Replayed:
    """One replayed search: finished candidates in order, with the engine-seconds spent when
    each finished, and the total spent."""

    finished: list[tuple[tuple, float]]  # (params key, cost when it finished)
    spent: float


def race_replay(spec: SweepSpec, records: dict[tuple, list[dict]], strategy: str, seed: int, budget: float,
                racing: Racing | None) -> Replayed:
    """Ask candidates as `replay` does until `budget` engine-seconds are spent; each runs on
    every prompt, or (with `racing`) rung by rung, stopped when `racing.stop` says so. The
    sampler is told the final values of finished candidates; stopped ones are pruned. Rungs
    are prefixes of `records`, which are in the order a live race uses (`in_race_order`), and
    rivals of one `law` pass over accuracy, as in a live race."""
    total = len(next(iter(records.values())))
    laws = {k: law(c.pair, c.config) for k in records for c in [candidate_of(spec, dict(k))]}
    objectives = dict(spec.objectives)
    constraints = constraint_terms(spec.constraints)
    keys = list(records)
    if strategy == "grid":
        random.Random(seed).shuffle(keys)
    study = None
    if strategy != "grid":
        study = optuna.create_study(directions=directions(spec), sampler=bench_sampler(spec, strategy, seed))
    measured: dict[tuple, list[dict]] = {}
    finished: list[tuple[tuple, float]] = []
    spent = 0.0
    order = iter(keys)
    while spent < budget and len(measured) < len(records):
        if study is None:
            key, trial = next(order), None
        else:
            trial, _ = ask_untried(study, spec, lambda k, _: k in measured or k not in records,
                                   lambda: [dict(k) for k in records if k not in measured])
            key = params_key(trial.params)
        rows = records[key]
        done = 0
        for n in rungs(total, racing) if racing else [total]:
            spent += sum(r["wall_s"] for r in rows[done:n])
            done = n
            measured[key] = rows[:n]
            rivals = [(r, same_law(laws[key], laws[k])) for k, r in measured.items() if k != key]
            if racing and n < total and stop(rows[:n], rivals, objectives, constraints, racing, seed):
                break
        else:
            finished.append((key, spent))
            if trial is not None:
                study.tell(trial, [value(rows, m) for m in objectives])
            continue
        if trial is not None:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return Replayed(finished, spent)


class Unavailable(Exception):
    """A strategy this machine cannot run (why, in one line)."""


def bench_sampler(spec: SweepSpec, strategy: str, seed: int) -> optuna.samplers.BaseSampler:
    """The sampler of `strategy`: a sweep's (`make_sampler`), or `auto`, OptunaHub's
    AutoSampler (it picks GP, TPE or NSGA-II by the problem), loaded by `optunahub` from its
    registry; Unavailable where that package or its registry is out of reach."""
    if strategy != "auto":
        return make_sampler(spec, strategy, seed)
    try:
        import optunahub

        module = optunahub.load_module("samplers/auto_sampler")
    except ImportError:
        raise Unavailable("optunahub is not installed (pip install optunahub)") from None
    except Exception as err:  # noqa: BLE001 (a registry out of reach fails in many ways)
        raise Unavailable(f"optunahub could not load samplers/auto_sampler ({type(err).__name__})") from None
    return module.AutoSampler(seed=seed)


def in_race_order(spec: SweepSpec, records: dict[tuple, list[dict]]) -> dict[tuple, list[dict]]:
    """Each configuration's records in the order a live race decodes them (`race_order`)."""
    order = race_order([r["index"] for r in next(iter(records.values()))], spec.search.seed)
    return {k: in_order(rows, order) for k, rows in records.items()}


def check_replayable(spec: SweepSpec, study: optuna.Study, sweep: str) -> None:
    """Racing replays a grid whose every point was measured on every prompt at batch size 1;
    anything less leaves candidates it cannot compare, and a hypervolume that reads 0."""
    if spec.search.racing is not None:
        raise ValueError(f"--racing: {sweep} raced its trials (search.racing), so some stopped early; "
                         "replay a grid measured on every prompt")
    if batch_sizes(spec) != [1]:
        raise ValueError(f"--racing: {sweep} measured batch sizes {', '.join(map(str, batch_sizes(spec)))}; "
                         "racing replays batch size 1 only")
    points = grid(spec)
    done = {params_key(t.params) for t in study.get_trials(deepcopy=False,
                                                           states=(optuna.trial.TrialState.COMPLETE,))}
    measured = sum(params_key(p) in done for p in points)
    if measured < len(points):
        raise ValueError(f"--racing: {sweep} measured {measured} of its {len(points)} grid points; finish it "
                         "first (specsweep run SPEC --resume with search.trials covering the grid)")


def grid_records(root: Path, sweep: str) -> tuple[SweepSpec, dict[tuple, list[dict]], dict[tuple, bool]]:
    """A finished grid sweep's per-prompt records by params key (from its MLflow runs'
    `prompts.jsonl`, in prompt order), and which points are feasible."""

    from orchestrator.stored import logged_records, store_client
    from orchestrator.sweep.study import load_sweep
    from orchestrator.sweep.tracking import trial_run_ids

    spec, study = load_sweep(root, sweep)
    if spec.search.sampler != "grid":
        raise ValueError(f"{sweep}: needs a grid sweep to replay (search.sampler: grid)")
    check_replayable(spec, study, sweep)
    uri = study.user_attrs["tracking_uri"]
    client = store_client(uri)
    runs = trial_run_ids(study)
    records, feasible = {}, {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        run = runs.get(t.number)
        rows = None if run is None else logged_records(client, run)
        if rows is None:
            raise ValueError(f"--racing: trial {t.number} of {sweep} has no prompts.jsonl in MLflow ({uri}); "
                             "replay needs every trial's per-prompt records")
        records[params_key(t.params)] = rows
        feasible[params_key(t.params)] = meets_constraints(t)
    return spec, records, feasible


def race_strategies(root: Path, sweep: str, seeds: int, racing: Racing,
                    shares=(0.1, 0.25, 0.5, 1.0)) -> list[dict]:
    """Every strategy with and without racing, `seeds` times, on the finished grid sweep
    `sweep`: one row per (strategy, racing, budget share) with the hypervolume reached
    (fraction of the grid's, feasible points only), the recall of the grid's frontier (the
    share of its configurations found: hypervolume alone can read 1.000 with some missing)
    and the engine-seconds spent as a fraction of the grid's, means over seeds. At share 1.0
    racing reaches every configuration: its recall is what racing the whole grid keeps. Then
    one row for the multi-fidelity search, run to its end (`multifidelity_row`)."""
    spec, records, feasible = grid_records(root, sweep)
    why = unsummed(spec.objectives)
    if why:
        raise ValueError(f"--racing: {why}")
    records = in_race_order(spec, records)
    directions_ = tuple(spec.objectives.values())
    values = {k: tuple(value(r, m) for m in spec.objectives) for k, r in records.items()}
    usable = [k for k in records if feasible[k]]
    reference = default_reference([values[k] for k in records], directions_)
    full = hypervolume([values[k] for k in usable], directions_, reference) or 1.0
    front = {usable[i] for i in pareto_front([values[k] for k in usable], directions_)}
    grid_cost = float(sum(r["wall_s"] for rows in records.values() for r in rows))

    def reached(found: list[tuple]) -> tuple[float, float]:
        """(hypervolume fraction, recall) of the feasible configurations `found`."""
        found = [k for k in found if feasible[k]]
        volume = hypervolume([values[k] for k in found], directions_, reference) / full
        return volume, len(front & set(found)) / len(front)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for strategy in RACED:
        try:
            bench_sampler(spec, strategy, 0)
        except Unavailable as why:
            rows.append({"strategy": strategy, "unavailable": str(why)})
            continue
        for raced in (False, True):
            for share in shares:
                hv, recall, cost = [], [], []
                for s in range(seeds):
                    budget = share * grid_cost
                    run = race_replay(spec, records, strategy, s, budget, racing if raced else None)
                    h, r = reached([k for k, at in run.finished if at <= budget])
                    hv.append(h)
                    recall.append(r)
                    cost.append(min(run.spent, budget) / grid_cost)
                rows.append({"strategy": strategy, "racing": raced, "budget": share,
                             "hypervolume_fraction": statistics.mean(hv), "recall": statistics.mean(recall),
                             "cost_fraction": statistics.mean(cost)})
    rows.append(multifidelity_row(spec, records, racing, seeds, grid_cost, reached))
    return rows


def multifidelity_row(spec: SweepSpec, records: dict[tuple, list[dict]], racing: Racing, seeds: int,
                      grid_cost: float, reached) -> dict:
    """The multi-fidelity search run to its end `seeds` times (bench/fidelity.py): means over
    seeds of the hypervolume fraction and recall of the frontier it returns, of its cost (and
    of each phase's) as a fraction of the grid's engine-seconds, of the candidates it timed on
    every prompt; and the largest relative error of the first objective's prediction (made
    before a candidate's timing) against its measurement."""
    from orchestrator.bench.fidelity import Profiler, search

    directions_ = tuple(spec.objectives.values())
    profiler = Profiler(spec, [r["index"] for r in next(iter(records.values()))])
    first = next(iter(spec.objectives))
    hv, recall, cost, timed, errors = [], [], [], [], []
    phases: dict[str, list[float]] = {}
    for s in range(seeds):
        state = search(spec, records, profiler, racing, s)
        left = state.frontier()
        measured = [tuple(value(state.timed[k], m) for m in spec.objectives) for k in left]
        h, r = reached([left[i] for i in pareto_front(measured, directions_)])
        hv.append(h)
        recall.append(r)
        cost.append(sum(state.spent.values()) / grid_cost)
        for phase, seconds in state.spent.items():
            phases.setdefault(phase, []).append(seconds / grid_cost)
        full = [k for k in state.timed if len(state.timed[k]) == state.total]
        timed.append(len(full))
        errors += [abs(state.predicted_before[k] / value(state.timed[k], first) - 1)
                   for k in full if state.predicted_before.get(k)]
    return {"strategy": "multifidelity", "racing": True, "budget": None,
            "hypervolume_fraction": statistics.mean(hv), "recall": statistics.mean(recall),
            "cost_fraction": statistics.mean(cost),
            **{f"{phase}_fraction": statistics.mean(v) for phase, v in phases.items()},
            "timed": statistics.mean(timed), "prediction_error": max(errors, default=None)}


def mean_rows(runs: dict[str, list[list[float]]]) -> list[dict]:
    """`compare_strategies`'s fractions as rows like `race_strategies`'s: one per (strategy,
    budget share), the mean over seeds."""
    return [{"strategy": strategy, "racing": False, "budget": share,
             "hypervolume_fraction": statistics.mean(cells)}
            for strategy, per_seed in runs.items() for share, cells in zip(SHARES, zip(*per_seed))]


def fraction_table(points: int, runs: dict[str, list[list[float]]], sweep: str, seeds: int) -> list[str]:
    """The lines `specsweep bench search` prints: per strategy, mean ± sd of the fractions."""
    lines = [f"replaying {points} measured grid points of {sweep}; hypervolume as a fraction of the grid's",
             f"{'strategy':<10} {'10%':>12} {'25%':>12} {'50%':>12}   (mean ± sd over {seeds} seeds)"]
    for strategy, per_seed in runs.items():
        cells = [f"{statistics.mean(c):.3f}±{statistics.pstdev(c):.3f}" for c in zip(*per_seed)]
        lines.append(f"{strategy:<10} " + " ".join(f"{c:>12}" for c in cells))
    return lines


def race_table(rows: list[dict], sweep: str, racing: Racing, seeds: int) -> list[str]:
    """The lines `specsweep bench search --racing` prints: one per `race_strategies` row."""
    lines = [f"replaying {sweep} from its per-prompt records; budget and cost = shares of the grid's "
             f"engine-seconds; racing start {racing.start}, factor {racing.factor:g}; "
             f"means over {seeds} seeds",
             f"{'strategy':<13} {'racing':<6} {'budget':>6} {'hypervolume':>11} {'recall':>7} {'cost':>6}"]
    for r in rows:
        if "unavailable" in r:
            lines.append(f"{r['strategy']:<13} unavailable here: {r['unavailable']}")
            continue
        budget = "to end" if r["budget"] is None else f"{r['budget']:.0%}"
        lines.append(f"{r['strategy']:<13} {'yes' if r['racing'] else 'no':<6} {budget:>6} "
                     f"{r['hypervolume_fraction']:>11.3f} {r['recall']:>7.3f} {r['cost_fraction']:>6.3f}")
    for r in rows:
        if r["strategy"] == "multifidelity":
            error = r["prediction_error"]
            error = "" if error is None else f"; largest prediction error {error:.1%}"
            lines.append(f"multifidelity: cost by phase: profile {r['profile_fraction']:.3f}, calibration "
                         f"{r['calibration_fraction']:.3f}, timing {r['timing_fraction']:.3f}; "
                         f"{r['timed']:.1f} configurations timed on every prompt{error}")
    return lines
