"""`specsweep run | status | frontier | export`: launch a sweep and read its results."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from orchestrator.analysis.schedule import MAX_REPEATS
from orchestrator.errors import user_errors
from orchestrator.trust import TRUST, check_remote_code

ROOT = typer.Option(Path("."), "--root", help="Directory holding .specsweep/ (sweep state, local MLflow).")


def _table(title: str, spec, rows: list[dict]):
    """The frontier rows, narrow enough for 80 columns: the configuration in a few words
    (Engine.label: a lenient rule and its leniency), short objective headers,
    no column rules; the batch size only where one is not 1, under vLLM the concurrency, and
    the request rate where one was set;
    notes (lossy, tied, timing flagged) only where a row has one. With `predicted_vllm` on
    them (frontier --predict-vllm), a column per concurrency of the predicted vLLM ratio and
    the model's error there; over a task mix, a column per category of its acceptance length."""
    from rich import box
    from rich.table import Table

    from orchestrator.analysis.categories import categories
    from orchestrator.analysis.summary import SHORT
    from orchestrator.engines import engine_of
    from orchestrator.stored import load_order, row_load

    # the speed ratio against the trial's own controls (ar, or vLLM without speculation)
    ratio = ["throughput_ratio"] if "throughput_ratio" not in spec.objectives and any(
        "throughput_ratio" in r.get("metrics", {}) for r in rows) else []
    predicted = sorted({c for r in rows for c in (r.get("predicted_vllm") or {})})
    # a task mix: each category's acceptance length (categories.category_metrics)
    accepted = [c for c in dict.fromkeys(c for r in rows for c in categories(r.get("metrics", {})))
                if any(f"mean_accept_len.{c}" in r.get("metrics", {}) for r in rows)]
    served = bool(rows) and all(engine_of(r["config"]).served for r in rows)
    sized = served or any(r.get("batch_size", 1) != 1 for r in rows)
    notes = {r["trial"]: ", ".join(n for n, on in (("lossy", not r["exact"]), ("tied", r.get("tied")),
                                                   ("timing flagged", r.get("timing_flagged"))) if on)
             for r in rows}
    against = " or ".join(dict.fromkeys(engine_of(r["config"]).controls for r in rows))
    caption = (f"ratio: the trial's speed over its controls' ({against}, timed beside it on the same prompts)"
               if any("throughput_ratio" in r.get("metrics", {}) for r in rows) else None)
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                  collapse_padding=True)
    rated = any("request_rate" in r for r in rows)
    columns = ["trial", "pair", *(["conc" if served else "batch"] if sized else []),
               *(["req/s"] if rated else []), "configuration",
               *(SHORT.get(m, m) for m in (*spec.objectives, *ratio)), *(f"acc len {c}" for c in accepted),
               *(f"vLLM c={c}" for c in predicted),
               *(["notes"] if any(notes.values()) else [])]
    for col in columns:
        words = col in ("pair", "configuration", "notes")
        table.add_column(col, justify="left" if words else "right", no_wrap=col != "notes")
    for r in sorted(rows, key=lambda r: (load_order(row_load(r)), r["trial"])):
        table.add_row(
            str(r["trial"]),
            r["pair"],
            *([str(r.get("batch_size", 1))] if sized else []),
            *([f"{r['request_rate']:g}" if "request_rate" in r else "-"] if rated else []),
            engine_of(r["config"]).label(r["config"]),
            *(f"{r['objectives'][m]:.2f}x" if m == "throughput_ratio" else f"{r['objectives'][m]:.4g}"
              for m in spec.objectives),
            *(f"{r['metrics']['throughput_ratio']:.2f}x" if "throughput_ratio" in r["metrics"] else "-"
              for _ in ratio),
            *(f"{r['metrics'][f'mean_accept_len.{c}']:.2f}" if f"mean_accept_len.{c}" in r["metrics"] else "-"
              for c in accepted),
            *(_predicted_cell((r.get("predicted_vllm") or {}).get(c)) for c in predicted),
            *([notes[r["trial"]]] if "notes" in columns else []),
        )
    return table


