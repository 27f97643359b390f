"""Search strategies on a serving grid (a vLLM sweep over method, drafts and concurrency),
replayed through the search protocol (search/strategy.py), as bench/search.py replays them on
specsweep's grids: every registered strategy asks and is told as in a live sweep, each timing
answered with the grid's trial (its tokens/s, ratio and accuracy), each profile of the
multi-fidelity search decoded here for real (bench/fidelity.Profiler).

Cost is engine-seconds as a worker spends them: the control server's start once, a
speculative server's start whenever the method served changes (the grid recorded each
setting's start on its first trial), and each configuration's loads, repeats and controls:
its trial's engine-seconds, which under shared controls (engines.serverpool.balanced_order) are
its share of the group it was timed with, so a point a strategy times alone is priced at that
share, below what it costs alone (R + 1 control loads of its own); a live run of the strategy
(`specsweep run`, `status --json`) gives its own cost.
Per concurrency, the pick is the fastest configuration a strategy measured; its gap is
against the grid's fastest there, hypervolume and recall over (tokens/s, accuracy) there.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import optuna

from orchestrator.analysis.frontier import hypervolume
from orchestrator.analysis.metrics import pareto_front
from orchestrator.bench.search import replay, replayed_strategies
from orchestrator.search.servingfidelity import ServingFidelity
from orchestrator.search.servingsearch import ERROR, TOLERANCE, validate
from orchestrator.search.strategy import Decision, Measured, Request
from orchestrator.spec.space import params_key
from orchestrator.spec.sweep import FidelitySpec, SweepSpec

BUDGETS = (0.25, 0.5)


@dataclass(frozen=True)
class Point:
    """One grid trial: its setting, concurrency, what it measured and what it cost."""

    method: str
    drafts: int
    concurrency: int
    tps: float
    ratio: float
    accuracy: float
    engine_s: float
    start_s: float

    @property
    def setting(self) -> tuple[str, int]:
        return self.method, self.drafts

    def value(self, metric: str) -> float:
        """An objective of the grid: throughput_tps, throughput_ratio or accuracy."""
        return {"throughput_tps": self.tps, "throughput_ratio": self.ratio, "accuracy": self.accuracy}[metric]


@dataclass(frozen=True)
class Grid:
    """A finished vLLM grid as a replay reads it: its spec, points, prompt indices in decoding
    order and prompts (pair -> index -> text)."""

    spec: SweepSpec
    points: dict[tuple, Point]
    order: list[int]
    prompts: dict[str, dict[int, str]]

    def values(self, decision: Decision) -> list[float]:
        """A decided candidate's objectives, as the grid measured them."""
        return [self.points[decision.key].value(m) for m in self.spec.objectives]


def serving_grid(root: Path, sweep: str) -> Grid:
    """A finished vLLM grid sweep's trials by params key, and its prompts; ValueError where it
    is not one."""
    from orchestrator.engines import engine_of
    from orchestrator.spec.space import grid
    from orchestrator.sweep.prompts import spec_prompts
    from orchestrator.sweep.study import load_sweep

    spec, study = load_sweep(root, sweep)
    if spec.search.sampler != "grid":
        raise ValueError(f"{sweep}: needs a grid sweep to replay (search.sampler: grid)")
    other = [m for m in spec.objectives if m not in ("throughput_tps", "throughput_ratio", "accuracy")]
    if other or "accuracy" not in spec.objectives or len(spec.objectives) != 2:
        raise ValueError(f"--serving: replays a speed objective (throughput_tps or throughput_ratio) and "
                         f"accuracy; {sweep} has {', '.join(spec.objectives)}")
    points = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        config, m = t.user_attrs["config"], t.user_attrs["metrics"]
        if not engine_of(config).served:
            raise ValueError(f"--serving: trial {t.number} of {sweep} ran in specsweep's engine; "
                             "replay a vLLM sweep")
        points[params_key(t.params)] = Point(
            config["method"], config["num_speculative_tokens"], config["concurrency"], m["throughput_tps"],
            m["throughput_ratio"], m["accuracy"], m["engine_s"], m.get("engine_start_s", 0.0))
    if len(points) < len(grid(spec)):
        raise ValueError(f"--serving: {sweep} finished {len(points)} of its {len(grid(spec))} grid points; "
                         "finish it first (specsweep run SPEC --resume)")
    _, examples, prompts = spec_prompts(spec)
    return Grid(spec, points, [e.index for e in examples], prompts)


