"""What `status`, `frontier` and `export` show of a sweep, read from its study."""

from __future__ import annotations

import optuna

from orchestrator.analysis.frontier import default_reference, frontier_trials, hypervolume, tied
from orchestrator.analysis.timing import describe, flagged, timing_report
from orchestrator.stored import baseline, baselines


def effort(config: dict) -> str:
    """A config's drafting effort as the tables and plots show it: `τ=<threshold>` or `K=<steps>`."""
    if config.get("threshold") is not None:
        return f"τ={config['threshold']:g}"
    return f"K={config.get('steps') or 1}"


def frontier_rows(spec, study, run_ids: dict[int, str]) -> list[dict]:
    """One row per frontier trial (trial, pair, exact, config, params, objectives, metrics,
    its MLflow run id from `run_ids`), flagged `tied` when statistically indistinguishable
    from a neighbour and `timing_flagged` when its controls ran far from the typical speed."""
    rows = []
    for t in frontier_trials(study, spec):
        rows.append(
            {
                "trial": t.number,
                "pair": t.user_attrs["pair"],
                "exact": t.user_attrs["exact"],
                "config": t.user_attrs["config"],
                "params": t.params,
                "objectives": dict(zip(spec.objectives, t.values)),
                "metrics": t.user_attrs.get("metrics", {}),
                "run_id": run_ids.get(t.number),
            }
        )
    flags = tied(
        [tuple(r["objectives"].values()) for r in rows],
        [r["metrics"] for r in rows],
        tuple(spec.objectives.values()),
    )
    noisy = flagged(timing_report(study))
    for row, flag in zip(rows, flags):
        row["tied"] = flag
        row["timing_flagged"] = row["trial"] in noisy
    return rows


def hypervolume_against(spec, study, points, reference: str) -> tuple[float, str]:
    """HV of `points` against the worst observed values, or a pair's `ar` baseline
    (`ar` = the first pair's, `ar:PAIR` = that pair's)."""
    directions = tuple(spec.objectives.values())
    if reference == "worst":
        every = [tuple(t.values) for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))]
        ref = default_reference(every, directions)
        return hypervolume(points, directions, ref), f"worst observed {ref}"
    if not reference.startswith("ar"):
        raise ValueError(f"--reference: worst, ar or ar:PAIR; got {reference!r}")
    pair = reference.partition(":")[2] or spec.pairs[0].name
    ar = baseline(study, pair)
    if any(m not in ar for m in spec.objectives):
        raise ValueError(
            f"--reference: the ar baseline of pair {pair} lacks some of {', '.join(spec.objectives)}"
        )
    ref = tuple(ar[m] for m in spec.objectives)
    return hypervolume(points, directions, ref), f"{pair} ar baseline {ref}"


def status_lines(spec, study, reference: str = "worst", journal_cut: int = 0) -> list[str]:
    """`specsweep status`: trial counts by state, baselines, frontier size and hypervolume,
    timing drift, worker hardware, where the MLflow runs are."""
    lines = []
    if journal_cut:
        lines.append(f"warning: the study journal's last record is cut short ({journal_cut} bytes): its "
                     "change is lost and that trial shows as running; `specsweep run SPEC --resume` repairs "
                     "the journal and asks it again")
    trials = study.get_trials(deepcopy=False)
    count = {state: sum(t.state == state for t in trials) for state in optuna.trial.TrialState}
    interrupted = sum(bool(t.user_attrs.get("interrupted")) for t in trials)
    S = optuna.trial.TrialState
    lines.append(f"sweep {spec.name}: {count[S.COMPLETE]} complete, {count[S.FAIL] - interrupted} failed, "
                 f"{interrupted} interrupted, {count[S.RUNNING]} running, {count[S.WAITING]} queued; "
                 f"target {spec.search.trials}")
    for (pair, kind), metrics in sorted(baselines(study).items()):
        shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if k in ("accuracy", "throughput_tps"))
        lines.append(f"{pair}:{kind}: {shown}")
    points = [tuple(t.values) for t in frontier_trials(study, spec)]
    lines.append(f"frontier: {len(points)} trials on {', '.join(spec.objectives)}")
    if points:
        value, where = hypervolume_against(spec, study, points, reference)
        lines.append(f"hypervolume: {value:.6g} (reference: {where})")
    report = timing_report(study)
    lines += describe(report)
    lines += ["hardware: " + ", ".join(f"{k} {v}" for k, v in kind.items()) for kind in report["hardware"]]
    attrs = study.user_attrs
    lines.append(f"MLflow: {attrs.get('tracking_uri')} parent run {attrs.get('parent_run')}")
    return lines
