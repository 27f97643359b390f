"""What each MLflow run of a sweep is called and holds. A trial's run is named for its
configuration (`toy linear B4 K1 lossless`, `toy-self packed B8 λ0.5`), a baseline's for
its kind (`toy ar baseline`), so the run list reads without opening a run; a run that
verified drafts also holds its acceptance by draft position (`acceptance_rate_pos`, step i
= position i, and ACCEPTANCE: the accept-length histogram); the parent run carries the
sweep's summary: frontier table (CSV and HTML), plots and timing report."""

from __future__ import annotations

import csv
import html
import io
import json
import time
from pathlib import Path

from orchestrator.analysis.metrics import acceptance_by_position
from orchestrator.engines import engine_of
from orchestrator.files import write_atomic
from orchestrator.sweep.tracking import TrialLog


def run_name(pair: str, config: dict, baseline: str | None = None, batch_size: int = 1) -> str:
    """`<pair> <schedule> B<block> <K or τ> <rule and λ/δ>[ T<temperature>][ b<batch size>]`
    (under vLLM `<pair> vllm <method>[ n<drafts>] lossless[ b<concurrency>]`), or `<pair>
    <kind> baseline[ b<batch size>]` (the batch size shown above 1)."""
    batch = f" b{batch_size}" if batch_size > 1 else ""
    if baseline:
        return f"{pair} {baseline} baseline{batch}"
    shown = engine_of(config).columns(config)
    parts = [pair, shown["schedule"]]
    if shown["block"] != "-":
        parts.append(f"B{shown['block']}")
    if shown["effort"] != "-":
        parts.append(shown["effort"].replace("=", ""))
    rule, lenient = shown["rule"], shown["leniency"]
    parts.append({"lossless": "lossless", "linear": f"λ{lenient:g}", "cactus": f"δ{lenient:g}",
                  "match": f"match λ{lenient:g}"}[rule])
    if config.get("temperature"):
        parts.append(f"T{config['temperature']:g}")
    if batch:
        parts.append(batch.strip())
    return " ".join(parts)


def engine_tags(results) -> dict:
    """The tags naming what the plugin (`infra/vllm/plugin`) did on runs whose servers needed
    it (the vLLM code it patched for a kernel defect of this machine's vLLM, and the V1 port
    that drafted where this vLLM drafts only in its V2 runner: DSpark, DFlash 2 on CPU), and the
    non-default arguments the measured server logged (`specsweep.vllm_args`, JSON), which an
    export's `vllm serve --config` file is held to."""
    reports = [out.get("engine_report") or {} for out in results]
    patched = sorted({p for report in reports for p in report.get("patched", [])})
    ported = sorted({report["drafter"] for report in reports if report.get("drafter")})
    args = next((report["engine_args"] for report in reports if report.get("engine_args")), None)
    return ({"specsweep.vllm_workaround": "rms_norm per layer: " + ",".join(patched)} if patched else {}) \
        | ({"specsweep.vllm_v1_port": ",".join(ported)} if ported else {}) \
        | ({"specsweep.vllm_args": json.dumps(args, sort_keys=True)} if args else {})


def trial_params(pair: str, kind: str, config: dict, task, batch_size: int = 1) -> dict:
    """The run's params: the decode config (seed dropped: it is per prompt) with its pair,
    batch size and task."""
    params = {"engine": engine_of(config).name, **{k: v for k, v in config.items() if k != "seed"}}
    params["stop"] = ",".join(params["stop"])
    return {**params, "batch_size": batch_size, "pair": pair, "pair_kind": kind, "task": task.name,
            "task_limit": task.limit, "task_seed": task.seed}


ACCEPTANCE = "accept_len_hist.json"  # a trial run's artifact: analysis.metrics.acceptance_by_position


def trial_log(spec, parent_run: str, pair_kind: str, job, metrics: dict, tags: dict, table: list[dict],
              status: str) -> TrialLog:
    """The nested run of a finished job (trial or baseline) under the sweep's parent run."""
    pair, config = job.candidate.pair, job.candidate.config.to_dict()
    results = job.results.values()
    acceptance = acceptance_by_position(table)
    return TrialLog(
        name=run_name(pair, config, tags.get("specsweep.baseline"), job.candidate.batch_size),
        tags={"specsweep.sweep": spec.name, "mlflow.parentRunId": parent_run, "specsweep.role": "trial",
              "specsweep.pair": pair, "specsweep.exact": str(job.candidate.config.exact).lower(),
              "specsweep.gpu": ",".join(sorted({out.get("gpu", "") for out in results})),
              **engine_tags(results),
              "specsweep.nodes": ",".join(sorted({out["node"] for out in results})), **tags},
        params=trial_params(pair, pair_kind, config, spec.task, job.candidate.batch_size),
        metrics=metrics, table=table, status=status,
        start_ms=int(job.start * 1000), end_ms=int(time.time() * 1000),
        series={"acceptance_rate_pos": acceptance["acceptance_rate_pos"]} if acceptance else {},
        documents={ACCEPTANCE: acceptance} if acceptance else {})