def starts(points: dict[tuple, Point]) -> dict[str, float]:
    """Each method's server start, the largest the grid recorded on its settings' trials (a
    grid of resident servers records one a method, a grid of servers started per setting one
    a setting)."""
    out: dict[str, float] = {}
    for p in points.values():
        out[p.method] = max(out.get(p.method, 0.0), p.start_s)
    return out


class Ledger:
    """Engine-seconds and server starts as one worker spends them on resident servers
    (engines.serverpool): the control's start once, a method's start each time the method
    served changes (its settings share it), every load."""

    def __init__(self, points: dict[tuple, Point]):
        self.start = starts(points)
        self.spent = 0.0
        self.starts = 0
        self.serving: str | None = None
        self.control = False

    def run(self, point: Point) -> None:
        if not self.control:
            self.spent += self.start["none"]
            self.starts += 1
            self.control = True
        if point.method != "none" and point.method != self.serving:
            self.spent += self.start[point.method]
            self.starts += 1
            self.serving = point.method
        self.spent += point.engine_s - point.start_s


def spent_on(points: dict[tuple, Point], ran: list[Point]) -> Ledger:
    """The ledger of a worker that ran `ran`, in that order."""
    ledger = Ledger(points)
    for point in ran:
        ledger.run(point)
    return ledger


def grid_ledger(points: dict[tuple, Point]) -> Ledger:
    """What the grid costs on resident servers: every point, a method's settings together."""
    return spent_on(points, sorted(points.values(), key=lambda p: (p.setting, p.concurrency)))


TOKENS = 1000.0  # a replayed load's tokens: any amount gives the point's tokens/s and ratio


def served_result(point: Point) -> dict:
    """A shard result whose trial outcome (analysis.outcome.trial_outcome) is the grid point's:
    one load of TOKENS tokens at its tokens/s, answered right at its accuracy, and a control
    load at tokens/s ÷ ratio, so throughput_tps = tps and throughput_ratio = ratio."""
    wall = TOKENS / point.tps
    record = {"index": 0, "new_tokens": TOKENS, "wall_s": wall, "batch": 0, "batch_wall_s": wall,
              "correct": point.accuracy, "ttft_s": 0.0, "tpot_s": wall / TOKENS, "itl_s": []}
    control = {"index": 0, "new_tokens": TOKENS, "wall_s": wall * point.ratio, "at": 0.0, "repeats": 1}
    return {"records": [record], "controls": [control]}


class ServedReplay:
    """Answers a replayed strategy's requests on a vLLM grid: a timing with its grid point
    (`served_result`) and the engine-seconds a worker on resident servers spends on it
    (`ledger`); a profile decoded for real by `profiler` (the multi-fidelity search's)."""

    def __init__(self, points: dict[tuple, Point], profiler=None):
        self.points, self.profiler, self.ledger = points, profiler, Ledger(points)

    def __call__(self, request: Request) -> Measured:
        if not request.timed:
            return Measured(*self.profiler(request))
        before = self.ledger.spent
        self.ledger.run(self.points[request.key])
        result = served_result(self.points[request.key])
        return Measured(result["records"], self.ledger.spent - before, [result])


def sampled(grid: Grid, strategy: str, seed: int, budget: float) -> list[Point]:
    """The configurations a registered strategy finishes within `budget` engine-seconds."""
    run = replay(grid.spec, strategy, seed, grid.order, ServedReplay(grid.points), grid.values,
                 len(grid.points), budget=budget, prompts=grid.prompts)
    return [grid.points[key] for key, at in run.finished() if at <= budget]