def _predicted_cell(cell: dict | None) -> str:
    if cell is None:
        return "-"
    error = cell["validation_error"]
    return f"{cell['throughput_ratio']:.2f}x" + (f" ±{error:.0%}" if error is not None else "")


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
    trust_remote_code: bool = TRUST,
) -> None:
    """Run a sweep: baselines, then trials on Ray workers, tracked in MLflow."""
    from rich.console import Console

    from orchestrator.analysis.summary import all_failed
    from orchestrator.spec.file import load_spec
    from orchestrator.sweep.driver import Driver, categories_note

    if resume and fresh:
        raise ValueError("--resume, --fresh: give one of them")
    spec = load_spec(spec_path)
    check_remote_code({p.name: p.load_spec() for p in spec.pairs}, trust_remote_code, "spec")
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    bar, show = _progress_bar(console, spec)
    driver = Driver(spec, spec_path.read_text(), root, ray_address, tracking_uri, trials, show)
    start = time.time()
    driver.prepare(resume=resume, fresh=fresh)
    if driver.categories:
        console.print(categories_note(driver.categories))
    try:
        with bar:
            study = driver.run()
    except KeyboardInterrupt:
        console.print(f"interrupted: the trials in flight are marked interrupted (`specsweep status` counts "
                      f"them); continue with specsweep run {spec_path} --resume")
        raise typer.Exit(130) from None
    _report(console, spec, driver, study, time.time() - start)
    if driver.recorder.unwritten:
        print(f"error: the sweep finished and its trials are recorded (MLflow and {driver.dir}), but the "
              f"disk could not take {', '.join(driver.recorder.unwritten)}; free space, then `specsweep "
              f"export {spec.name} --out DIR` writes the configs and plots", file=sys.stderr)
        raise typer.Exit(1)
    failed = all_failed(study)
    if failed:
        console.print(f"error: {failed}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _progress_bar(console, spec):
    """The sweep's progress bar, and the callback the driver updates it through; where the
    output is not a terminal (a log file, CI), which a bar would reach only at the end, a line
    each time a trial ends or the phase changes instead."""
    import contextlib

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if not console.is_terminal:
        began, said = time.monotonic(), [None]

        def line(p) -> None:
            now = (p.finished, p.failed, p.stopped, p.note)
            if now != said[0]:
                said[0] = now
                elapsed = int(time.monotonic() - began)
                print(f"sweep {spec.name}: {p.finished}/{p.target} trials, failed {p.failed}, stopped "
                      f"{p.stopped}, frontier {p.frontier}" + (f", {p.note}" if p.note else "")
                      + f" ({elapsed // 60}:{elapsed % 60:02d})", file=sys.stderr, flush=True)

        return contextlib.nullcontext(), line

    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}  stopped {task.fields[stopped]}  "
                   "frontier {task.fields[frontier]}  {task.fields[note]}"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    task_id = bar.add_task(f"sweep {spec.name}", total=spec.search.trials, failed=0, stopped=0, frontier=0,
                           note="")

    def show(p) -> None:
        bar.update(
            task_id, completed=p.finished, total=p.target, failed=p.failed, stopped=p.stopped,
            frontier=p.frontier, note=p.note
        )

    return bar, show


def _report(console, spec, driver, study, seconds: float) -> None:
    """After a sweep: its frontier, where its MLflow runs are, the timing of its controls."""
    from orchestrator.analysis.export import recommendation
    from orchestrator.analysis.summary import failure_lines, frontier_rows
    from orchestrator.analysis.timing import describe, timing_report
    from orchestrator.sweep.runs import ui_link
    from orchestrator.sweep.tracking import trial_run_ids

    rows = frontier_rows(spec, study, trial_run_ids(study))
    console.print(_table(f"frontier of {spec.name} ({len(rows)} trials; {seconds:.0f} s)", spec, rows))
    if rows:
        console.print(f"which to deploy (the fastest at each batch size or concurrency and accuracy floor; "
                      f"specsweep export {spec.name} --out DIR writes these files):", markup=False,
                      highlight=False)
        for line in recommendation(spec, rows):  # whole, not wrapped: a line a file to deploy
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    uri, recorder = driver.tracking_uri, driver.recorder
    link = ui_link(uri if uri.startswith("http") else "http://127.0.0.1:5000", recorder.tracker.experiment_id)
    serve = "" if uri.startswith("http") else (
        f"serve it (make mlflow, or mlflow server --backend-store-uri {uri}), then ")
    console.print(f"MLflow: {uri} (experiment {spec.tracking.experiment or spec.name}, parent run "
                  f"{recorder.parent_run}); browse: {serve}open {link}")
    for line in describe(timing_report(study)):
        console.print(line)
    for line in failure_lines(study):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if driver.progress.note:
        console.print(driver.progress.note)


