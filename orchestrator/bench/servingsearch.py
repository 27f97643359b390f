"""Search strategies on a serving grid (a vLLM sweep over method, drafts and concurrency),
replayed: each configuration's tokens/s, ratio and engine-seconds are the grid's, its
acceptance is measured here for real (workloads/serving/acceptance.py) for the multi-fidelity
search, which times only what search/servingsearch.py says can still win.

Cost is engine-seconds as a worker spends them: the control server's start once, a
speculative server's start whenever the setting served changes (the grid recorded each
setting's start on its first trial), and each configuration's loads, repeats and controls.
Per concurrency, the pick is the fastest configuration a strategy measured; its gap is
against the grid's fastest there, hypervolume and recall over (tokens/s, accuracy) there.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import optuna

from orchestrator.analysis.frontier import hypervolume
from orchestrator.analysis.metrics import pareto_front
from orchestrator.search.samplers import ask_untried, directions, make_sampler
from orchestrator.search.servingsearch import ERROR, TOLERANCE, ServingSearch, validate
from orchestrator.spec.space import params_key
from orchestrator.spec.sweep import SweepSpec

SAMPLERS = ("grid", "random", "tpe", "gp", "nsga2")
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


def serving_grid(root: Path, sweep: str) -> tuple[SweepSpec, dict[tuple, Point]]:
    """A finished vLLM grid sweep's trials by params key; ValueError where it is not one."""
    from orchestrator.engines import engine_of
    from orchestrator.spec.space import grid
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
    return spec, points


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


def sampled(spec: SweepSpec, points: dict[tuple, Point], strategy: str, seed: int,
            budget: float) -> list[Point]:
    """The configurations a sampler (or the grid in a seeded order) measures within `budget`
    engine-seconds."""
    import random

    ledger, found = Ledger(points), []
    keys = list(points)
    random.Random(seed).shuffle(keys)
    study = None if strategy == "grid" else optuna.create_study(
        directions=directions(spec), sampler=make_sampler(spec, strategy, seed))
    seen: set[tuple] = set()
    while len(seen) < len(points):
        if study is None:
            key, trial = keys[len(seen)], None
        else:
            asked = ask_untried(study, spec, lambda k, _: k in seen or k not in points,
                                lambda: [dict(k) for k in points if k not in seen])
            if asked is None:
                break
            trial, key = asked[0], params_key(asked[0].params)
        seen.add(key)
        ledger.run(points[key])
        if ledger.spent > budget:
            break
        found.append(points[key])
        if trial is not None:
            study.tell(trial, [points[key].value(m) for m in spec.objectives])
    return found


def acceptance(spec: SweepSpec, points: dict[tuple, Point]):
    """Each setting's Acceptance, measured here, and the seconds it took."""
    from orchestrator.sweep.prompts import spec_prompts
    from workloads.models import load_pair
    from workloads.serving.acceptance import measure
    from workloads.serving.config import ServingConfig

    pair = spec.pairs[0]
    texts = list(spec_prompts(spec)[2][pair.name].values())
    tokens = max(spec.dimension_values().get("max_new_tokens", [48]))
    settings = sorted({p.setting for p in points.values()})
    configs = {s: ServingConfig(*s, max_new_tokens=tokens) for s in settings}
    loaded = load_pair(pair.load_spec())
    began = time.perf_counter()
    measured = measure(loaded, texts, list(configs.values()))
    return {s: measured[c] for s, c in configs.items()}, time.perf_counter() - began


def multifidelity(points: dict[tuple, Point], profiles: dict, tolerance: float, error: float
                  ) -> tuple[ServingSearch, list[Point], Ledger, list[dict]]:
    """The search run to its end on the grid's measurements: its state, the configurations it
    timed, what they cost (engine-seconds, server starts), and each timing's prediction made
    before it (where the search had one)."""
    by = {(p.setting, p.concurrency): p for p in points.values()}
    concurrencies = sorted({p.concurrency for p in points.values()})
    search = ServingSearch({s: (a.step_gain, a.width) for s, a in profiles.items()}, concurrencies,
                           tolerance, error)
    ledger, timed, predictions = Ledger(points), [], []
    while (step := search.next()) is not None:
        setting, where = step
        for c in where:
            point = by[setting, c]
            before = search.predicted(setting, c)
            if before is not None:
                predictions.append({"setting": setting, "concurrency": c, "predicted": before,
                                    "measured": point.tps})
            ledger.run(point)
            timed.append(point)
            search.tell(setting, c, point.tps, point.ratio)
    return search, timed, ledger, predictions


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
                       error: float = ERROR) -> tuple[list[dict], list[dict]]:
    """Rows (strategy, racing, budget, concurrency, cost_fraction, pick_gap,
    hypervolume_fraction, recall; means over seeds for the samplers at each budget share),
    the multi-fidelity search's predictions against the grid's measurements, and the
    step-cost model left out one configuration at a time over the whole grid (`validate`)."""
    spec, points = serving_grid(root, sweep)
    speed = next(m for m in spec.objectives if m != "accuracy")
    full = Ledger(points)
    for p in sorted(points.values(), key=lambda p: (p.setting, p.concurrency)):
        full.run(p)
    grid_cost = full.spent
    concurrencies = sorted({p.concurrency for p in points.values()})
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # GP warns on every conditional ask
    rows = []
    for strategy in SAMPLERS:
        for share in BUDGETS:
            runs = [sampled(spec, points, strategy, s, share * grid_cost) for s in range(seeds)]
            for c in concurrencies:
                cells = [per_concurrency(points, found, c, speed) for found in runs]
                rows.append({"strategy": strategy, "racing": False, "budget": share, "concurrency": c,
                             "cost_fraction": share,
                             **{k: statistics.mean(cell[k] for cell in cells)
                                for k in ("pick_gap", "hypervolume_fraction", "recall")}})
    profiles, profile_s = acceptance(spec, points)
    search, timed, ledger, predictions = multifidelity(points, profiles, tolerance, error)
    spent = ledger.spent
    # the control is measured beside every timing: no speculation is known wherever one ran
    by = {(p.setting, p.concurrency): p for p in points.values()}
    found = timed + [by[("none", 0), c] for c in concurrencies if any(p.concurrency == c for p in timed)]
    for c in concurrencies:
        rows.append({"strategy": "multifidelity", "racing": True, "budget": None,
                     "cost_fraction": (spent + profile_s) / grid_cost,
                     "profile_fraction": profile_s / grid_cost, "engine_seconds": spent + profile_s,
                     "server_starts": ledger.starts, "grid_engine_seconds": grid_cost,
                     "grid_server_starts": full.starts,
                     "timed": [f"{p.method} {p.drafts}" for p in timed if p.concurrency == c],
                     "pick": "{} {}".format(*search.picks()[c]),
                     **per_concurrency(points, found, c, speed, by[search.picks()[c], c])})
    timed = [{"method": p.method, "drafts": p.drafts, "concurrency": p.concurrency, "ratio": p.ratio,
              "gain": profiles[p.setting].step_gain, "width": profiles[p.setting].width}
             for p in points.values()]
    return rows, predictions, validate(timed)


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
                     f"{p['predicted']:.0f} tok/s, measured {p['measured']:.0f} "
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
