"""`specsweep run | status | frontier | export`: launch a sweep and read its results."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from orchestrator.errors import user_errors

ROOT = typer.Option(Path("."), "--root", help="Directory holding .specsweep/ (sweep state, local MLflow).")


def _frontier_rows(spec, study) -> list[dict]:
    from orchestrator.driver import frontier

    rows = []
    run_ids = _run_ids(study)
    for t in frontier(study, spec):
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
    from orchestrator.frontier import tied

    flags = tied(
        [tuple(r["objectives"].values()) for r in rows],
        [r["metrics"] for r in rows],
        tuple(spec.objectives.values()),
    )
    from orchestrator.timing import flagged

    noisy = flagged(study)
    for row, flag in zip(rows, flags):
        row["tied"] = flag  # statistically indistinguishable from a neighbour on the frontier
        row["timing_flagged"] = row["trial"] in noisy  # its controls ran far from the typical speed
    return rows


def _run_ids(study) -> dict[int, str]:
    """Trial number -> MLflow run id, from the trial runs under the sweep's parent run (the
    driver logs runs after tell, so the study does not hold them)."""
    from mlflow.tracking import MlflowClient

    uri, parent = study.user_attrs.get("tracking_uri"), study.user_attrs.get("parent_run")
    if not uri or not parent:
        return {}
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_run(parent).info.experiment_id
    runs = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent}'", max_results=50000)
    return {
        int(r.data.tags["specsweep.trial"]): r.info.run_id for r in runs if "specsweep.trial" in r.data.tags
    }


def _table(title: str, spec, rows: list[dict]):
    from rich.table import Table

    table = Table(title=title)
    for col in ("trial", "pair", "schedule", "B", "K/τ", "rule", "λ/δ", *spec.objectives, "exact", "notes"):
        table.add_column(col, justify="right")
    for r in rows:
        c = r["config"]
        effort = f"τ={c['threshold']}" if c.get("threshold") is not None else f"K={c.get('steps') or 1}"
        table.add_row(
            str(r["trial"]),
            r["pair"],
            c["schedule"],
            str(c["block"]),
            effort,
            c["rule"],
            f"{c['leniency']:g}",
            *(f"{r['objectives'][m]:.4g}" for m in spec.objectives),
            "yes" if r["exact"] else "no (lossy)",
            ", ".join(n for n, on in (("tied", r.get("tied")), ("timing flagged", r.get("timing_flagged")))
                      if on),
        )
    return table


@user_errors
def run(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="Sweep spec YAML (see sweeps/demo.yaml)."),
    trials: int = typer.Option(
        None, "--trials", min=1, help="Finished trials to reach (default: the spec's)."
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue the sweep's existing state."),
    fresh: bool = typer.Option(False, "--fresh", help="Discard the sweep's existing state first."),
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster (default: the spec's cluster)."),
    tracking_uri: str = typer.Option(
        None,
        "--tracking-uri",
        help="MLflow URI (default: the spec's, else a local sqlite store under .specsweep/).",
    ),
    root: Path = ROOT,
) -> None:
    """Run a sweep: baselines, then trials on Ray workers, tracked in MLflow."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from orchestrator.driver import Driver
    from orchestrator.spec import load_spec

    if resume and fresh:
        raise ValueError("--resume, --fresh: give one of them")
    spec = load_spec(spec_path)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}  frontier {task.fields[frontier]}  {task.fields[note]}"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    task_id = bar.add_task(f"sweep {spec.name}", total=spec.search.trials, failed=0, frontier=0, note="")

    def show(p) -> None:
        bar.update(
            task_id, completed=p.finished, total=p.target, failed=p.failed, frontier=p.frontier, note=p.note
        )

    driver = Driver(spec, spec_path.read_text(), root, ray_address, tracking_uri, trials, show)
    start = time.time()
    driver.prepare(resume=resume, fresh=fresh)
    try:
        with bar:
            study = driver.run()
    except KeyboardInterrupt:
        console.print(
            f"interrupted: trials in flight marked failed; continue with specsweep run {spec_path} --resume"
        )
        raise typer.Exit(130) from None
    rows = _frontier_rows(spec, study)
    console.print(
        _table(f"frontier of {spec.name} ({len(rows)} trials; {time.time() - start:.0f} s)", spec, rows)
    )
    uri = driver.tracking_uri
    browse = f"open {uri}" if uri.startswith("http") else f"mlflow ui --backend-store-uri {uri}"
    console.print(
        f"MLflow: {uri} (experiment {spec.tracking.experiment or spec.name}, parent run "
        f"{driver.parent_run}); browse: {browse}"
    )
    from orchestrator.timing import describe, timing_report

    for line in describe(timing_report(study)):
        console.print(line)
    if driver.progress.note:
        console.print(driver.progress.note)