def _sustained_table(results: list[dict]):
    """`specsweep sustain`'s results, highest sustained rate first: each setting's highest
    rate whose loads all met the SLO, the lowest that missed it, the rates probed."""
    from rich import box
    from rich.table import Table

    first = results[0]
    table = Table(title=f"sustained rates within {first['slo']} ({first['repeats']} loads a rate; above the "
                  f"rate met half the time with chance <= {first['overshoot_bound']:.3g}, a quarter "
                  f"<= {first['overshoot_bound_quarter']:.3g})", box=box.SIMPLE_HEAD, pad_edge=False,
                  show_edge=False, collapse_padding=True)
    for col in ("setting", "sustained req/s", "missed at", "probes", "seconds"):
        table.add_column(col, justify="left" if col == "setting" else "right", no_wrap=True)
    for r in sorted(results, key=lambda r: -(r["sustained_rate"] or 0.0)):
        rates = (f"{r[k]:.3g}" if r[k] is not None else "-" for k in ("sustained_rate", "failed_rate"))
        table.add_row(r["label"] + (" (cut short)" if "error" in r else ""), *rates,
                      str(len(r["probes"])), f"{r['engine_s']:.0f}")
    return table


@user_errors
def status(
    name: str = typer.Argument(..., metavar="SWEEP"),
    root: Path = ROOT,
    reference: str = typer.Option(
        "worst", "--reference", help="Hypervolume reference: worst | ar | ar:PAIR."
    ),
    as_json: bool = typer.Option(False, "--json", help="Trials by state, engine_seconds, server_starts "
                                 "and server_start_s as one JSON object."),
) -> None:
    """Trials finished, failed and in flight; baselines; frontier size; what it cost (engine-seconds,
    serving-engine server starts); where results are."""
    from orchestrator.analysis.summary import server_starts, status_json, status_lines
    from orchestrator.sweep.study import journal_cut, load_sweep, state_dir

    spec, study = load_sweep(root, name)
    directory = state_dir(root, name)
    starts = server_starts(directory / "shards")
    if as_json:
        typer.echo(json.dumps(status_json(spec, study, starts)))
        return
    for line in status_lines(spec, study, reference, journal_cut(directory), starts):
        typer.echo(line)


@user_errors
def frontier_cmd(
    name: str = typer.Argument(..., metavar="SWEEP"),
    root: Path = ROOT,
    as_json: bool = typer.Option(False, "--json"),
    batch_size: int = typer.Option(None, "--batch-size", min=1,
                                   help="Only the frontier at this batch size (default: each one's)."),
    predict_vllm: str = typer.Option(None, "--predict-vllm", metavar="SERVING_SWEEP",
                                     help="Add each drafting row's vLLM speed per concurrency, predicted "
                                     "from this vLLM sweep of the pair (its ratio and the model's error)."),
) -> None:
    """The frontier trials (one frontier per batch size): params, metrics, MLflow run ids; with
    --predict-vllm, each drafting row's predicted vLLM ratio against no speculation per
    concurrency, ± the model's largest leave-one-out error there (`predicted_vllm` in --json)."""
    from rich.console import Console

    from orchestrator.analysis.summary import frontier_rows
    from orchestrator.spec.space import batch_sizes
    from orchestrator.sweep.study import load_sweep, state_dir
    from orchestrator.sweep.sustain import load_results
    from orchestrator.sweep.tracking import trial_run_ids

    spec, study = load_sweep(root, name)
    if batch_size is not None and batch_size not in batch_sizes(spec):
        raise ValueError(f"--batch-size: {batch_size} is not a batch size of sweep {name} "
                         f"({', '.join(map(str, batch_sizes(spec)))})")
    rows = frontier_rows(spec, study, trial_run_ids(study), batch_size)
    if predict_vllm is not None:
        from orchestrator.analysis.prediction import load_predictor

        predictor = load_predictor(load_sweep(root, predict_vllm)[1], predict_vllm, "--predict-vllm")
        for row in rows:
            kind = spec.pair_kinds.get(row["pair"])
            found = kind and predictor.of(kind, row["config"], row["metrics"])
            if found:
                row["predicted_vllm"] = found
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    at = f" at batch size {batch_size}" if batch_size is not None else ""
    console = Console()
    console.print(_table(f"frontier of {name}{at}", spec, rows))
    sustained = load_results(state_dir(root, name))
    if sustained:
        console.print(_sustained_table(sustained))