def multifidelity(grid: Grid, tolerance: float, error: float) -> tuple[ServingFidelity, float, Ledger]:
    """The registered multi-fidelity search run to its end on the grid: its state, its
    engine-seconds (profiles included) and its timings' cost (engine-seconds, server starts)."""
    from orchestrator.bench.fidelity import Profiler

    measure = ServedReplay(grid.points, Profiler(grid.spec, grid.order))
    run = replay(grid.spec, "multifidelity", 0, grid.order, measure, grid.values, len(grid.points),
                 fidelity=FidelitySpec(tolerance=tolerance, error=error), prompts=grid.prompts)
    return run.search, run.spent, measure.ledger


def picked(search: ServingFidelity, points: dict[tuple, Point], setting: tuple, concurrency: int) -> Point:
    """The grid point of a setting the search names at `concurrency` (("none", 0): the control)."""
    return next(points[k] for k, (_, config) in search.configs.items() if config.concurrency == concurrency
                and (config.setting == setting or setting[0] == config.method == "none"))


def per_concurrency(points: dict[tuple, Point], found: list[Point], concurrency: int, speed: str,
                    pick: Point | None = None) -> dict:
    """At `concurrency`, on the grid's `speed` objective (tokens/s or ratio): the pick's gap
    (default: the best found) to the grid's best, and the hypervolume fraction and recall of
    the frontier on (speed, accuracy)."""
    here = [p for p in points.values() if p.concurrency == concurrency]
    mine = [p for p in found if p.concurrency == concurrency]
    values = [(p.value(speed), p.accuracy) for p in here]
    reference = (0.0, 0.0)  # both are >= 0; the worst observed reads 0 where every accuracy is equal
    full = hypervolume(values, ("max", "max"), reference) or 1.0
    front = {here[i] for i in pareto_front(values, ("max", "max"))}
    best = max(p.value(speed) for p in here)
    chosen = pick.value(speed) if pick else max((p.value(speed) for p in mine), default=0.0)
    return {"concurrency": concurrency, "pick_gap": chosen / best - 1,
            "hypervolume_fraction": hypervolume([(p.value(speed), p.accuracy) for p in mine], ("max", "max"),
                                                reference) / full,
            "recall": len(front & set(mine)) / len(front)}


def serving_strategies(root: Path, sweep: str, seeds: int, tolerance: float = TOLERANCE,
                       error: float = ERROR) -> tuple[list[dict], list[dict], list[dict]]:
    """Rows (strategy, racing, budget, concurrency, cost_fraction, pick_gap,
    hypervolume_fraction, recall; means over seeds for every registered strategy at each
    budget share, the multi-fidelity search run to its end), the multi-fidelity search's
    predictions (made before each timing) against the grid's measurements, and the step-cost
    model left out one configuration at a time over the whole grid (`validate`)."""
    grid = serving_grid(root, sweep)
    points = grid.points
    speed = next(m for m in grid.spec.objectives if m != "accuracy")
    full = grid_ledger(points)
    grid_cost = full.spent
    concurrencies = sorted({p.concurrency for p in points.values()})
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # GP warns on every conditional ask
    rows = []
    for strategy in replayed_strategies():
        for share in BUDGETS:
            runs = [sampled(grid, strategy, s, share * grid_cost) for s in range(seeds)]
            for c in concurrencies:
                cells = [per_concurrency(points, found, c, speed) for found in runs]
                rows.append({"strategy": strategy, "racing": False, "budget": share, "concurrency": c,
                             "cost_fraction": share,
                             **{k: statistics.mean(cell[k] for cell in cells)
                                for k in ("pick_gap", "hypervolume_fraction", "recall")}})
    search, spent, ledger = multifidelity(grid, tolerance, error)
    (pair_search,) = search.searches.values()  # a serving grid replays one pair
    timed = [points[key] for key in search.timed]
    # the control is measured beside every timing: no speculation is known wherever one ran
    found = timed + [picked(search, points, ("none", 0), c) for c in concurrencies
                     if any(p.concurrency == c for p in timed)]
    picks = {c: picked(search, points, setting, c) for c, setting in pair_search.picks().items()}
    for c in concurrencies:
        rows.append({"strategy": "multifidelity", "racing": True, "budget": None,
                     "cost_fraction": spent / grid_cost,
                     "profile_fraction": search.spent["profile"] / grid_cost, "engine_seconds": spent,
                     "server_starts": ledger.starts, "grid_engine_seconds": grid_cost,
                     "grid_server_starts": full.starts,
                     "timed": [f"{p.method} {p.drafts}" for p in timed if p.concurrency == c],
                     "pick": f"{picks[c].method} {picks[c].drafts}",
                     **per_concurrency(points, found, c, speed, picks[c])})
    first = search.objectives[0]  # what the search predicts before a timing, in its unit
    predictions = [{"setting": points[k].setting, "concurrency": points[k].concurrency, "metric": first,
                    "predicted": before, "measured": points[k].value(first)}
                   for k, before in search.predicted_before.items()]
    cells = [{"method": p.method, "drafts": p.drafts, "concurrency": p.concurrency, "ratio": p.ratio,
              **dict(zip(("gain", "width"), pair_search.gains[search.configs[k][1].setting]))}
             for k, p in points.items()]
    return rows, predictions, validate(cells)