VIEW = "specsweep"  # the experiment's shared view: its key in the UI's ?viewStateShareKey=
SHOWN_METRICS = ("throughput_ratio", "mean_accept_len", "tokens_per_nfe", "latency_s")
SHOWN_PARAMS = ("pair", "batch_size", "schedule", "block", "steps", "threshold", "rule", "leniency",
                "temperature", "method", "num_speculative_tokens", "concurrency")


def shared_view(spec) -> str:
    """The MLflow UI's shared view state (an experiment tag `mlflow.sharedViewState.<VIEW>`,
    JSON): trial and baseline runs only, so they are not folded under the parent run, with
    the frontier mark (and feasibility under constraints), the objectives, the main metrics
    and the config as columns, frontier runs first."""
    metrics = [*spec.objectives, *(m for m in SHOWN_METRICS if m not in spec.objectives)]
    marks = ["tags.`specsweep.frontier`", *(["tags.`specsweep.feasible`"] if spec.constraints else [])]
    columns = [*marks, *(f"metrics.`{m}`" for m in metrics), *(f"params.`{p}`" for p in SHOWN_PARAMS),
               "tags.`specsweep.exact`", "attributes.`Duration`"]
    return json.dumps({
        "searchFilter": "tags.`specsweep.role` = 'trial'",
        "orderByKey": "tags.`specsweep.frontier`", "orderByAsc": False,  # yes before no
        # the UI groups columns by kind (tags last) unless an order is given: the marks first
        "selectedColumns": columns, "columnOrder": columns,
        "columnWidths": dict.fromkeys(marks, 140)})


def ui_link(server: str, experiment_id: str) -> str:
    """The experiment's runs in the MLflow UI at `server`, in the shared view, as model
    training (MLflow 3's UI otherwise opens on its GenAI pages, whatever the experiment)."""
    return (f"{server.rstrip('/')}/#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW}"
            "&workflowType=machine_learning")


def run_link(server: str, experiment_id: str, run_id: str, artifact: str = "") -> str:
    """A run's page (or one of its artifacts) in the MLflow UI at `server`, as model training:
    the UI keeps the GenAI/model-training choice per browser, GenAI by default."""
    page = f"/artifacts/{artifact}" if artifact else ""
    return (f"{server.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}{page}"
            "?workflowType=machine_learning")


COLUMNS = ("trial", "run", "pair", "batch_size", "schedule", "block", "effort", "rule", "leniency", "exact",
           "tied")


def log_summary(tracker, run: str, spec, study, folder: Path) -> list[str]:
    """The parent run's summary: drift and cost metrics, a tag naming the trials whose timing
    was flagged, the frontier tags and the description first (the results); then its files,
    each best-effort: the timing report (`folder/timing.json`), the frontier table, the plots.
    The acceptance plot draws the frontier trials' `acceptance_rate_pos` as their runs logged
    it (a trial whose log is still queued for --resume is left out). Returns what could not be
    written (a full disk), one phrase each."""
    from orchestrator.analysis.plots import acceptance_figure, save, sweep_plots
    from orchestrator.analysis.summary import frontier_rows, sweep_cost
    from orchestrator.analysis.timing import flagged, timing_report

    runs = tracker.trial_runs(run)
    rows = frontier_rows(spec, study, {n: r.info.run_id for n, r in runs.items()})
    report = timing_report(study)
    tracker.log_sweep_metrics(run, {
        **{f"{name}.{pair}": d[name] for pair, d in report["drift"].items()
           for name in ("drift", "baseline_vs_controls") if name in d},
        **{f"cost.{name}": value for name, value in sweep_cost(study).items()}})
    noisy = sorted(flagged(report))
    if noisy:
        tracker.tag_sweep(run, "specsweep.timing_flagged", ",".join(map(str, noisy)))
    tracker.tag_runs(decision_tags(spec, study, runs, {r["trial"] for r in rows}))
    tracker.describe(run, description(spec, len(rows)))
    unwritten: list[str] = []

    def attached(what: str, write, folder_in_run: str) -> None:
        try:
            for path in write():
                tracker.attach(run, path, folder_in_run)
        except OSError as err:
            unwritten.append(f"{what} ({err.strerror or err})")

    def timing() -> list[Path]:
        write_atomic(folder / "timing.json", json.dumps(report, indent=1))
        return [folder / "timing.json"]

    def acceptance() -> list[Path]:
        curves = {}
        for n in sorted({r["trial"] for r in rows} & runs.keys()):
            rates = tracker.series(runs[n].info.run_id, "acceptance_rate_pos")
            if rates:
                curves[f"trial {n}: {runs[n].info.run_name}"] = rates
        if not curves:
            return []
        figure = acceptance_figure(curves, f"{spec.name}: acceptance by draft position, frontier trials")
        return [save(figure, folder / "plots" / "acceptance.png")]

    table = frontier_table(spec, rows, {n: r.info.run_name for n, r in runs.items()})
    attached("the timing report", timing, "")
    attached("the frontier table", lambda: write_frontier(spec, table, folder), "")
    attached("the plots", lambda: sweep_plots(spec, study, folder / "plots"), "plots")
    attached("the acceptance plot", acceptance, "plots")
    return unwritten