@user_errors
def export(
    name: str = typer.Argument(..., metavar="SWEEP"),
    out: Path = typer.Option(..., "--out", help="Directory for the exported configs."),
    where: str = typer.Option(None, "--where", help="Filter, e.g. 'accuracy >= 0.9 * ar.accuracy'."),
    pick: str = typer.Option("all", "--pick", help="all | fastest | most-accurate | knee"),
    floors: str = typer.Option("0.5,0.75,0.9,0.95,0.99", "--floors", help="Accuracy floors for routes.yaml."),
    force: bool = typer.Option(False, "--force", help="Write into a directory that already holds files."),
    verify_vllm: int = typer.Option(0, "--verify-vllm", min=0, metavar="N",
                                    help="Load each exported vLLM setting in vLLM (`make vllm`) and decode "
                                    "the trial's first N prompts: tokens and drafts as measured."),
    check_sglang: bool = typer.Option(False, "--check-sglang",
                                      help="Read each export's SGLang flags with SGLang's own argument "
                                      "parser (`make vllm` sets it up) and write what it read into the "
                                      "file."),
    predict_vllm: str = typer.Option(None, "--predict-vllm", metavar="SERVING_SWEEP",
                                     help="Write into each config vLLM has no setting for its vLLM speed "
                                     "predicted from this vLLM sweep of the pair (marked predicted)."),
    check_schedule: int = typer.Option(0, "--check-schedule", min=0, max=MAX_REPEATS, metavar="R",
                                       help="Serve by_batch_size.yaml's drafts schedule in vLLM at both "
                                       "sides of each switch against the other n, R loads each; refuse "
                                       "(merge) a switch the schedule loses at."),
    root: Path = ROOT,
) -> None:
    """Write the chosen frontier configs (one YAML each, chosen per batch size), routes.yaml,
    by_batch_size.yaml and the plots, print which to deploy, then run the checks asked for;
    exit code 1 when vLLM or SGLang reads an export otherwise than meant."""
    from orchestrator.analysis import export as exported
    from orchestrator.analysis.checks import ExportChecks
    from orchestrator.analysis.summary import all_failed, frontier_rows
    from orchestrator.sweep.study import SweepError, load_sweep, state_dir
    from orchestrator.sweep.tracking import trial_run_ids

    levels = exported.parse_floors(floors)
    if where is not None:
        exported.parse_where(where)
    predictor = None
    if predict_vllm is not None:
        from orchestrator.analysis.prediction import load_predictor

        predictor = load_predictor(load_sweep(root, predict_vllm)[1], predict_vllm, "--predict-vllm")
    checks = ExportChecks(verify_vllm, check_sglang, check_schedule, predictor)
    checks.ready()  # before anything is written
    exported.check_out(out, force)
    spec, study = load_sweep(root, name)
    rows = frontier_rows(spec, study, trial_run_ids(study))
    if not rows:
        raise SweepError(f"sweep {name!r} has no frontier config to export: "
                         + (all_failed(study) or "no trial has finished") + f" (specsweep status {name})")
    paths = exported.export_configs(spec, study, rows, out, where, pick, levels)
    if not paths:
        print(f"error: no frontier config matches --where {where!r}", file=sys.stderr)
        raise typer.Exit(1)
    typer.echo("\n".join(map(str, paths)))
    typer.echo(f"which to deploy (as {out / 'routes.yaml'}: the fastest at each batch size or concurrency "
               "and accuracy floor):")
    for line in exported.recommendation(spec, exported.matching(study, rows, where), levels, f"{out}/"):
        typer.echo(f"  {line}")
    logs = state_dir(root, name) / "logs"
    if not checks.run(out, paths, study.user_attrs.get("tracking_uri"), logs, typer.echo):
        raise typer.Exit(1)