def serving_table(rows: list[dict], predictions: list[dict], checked: list[dict], sweep: str,
                  seeds: int) -> list[str]:
    """The lines `specsweep bench search --serving` prints."""
    lines = [f"replaying {sweep} (vLLM grid); cost = share of the grid's engine-seconds (server starts "
             f"included); per concurrency, on the grid's speed objective: the pick against the grid's "
             f"best there, hypervolume and recall on (speed, accuracy); samplers: means over {seeds} seeds",
             f"{'strategy':<13} {'budget':>6} {'conc':>4} {'cost':>6} {'pick gap':>8} {'hypervolume':>11} "
             f"{'recall':>6}  timed"]
    for r in rows:
        budget = "to end" if r["budget"] is None else f"{r['budget']:.0%}"
        timed = f"  {', '.join(r['timed'])} -> {r['pick']}" if "timed" in r else ""
        lines.append(f"{r['strategy']:<13} {budget:>6} {r['concurrency']:>4} {r['cost_fraction']:>6.3f} "
                     f"{r['pick_gap']:>+8.1%} {r['hypervolume_fraction']:>11.3f} {r['recall']:>6.3f}{timed}")
    mf = next(r for r in rows if r["strategy"] == "multifidelity")
    lines.append(f"multifidelity: acceptance of every setting measured in {mf['profile_fraction']:.4f} "
                 f"of the grid's engine-seconds")
    lines.append(f"cost on resident servers: the grid {mf['grid_engine_seconds']:.1f} engine-seconds, "
                 f"{mf['grid_server_starts']} server starts; the multi-fidelity search "
                 f"{mf['engine_seconds']:.1f} engine-seconds, {mf['server_starts']} server starts")
    for p in predictions:
        lines.append(f"predicted before timing: {p['setting'][0]} {p['setting'][1]} at c={p['concurrency']}: "
                     f"{p['metric']} {p['predicted']:.4g}, measured {p['measured']:.4g} "
                     f"({p['predicted'] / p['measured'] - 1:+.1%})")
    lines.append("the step-cost model, each configuration left out (ratio predicted from its acceptance "
                 "and its method's line there):")
    for c in sorted({r["concurrency"] for r in checked}):
        for method in sorted({r["method"] for r in checked if r["concurrency"] == c}):
            here = sorted((r for r in checked if (r["concurrency"], r["method"]) == (c, method)),
                          key=lambda r: r["drafts"])
            cells = ", ".join(f"n={r['drafts']} {r['error']:+.1%}" for r in here)
            worst = max(abs(r["error"]) for r in here)
            lines.append(f"  c={c:<3} {method:<7} largest {worst:.1%}: {cells}")
    return lines
