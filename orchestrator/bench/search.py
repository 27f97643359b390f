"""Compare search strategies cheaply: replay a measured grid instead of decoding again. Every
strategy the search registry holds (orchestrator/search/registry.py), and OptunaHub's
AutoSampler beside them, runs as a live sweep runs it, through the search protocol
(`replay`: ask, tell, decided), with what it asks answered from the grid's measurements;
so a strategy is in this benchmark once it is registered. `compare_strategies` reads the
hypervolume after fixed trial budgets; `race_strategies` replays the grid's per-prompt
records, with and without racing, and the multi-fidelity search (whose profiles are decoded
here, for real: bench/fidelity.py), counting cost in engine-seconds: the wall time of every
decode a strategy runs (for the grid's own, the batch-1 decodes it timed)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from orchestrator.analysis.frontier import default_reference, hypervolume
from orchestrator.analysis.frontier import feasible as meets_constraints
from orchestrator.analysis.metrics import pareto_front, unsummed
from orchestrator.analysis.outcome import shard_records
from orchestrator.search.fidelity import MultiFidelity
from orchestrator.search.race import in_order
from orchestrator.search.racing import Racing, race_order, value
from orchestrator.search.registry import STRATEGIES
from orchestrator.search.samplers import directions, make_sampler
from orchestrator.search.strategy import Decision, Measured, Progress, Request, Strategy, Sweep
from orchestrator.spec.space import batch_sizes, grid, params_key
from orchestrator.spec.sweep import FidelitySpec, RacingSpec, SweepSpec
from orchestrator.stored import STOPPED

SHARES = (0.1, 0.25, 0.5)  # of the grid's trial count, where `compare_strategies` reads hypervolume


@dataclass
class Replayed:
    """One replayed search: its decisions in order, each with the engine-seconds spent when it
    was made, the total spent, and the strategy at its end."""

    decided: list[tuple[Decision, float]]
    spent: float
    search: Strategy

    def finished(self) -> list[tuple[tuple, float]]:
        """(params key, cost when it finished) of each candidate measured to its end."""
        return [(d.key, at) for d, at in self.decided if not d.stopped and d.error is None and d.results]


def replay(spec: SweepSpec, strategy: str, seed: int, order: list[int],
           measure: Callable[[Request], Measured], values: Callable[[Decision], list[float]], trials: int,
           racing: Racing | None = None, guide: str | None = None, budget: float = math.inf,
           fidelity: FidelitySpec | None = None, prompts: dict | None = None) -> Replayed:
    """Run `strategy` (a registered one, `guided`: TPE after the guided start of the `guide`
    calibration, or `auto`) on the grid of `spec` as a live sweep would, one request at a
    time, until it ends, `trials` candidates have finished or `budget` engine-seconds are
    spent: `measure` answers each request (prompts of `order`; `prompts`, pair -> index ->
    text, where the strategy reads them); each decided candidate is told to Optuna as the
    recorder would (`values`, its objectives; pruned when stopped, failed when it failed, and
    then not counted). `fidelity`: the multi-fidelity search's settings (default: the spec's)."""
    sampler = "tpe" if strategy in ("guided", "auto") else strategy
    raced = racing and RacingSpec(start=racing.start, factor=racing.factor, alpha=racing.alpha)
    search_spec = spec.search.model_copy(update={"sampler": sampler, "seed": seed, "parallel": 1,
                                                 "trials": trials, "racing": raced, "guide": guide,
                                                 "fidelity": fidelity or spec.search.fidelity})
    study = optuna.create_study(directions=directions(spec), sampler=bench_sampler(spec, strategy, seed))
    progress = Progress(trials)
    search = STRATEGIES[sampler](Sweep(spec.model_copy(update={"search": search_spec}), study, progress,
                                       order, prompts or {}))
    decided: list[tuple[Decision, float]] = []
    spent = 0.0
    while spent < budget and (requests := search.ask(0)):
        for request in requests:
            measured = measure(request)
            spent += measured.seconds
            search.tell(request, measured)
        for decision in search.decided():
            decided.append((decision, spent))
            trial = decision.trial
            if trial is None:  # decided without a trial (a multi-fidelity candidate): nothing to tell
                continue
            if decision.error is not None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            progress.finished += 1
            if decision.stopped:
                trial.set_user_attr(STOPPED, len(shard_records(decision.results)))
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, values(decision))
    decided += [(d, spent) for d in search.decided()]
    return Replayed(decided, spent, search)


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

    from orchestrator.sweep.study import load_sweep

    spec, study = load_sweep(root, sweep)
    if spec.search.sampler != "grid":
        raise ValueError(f"{sweep}: needs a grid sweep to replay (search.sampler: grid)")
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    table = {params_key(t.params): tuple(t.values) for t in complete}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = {strategy: [fractions(spec, table, replay_values(spec, table, strategy, s, len(table) // 2 + 1,
                                                            calibration))
                       for s in range(seeds)]
            for strategy in replayed_strategies(guided=calibration is not None)}
    return len(table), rows


def replayed_strategies(guided: bool = False, raced: bool = False) -> list[str]:
    """The strategies a replay compares: every registered one but the multi-fidelity search
    (which `race_strategies` runs to its end, on per-prompt records), with `auto`
    (OptunaHub's AutoSampler) where racing, and `guided` where a calibration is given."""
    names = [name for name in STRATEGIES if name != "multifidelity"]
    return names + (["auto"] if raced else []) + (["guided"] if guided else [])


def replay_values(spec: SweepSpec, table: dict[tuple, tuple], strategy: str, seed: int, trials: int,
                  guide: str | None = None) -> list[tuple]:
    """Objective values of the first `trials` distinct configurations `strategy` finishes, each
    answered by the grid's own trial (`table`: params key -> its objective values); a point
    the grid did not finish fails, and is not counted."""

    def measure(request: Request) -> Measured:
        if request.key not in table:
            return Measured([], 0.0, error="not finished in the grid")
        return Measured([], 0.0, [{"records": []}])

    run = replay(spec, strategy, seed, [], measure, lambda d: list(table[d.key]), min(trials, len(table)),
                 guide=guide)
    return [table[key] for key, _ in run.finished()]


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

    order = [r["index"] for r in next(iter(records.values()))]
    profiler = None

    def measure(request: Request) -> Measured:
        if not request.timed:  # a multi-fidelity profile: decoded here, untimed
            return Measured(*profiler(request))
        rows = records[request.key][request.start:request.end]
        return Measured(rows, sum(r["wall_s"] for r in rows), [{"records": rows}])

    def objectives(decision: Decision) -> list[float]:
        return [value(shard_records(decision.results), m) for m in spec.objectives]

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for strategy in replayed_strategies(raced=True):
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
                    run = replay(spec, strategy, s, order, measure, objectives, len(records),
                                 racing if raced else None, budget=budget)
                    h, r = reached([k for k, at in run.finished() if at <= budget])
                    hv.append(h)
                    recall.append(r)
                    cost.append(min(run.spent, budget) / grid_cost)
                rows.append({"strategy": strategy, "racing": raced, "budget": share,
                             "hypervolume_fraction": statistics.mean(hv), "recall": statistics.mean(recall),
                             "cost_fraction": statistics.mean(cost)})
    from orchestrator.bench.fidelity import Profiler

    profiler = Profiler(spec, order)
    runs = [replay(spec, "multifidelity", s, order, measure, objectives, len(records), racing).search
            for s in range(seeds)]
    rows.append(multifidelity_row(spec, runs, grid_cost, reached))
    return rows


def multifidelity_row(spec: SweepSpec, runs: list[MultiFidelity], grid_cost: float, reached) -> dict:
    """The multi-fidelity search's replays, each run to its end: means over them of the
    hypervolume fraction and recall of the frontier it returns, of its cost (and of each
    phase's) as a fraction of the grid's engine-seconds, of the candidates it timed on every
    prompt; and the largest relative error of the first objective's prediction (made before a
    candidate's timing) against its measurement."""
    directions_ = tuple(spec.objectives.values())
    first = next(iter(spec.objectives))
    hv, recall, cost, timed, errors = [], [], [], [], []
    phases: dict[str, list[float]] = {}
    for state in runs:
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
