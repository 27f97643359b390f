"""MLflow tracking, written only by the driver: a parent run per sweep, a nested run per trial.

Each trial's logging is one unit of steps (create the run, log params/metrics/tags in one
batch, the per-prompt table, its small JSON documents, terminate). A unit that fails midway
(tracking server down) stays queued and resumes from the step that failed, so a retry never
duplicates a run; `flush` retries the queue, and what is still unsent at the end is saved to
a file that the next `--resume` replays. After `start_background()` a thread of the driver
sends the queue, so logging never holds up handing shards to workers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# MLflow's defaults (120 s per request, 7 retries with doubling pauses) stall a sweep for
# minutes on a dead server; a call now fails within about 2 * 15 + 2 s and the logs queue.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
# MLflow's store logs a traceback for each database error it raises; the tracker reports them
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from orchestrator.files import write_atomic  # noqa: E402
from orchestrator.stored import (  # noqa: E402
    RECORDS,  # noqa: E402
    sqlite_path,
    store_client,
)

REFUSALS = ("INVALID_PARAMETER_VALUE", "BAD_REQUEST", "RESOURCE_ALREADY_EXISTS")  # MLflow error codes


def default_uri(state_root: Path) -> str:
    """A local sqlite store next to the sweep state (file stores are refused by MLflow 3)."""
    return f"sqlite:///{(state_root / 'mlflow.db').resolve()}"


SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")
REACH_S = 5.0  # how long a sweep waits for a tracking server or a Ray head before saying so


def check_reachable(uri: str, timeout: float = REACH_S) -> None:
    """Refuse a tracking URI MLflow cannot use, or a server that does not answer, before a
    sweep writes any state (ValueError naming the URI and how long it waited)."""
    import urllib.error
    import urllib.request

    scheme = uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else ""
    if scheme not in SCHEMES:
        known = ", ".join(SCHEMES)
        raise ValueError(f"tracking: {uri!r} is not a tracking URI MLflow 3 takes; use "
                         f"sqlite:////abs/path.db, http(s)://host:port or a database URL ({known})")
    if uri.startswith("sqlite:///"):
        _check_store_path(uri)
    if scheme not in ("http", "https"):
        return
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout).close()
    except urllib.error.HTTPError:
        return  # it answered (auth or an older server without /health)
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise ValueError(f"tracking: cannot reach the tracking server at {uri} (waited {timeout:g} s: "
                         f"{reason})") from None


def _check_store_path(uri: str) -> None:
    """Refuse a sqlite store whose folder cannot be made: MLflow makes it (parents included)
    only once the sweep state exists. The nearest existing folder is probed with a temporary
    folder, removed at once, since permission bits do not tell (root, read-only mounts)."""
    import tempfile

    path = sqlite_path(uri)
    if path is None or path.name in ("", ":memory:"):
        return
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        if not folder.is_dir():
            raise NotADirectoryError(20, f"{folder} is not a directory")
        os.rmdir(tempfile.mkdtemp(dir=folder))
    except OSError as err:
        raise ValueError(f"tracking: cannot create the store {path} ({err.strerror or err})") from None


MODEL_DEVELOPMENT = "custom_model_development"


def shown(value: float) -> float:
    """`value` to 4 significant digits, its integer part whole: round(v, max(0, 3 − ⌊log10 |v|⌋)).
    MLflow's UI prints a metric as logged (0.7083333333...) and has no display format, so a
    trial run's metrics are logged so; the study and the exports keep them exact."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(0, 3 - math.floor(math.log10(abs(value)))))


class TrackingError(ValueError):
    """The tracking server stopped answering a call on the sweep's parent run."""


@dataclass
class TrialLog:
    """Everything one nested run holds; `run_id` is set once the run exists."""

    name: str
    tags: dict[str, str]
    params: dict[str, object]
    metrics: dict[str, float]
    table: list[dict]
    status: str  # FINISHED | FAILED
    start_ms: int
    end_ms: int
    run_id: str | None = None
    steps_done: list[str] = field(default_factory=list)
    series: dict[str, list[float]] = field(default_factory=dict)  # metric -> its values at steps 1, 2, ...
    documents: dict[str, dict] = field(default_factory=dict)  # artifact file name -> its JSON


def root_cause(err: BaseException) -> str:
    """The first line of the innermost cause of `err` (sqlite's "database or disk is full",
    not SQLAlchemy's wrapping of it), at most 200 characters."""
    while err.__cause__ is not None:
        err = err.__cause__
    return (str(err).splitlines() or [type(err).__name__])[0][:200]


def refused(err: Exception) -> bool:
    """Whether MLflow refused a call on its content (a metric or param name or value it does
    not accept), which sending again cannot mend, rather than failed to answer."""
    return isinstance(err, MlflowException) and err.error_code in REFUSALS