def decision_tags(spec, study, runs: dict, frontier: set[int]) -> dict[str, dict[str, str]]:
    """Run id -> `specsweep.frontier` (yes | no) and, under constraints, `specsweep.feasible`
    (yes when every constraint holds: each value <= 0, Optuna's convention) of each trial run,
    so the runs table marks the decision in a column."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    tags = {}
    for number, run in runs.items():
        values = {"specsweep.frontier": "yes" if number in frontier else "no"}
        constraints = trials[number].user_attrs.get("constraints") if number in trials else None
        if spec.constraints and constraints is not None:
            values["specsweep.feasible"] = "yes" if all(c <= 0 for c in constraints) else "no"
        tags[run.info.run_id] = values
    return tags


def description(spec, frontier: int) -> str:
    """The experiment's and the sweep run's description in the MLflow UI (markdown)."""
    objectives = ", ".join(f"{m} ({d})" for m, d in spec.objectives.items())
    constraints = "; ".join(spec.constraints) or "none"
    return (f"**specsweep sweep `{spec.name}`**: {len(spec.pairs)} pair(s) on task `{spec.task.name}`; "
            f"objectives {objectives}; constraints {constraints}. {frontier} trial(s) on the frontier: the "
            "column `specsweep.frontier` marks them (`specsweep.feasible`: the constraints hold). Each trial "
            "run holds its per-prompt records (`prompts.jsonl`) and its accept-length histogram "
            "(`accept_len_hist.png`). `specsweep export` writes the configurations to deploy.")


def frontier_table(spec, rows: list[dict], names: dict[int, str]) -> list[dict]:
    """One flat dict per frontier row (analysis.summary.frontier_rows), objectives as
    columns, for the parent run's CSV and HTML."""
    out = []
    for r in rows:
        out.append({"trial": r["trial"], "run": names.get(r["trial"], ""), "pair": r["pair"],
                    "batch_size": r.get("batch_size", 1), **engine_of(r["config"]).columns(r["config"]),
                    "exact": r["exact"],
                    "tied": r.get("tied", False),
                    **{m: r["objectives"][m] for m in spec.objectives}, "run_id": r.get("run_id") or ""})
    return out


def write_frontier(spec, table: list[dict], folder: Path) -> list[Path]:
    """frontier.csv and frontier.html (a plain table) in `folder`."""
    columns = [*COLUMNS, *spec.objectives, "run_id"]
    text = io.StringIO()
    writer = csv.DictWriter(text, columns)
    writer.writeheader()
    writer.writerows(table)
    write_atomic(folder / "frontier.csv", text.getvalue())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns[:-1])
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(row, c)}</td>" for c in columns[:-1]) + "</tr>" for row in table)
    page = (f"<!doctype html><meta charset=utf-8><title>{html.escape(spec.name)} frontier</title>"
            "<style>body{font-family:sans-serif}"
            "td,th{padding:2px 8px;text-align:right;white-space:nowrap}</style>"
            f"<h3>{html.escape(spec.name)}: frontier on {html.escape(', '.join(spec.objectives))}</h3>"
            f"<table><tr>{head}</tr>{body}</table>")
    write_atomic(folder / "frontier.html", page)
    return [folder / "frontier.csv", folder / "frontier.html"]


def _cell(row: dict, column: str) -> str:
    value = row[column]
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(json.dumps(value) if isinstance(value, bool) else str(value))
