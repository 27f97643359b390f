"""How far a sweep's timings can be trusted: the drift of its controls per pair and engine
(Engine.controls: specsweep's `ar`, or vLLM without speculation) and the hardware they ran
on, read from the study (the driver, `status` and exports share it)."""

from __future__ import annotations

import optuna

from orchestrator.analysis.metrics import OUTLIER, drift
from orchestrator.engines import ENGINES, engine_of
from orchestrator.stored import baseline, load, load_order


def drift_key(pair: str, config: dict, key: tuple[int, float | None]) -> str:
    """The name of the controls a trial of `pair` with `config` at load `key` (stored.load) is
    timed against: the engine's (Engine.drift_key), `:b<size>` above batch size 1, `:rate<r>`
    under a request rate."""
    size, rate = key
    return (engine_of(config).drift_key(pair) + (f":b{size}" if size > 1 else "")
            + (f":rate{rate:g}" if rate is not None else ""))


def timing_report(study: optuna.Study) -> dict:
    """{"drift": {drift_key: metrics.drift report}, "hardware": [worker hardware, one per kind]}."""
    points: dict[tuple[str, str, tuple], list[tuple[float, int, float]]] = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        c = t.user_attrs.get("control")
        if c:  # controls of another engine or load run at another speed: one report each
            engine = engine_of(t.user_attrs.get("config", {})).name
            points.setdefault((t.user_attrs["pair"], engine, load(t)), []).append(
                (c["at"], t.number, c["ms_per_token"]))
    report = {}
    for (pair, name, key), pts in sorted(points.items(), key=lambda kv: (kv[0][:2], load_order(kv[0][2]))):
        engine = ENGINES[name]
        ar = baseline(study, pair, engine.baseline, key[0]) if engine.baseline else {}
        tps = ar.get("throughput_tps")
        report[drift_key(pair, {"engine": name}, key)] = {**drift(pts, 1000 / tps if tps else None),
                                                          "controls": engine.controls}
    return {"drift": report, "hardware": study.user_attrs.get("hardware", [])}


def flagged(report: dict) -> set[int]:
    """Trials of a `timing_report` whose controls ran far from their pair's typical speed
    (metrics.OUTLIER)."""
    return {t for pair in report["drift"].values() for t in pair["outliers"]}


def describe(report: dict) -> list[str]:
    """One line per pair, for `specsweep status` and the end of a run: how the controls every
    ratio is taken against moved, how the separately timed baseline relates to them (a trial's
    tokens/s over the baseline's is its ratio times baseline_vs_controls), and which trials are
    flagged and why."""
    lines = []
    for pair, d in report["drift"].items():
        line = (f"{pair} {d['controls']} controls (timed beside each trial; its ratio is against them): "
                f"{d['first_ms_per_token']:.3g} ms/token at the first trial, {d['last_ms_per_token']:.3g} at "
                f"the last ({d['drift']:.2f}x), spread {d['spread'][0]:.2f}-{d['spread'][1]:.2f}x of the "
                f"median over {d['trials']} trials")
        if "baseline_vs_controls" in d:
            factor = d["baseline_vs_controls"]
            line += (f"; the ar baseline, timed once before the trials, took {factor:.2f}x their median time "
                     f"per token, so a trial's tok/s over the baseline's is its ratio x {factor:.2f}")
        if d["outliers"]:
            line += (f"; flagged trials {', '.join(map(str, d['outliers']))}: their controls ran over "
                     f"{OUTLIER:g}x off the median (the machine's speed moved under them; their ratios are "
                     "less certain)")
        lines.append(line)
    return lines