class Tracker:
    def __init__(self, uri: str, experiment: str, artifact_root: Path, pending_file: Path):
        self.uri = uri
        self.client = store_client(uri)
        self.pending_file = pending_file
        self.queue: list[TrialLog] = []
        self._lock = threading.Lock()  # one sender at a time: the background thread or flush
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.failing = False  # the last send of the trial queue failed
        self.refused: TrackingError | None = None  # a run MLflow refused (not an outage): raised
        found = self.client.get_experiment_by_name(experiment)
        if found is not None:
            self.experiment_id = found.experiment_id
        else:
            location = (
                artifact_root.resolve().as_uri() if "://" not in uri or uri.startswith("sqlite") else None
            )
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=location)
        # MLflow 3's UI opens other experiments on its GenAI page, with no runs in sight
        self.client.set_experiment_tag(self.experiment_id, "mlflow.experimentKind", MODEL_DEVELOPMENT)
        if pending_file.is_file():  # left over from an earlier session
            self.queue = [
                TrialLog(**json.loads(line)) for line in pending_file.read_text().splitlines() if line
            ]
            pending_file.unlink()

    def set_view(self, key: str, state: str) -> None:
        """Store a shared view of the experiment for the MLflow UI."""
        self.client.set_experiment_tag(self.experiment_id, f"mlflow.sharedViewState.{key}", state)

    def start_sweep(self, name: str, spec_yaml: str, run_id: str | None = None) -> str:
        """Create the sweep's parent run, or reopen `run_id` when resuming."""
        if run_id is not None:
            self.client.update_run(run_id, status="RUNNING")
            return run_id
        run = self.client.create_run(
            self.experiment_id, run_name=name, tags={"specsweep.role": "sweep", "specsweep.sweep": name}
        )
        self.client.log_text(run.info.run_id, spec_yaml, "spec.yaml")
        return run.info.run_id

    def _on_parent(self, what: str, call, *args, **kwargs):
        """One call for the parent run, returning what it returns; a server that fails it is
        one TrackingError naming the URI (what the parent run lacks is redone by `--resume`,
        which ends it again)."""
        started = time.monotonic()
        with self._lock:
            try:
                return call(*args, **kwargs)
            except Exception as err:
                reason = root_cause(err)
                raise TrackingError(
                    f"tracking: the tracking server at {self.uri} failed to {what} after "
                    f"{time.monotonic() - started:.0f} s ({reason}); the sweep's state is kept: "
                    "rerun with --resume once it answers") from None

    def trial_runs(self, parent: str) -> dict:
        with self._lock:
            return trial_runs(self.client, parent)

    def end_sweep(self, run_id: str, status: str) -> None:
        self._on_parent(f"end the sweep's run as {status}", self.client.set_terminated, run_id, status=status)

    def discard_sweep(self, run_id: str) -> None:
        """Delete the sweep's parent run and the runs logged under it, unsent ones dropped
        (a new sweep that failed before its trials)."""
        self.stop_background()
        self.queue.clear()

        def delete() -> None:
            for run in self.client.search_runs([self.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'"):
                self.client.delete_run(run.info.run_id)
            self.client.set_terminated(run_id, status="FAILED")  # not RUNNING, even in the bin
            self.client.delete_run(run_id)

        self._on_parent("delete the sweep's run", delete)

    def attach(self, run_id: str, path: Path, folder: str) -> None:
        self._on_parent(f"store {path.name}", self.client.log_artifact, run_id, str(path), folder)

    def tag_sweep(self, run_id: str, key: str, value: str) -> None:
        self._on_parent(f"tag the sweep's run with {key}", self.client.set_tag, run_id, key, value)

    def series(self, run_id: str, key: str) -> list[float]:
        """A run's values of the metric `key` in step order ([] when it has none)."""
        history = self._on_parent(f"read {key} of run {run_id}", self.client.get_metric_history, run_id, key)
        return [m.value for m in sorted(history, key=lambda m: m.step)]

    def log_sweep_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        self._on_parent("log the sweep's metrics", self.client.log_batch, run_id,
                        metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])

    def log_trial(self, log: TrialLog) -> None:
        if self.refused is not None:
            raise self.refused
        self.queue.append(log)
        if self._thread is not None:
            self._wake.set()
        else:
            self.flush(retries=1)

    def start_background(self) -> None:
        self._thread = threading.Thread(target=self._background, name="mlflow-sender", daemon=True)
        self._thread.start()

    def _background(self) -> None:
        backoff = 0.5
        while self._thread is not None:
            self._wake.wait(backoff)
            self._wake.clear()
            backoff = 0.5 if self._send_queue() else min(backoff * 2, 10.0)

    def stop_background(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._wake.set()
            thread.join()

    def _send_queue(self) -> bool:
        """One pass over the queue; True when it is empty afterwards."""
        with self._lock:
            while self.queue:
                try:
                    self._send(self.queue[0])
                except Exception as err:
                    if not refused(err):  # server down, timeouts: keep it queued, try again later
                        self.failing = True
                        return False
                    log = self.queue.pop(0)  # it would block every run queued after it
                    reason = root_cause(err)
                    if log.run_id is not None:  # created before MLflow refused what it logged
                        with contextlib.suppress(Exception):
                            self.client.set_terminated(log.run_id, status="FAILED", end_time=log.end_ms)
                    self.refused = TrackingError(f"tracking: MLflow refused run {log.name!r} ({reason}); "
                                                 "it is not logged, and the sweep's state is kept")
                    continue
                self.queue.pop(0)
            self.failing = False
            return True

    def _send(self, log: TrialLog) -> None:
        if log.run_id is None:
            run = self.client.create_run(
                self.experiment_id, run_name=log.name, start_time=log.start_ms, tags=log.tags
            )
            log.run_id = run.info.run_id
        if "batch" not in log.steps_done:
            self.client.log_batch(
                log.run_id,
                metrics=[Metric(k, shown(float(v)), log.end_ms, 0) for k, v in sorted(log.metrics.items())]
                + [Metric(k, shown(float(v)), log.end_ms, step) for k, values in sorted(log.series.items())
                   for step, v in enumerate(values, start=1)],
                params=[Param(k, str(v)) for k, v in sorted(log.params.items())],
            )
            log.steps_done.append("batch")
        if "table" not in log.steps_done:
            text = "".join(json.dumps(row) + "\n" for row in log.table)
            self.client.log_text(log.run_id, text, RECORDS)
            log.steps_done.append("table")
        if "documents" not in log.steps_done:
            for name, document in sorted(log.documents.items()):
                self.client.log_text(log.run_id, json.dumps(document), name)
                if "accept_len_hist" in document:  # and as a picture, on the run's page
                    picture = name.removesuffix(".json") + ".png"
                    self._picture(log.run_id, document["accept_len_hist"], picture)
            log.steps_done.append("documents")
        self.client.set_terminated(log.run_id, status=log.status, end_time=log.end_ms)

    def _picture(self, run_id: str, hist: list[int], name: str) -> None:
        import matplotlib.pyplot as plt

        from orchestrator.analysis.plots import accept_len_figure

        figure = accept_len_figure(hist, "accept-length histogram")
        try:
            self.client.log_figure(run_id, figure, name)
        finally:
            plt.close(figure)

    def tag_runs(self, tags: dict[str, dict[str, str]]) -> None:
        """Set tags on many runs (run id -> its tags), one call a run."""
        for run_id, values in tags.items():
            self._on_parent("tag the trial runs", self.client.log_batch, run_id,
                            tags=[RunTag(k, v) for k, v in values.items()])

    def describe_categories(self, run_id: str, renamed: dict[str, str]) -> None:
        """The category labels of the data renamed in metric names, on the sweep's run
        (categories.json: label -> name)."""
        self._on_parent("log the category names", self.client.log_text, run_id,
                        json.dumps(renamed, indent=1, ensure_ascii=False), "categories.json")

    def describe(self, run_id: str, text: str) -> None:
        """The description the MLflow UI shows on the experiment's page and the sweep's run."""
        self._on_parent("describe the sweep", self.client.set_experiment_tag, self.experiment_id,
                        "mlflow.note.content", text)
        self.tag_sweep(run_id, "mlflow.note.content", text)

    def flush(self, retries: int = 3, wait_s: float = 1.0) -> bool:
        """Send what is queued, trying `retries` times with growing pauses; True when the
        queue is empty."""
        for attempt in range(retries):
            sent = self._send_queue()
            if self.refused is not None:
                raise self.refused
            if sent:
                return True
            if attempt + 1 < retries:
                time.sleep(wait_s * (attempt + 1))
        return False

    def save_pending(self) -> int:
        """Write unsent trial logs for the next session; returns how many."""
        if self.queue:
            self.pending_file.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.pending_file, "".join(json.dumps(log.__dict__) + "\n" for log in self.queue))
        return len(self.queue)


def trial_runs(client: MlflowClient, parent: str) -> dict:
    """Trial number -> MLflow Run, from the trial runs under the sweep's parent run (the
    driver logs runs after tell, so the study does not hold them)."""
    experiment = client.get_run(parent).info.experiment_id
    runs = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent}'", max_results=50000)
    return {int(r.data.tags["specsweep.trial"]): r for r in runs if "specsweep.trial" in r.data.tags}


def trial_run_ids(study) -> dict[int, str]:
    """Trial number -> MLflow run id of a sweep's study ({} before it has a parent run)."""
    uri, parent = study.user_attrs.get("tracking_uri"), study.user_attrs.get("parent_run")
    if not uri or not parent:
        return {}
    return {n: run.info.run_id for n, run in trial_runs(store_client(uri), parent).items()}