@user_errors
def status(
    name: str = typer.Argument(..., metavar="SWEEP"),
    root: Path = ROOT,
    reference: str = typer.Option(
        "worst", "--reference", help="Hypervolume reference: worst | ar | ar:PAIR."
    ),
) -> None:
    """Trials finished, failed and in flight; baselines; frontier size; where results are."""
    import optuna

    from orchestrator.driver import frontier, journal_cut, load_sweep, state_dir

    spec, study = load_sweep(root, name)
    cut = journal_cut(state_dir(root, name))
    if cut:
        typer.echo(f"warning: the study journal's last record is cut short ({cut} bytes): its change is lost "
                   f"and that trial shows as running; `specsweep run SPEC --resume` repairs the journal and "
                   f"asks it again")
    trials = study.get_trials(deepcopy=False)
    count = lambda state: sum(t.state == state for t in trials)  # noqa: E731
    interrupted = sum(bool(t.user_attrs.get("interrupted")) for t in trials)
    typer.echo(
        f"sweep {name}: {count(optuna.trial.TrialState.COMPLETE)} complete, "
        f"{count(optuna.trial.TrialState.FAIL) - interrupted} failed, {interrupted} interrupted, "
        f"{count(optuna.trial.TrialState.RUNNING)} running, {count(optuna.trial.TrialState.WAITING)} "
        f"queued; target {spec.search.trials}"
    )
    for key, metrics in sorted(study.user_attrs.items()):
        if key.startswith("baseline:"):
            shown = ", ".join(
                f"{k} {v:.4g}" for k, v in metrics.items() if k in ("accuracy", "throughput_tps")
            )
            typer.echo(f"{key.removeprefix('baseline:')}: {shown}")
    points = [tuple(t.values) for t in frontier(study, spec)]
    typer.echo(f"frontier: {len(points)} trials on {', '.join(spec.objectives)}")
    if points:
        value, where = hypervolume_against(spec, study, points, reference)
        typer.echo(f"hypervolume: {value:.6g} (reference: {where})")
    from orchestrator.timing import describe, timing_report

    report = timing_report(study)
    for line in describe(report):
        typer.echo(line)
    for kind in report["hardware"]:
        typer.echo("hardware: " + ", ".join(f"{k} {v}" for k, v in kind.items()))
    typer.echo(
        f"MLflow: {study.user_attrs.get('tracking_uri')} parent run {study.user_attrs.get('parent_run')}"
    )


def hypervolume_against(spec, study, points, reference: str) -> tuple[float, str]:
    """HV of `points` against the worst observed values, or a pair's `ar` baseline
    (`ar` = the first pair's, `ar:PAIR` = that pair's)."""
    import optuna

    from orchestrator.frontier import default_reference, hypervolume

    directions = tuple(spec.objectives.values())
    if reference == "worst":
        every = [tuple(t.values) for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))]
        ref = default_reference(every, directions)
        return hypervolume(points, directions, ref), f"worst observed {ref}"
    if not reference.startswith("ar"):
        raise ValueError(f"--reference: worst, ar or ar:PAIR; got {reference!r}")
    pair = reference.partition(":")[2] or spec.pairs[0].name
    baseline = study.user_attrs.get(f"baseline:{pair}:ar")
    if baseline is None or any(m not in baseline for m in spec.objectives):
        raise ValueError(
            f"--reference: the ar baseline of pair {pair} lacks some of {', '.join(spec.objectives)}"
        )
    ref = tuple(baseline[m] for m in spec.objectives)
    return hypervolume(points, directions, ref), f"{pair} ar baseline {ref}"


@user_errors
def frontier_cmd(
    name: str = typer.Argument(..., metavar="SWEEP"),
    root: Path = ROOT,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The frontier trials: params, metrics, MLflow run ids."""
    from rich.console import Console

    from orchestrator.driver import load_sweep

    spec, study = load_sweep(root, name)
    rows = _frontier_rows(spec, study)
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    Console().print(_table(f"frontier of {name}", spec, rows))


@user_errors
def export(
    name: str = typer.Argument(..., metavar="SWEEP"),
    out: Path = typer.Option(..., "--out", help="Directory for the exported configs."),
    where: str = typer.Option(None, "--where", help="Filter, e.g. 'accuracy >= 0.9 * ar.accuracy'."),
    pick: str = typer.Option("all", "--pick", help="all | fastest | most-accurate | knee"),
    floors: str = typer.Option("0.5,0.75,0.9,0.95,0.99", "--floors", help="Accuracy floors for routes.yaml."),
    force: bool = typer.Option(False, "--force", help="Write into a directory that already holds files."),
    root: Path = ROOT,
) -> None:
    """Write one YAML per chosen frontier config (pair, config, metrics, exact, provenance),
    routes.yaml (the fastest config per accuracy floor) and the sweep's plots."""
    from orchestrator.driver import load_sweep
    from orchestrator.export import export_configs

    try:
        levels = tuple(float(x) for x in floors.split(","))
    except ValueError:
        raise ValueError(f"--floors: comma-separated numbers; got {floors!r}") from None
    if not all(0 <= x <= 1 for x in levels):  # NaN fails too
        raise ValueError(f"--floors: accuracy floors must lie in [0, 1]; got {floors!r}")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ValueError(f"--out: {out} already holds files; pass --force to write over them")
    spec, study = load_sweep(root, name)
    paths = export_configs(spec, study, _frontier_rows(spec, study), out, where, pick, levels)
    for p in paths:
        typer.echo(str(p))
    if not paths:
        print("error: no frontier config matches --where", file=sys.stderr)
        raise typer.Exit(1)
