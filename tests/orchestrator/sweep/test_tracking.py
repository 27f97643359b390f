"""Trial logs survive a tracking store that is briefly unreachable: queued, retried from the
step that failed, never duplicated; what stays unsent is saved and replayed next session."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.sweep.tracking import Tracker, TrackingError, TrialLog, shown
from workloads.serving.ports import free_port

pytestmark = pytest.mark.slow  # real sweeps against MLflow servers


def log(name):
    now = int(time.time() * 1000)
    return TrialLog(name=name, tags={"specsweep.role": "trial", "specsweep.trial": name}, params={"block": 4},
                    metrics={"accuracy": 0.5}, table=[{"index": 0, "text": "x"}], status="FINISHED",
                    start_ms=now, end_ms=now)


class Flaky:
    """Wraps an MlflowClient; the named method raises `failures` times, then works."""

    def __init__(self, client, method, failures):
        self.client, self.method, self.failures = client, method, failures

    def __getattr__(self, name):
        real = getattr(self.client, name)
        if name != self.method:
            return real

        def call(*args, **kwargs):
            if self.failures > 0:
                self.failures -= 1
                raise ConnectionError("tracking server down")
            return real(*args, **kwargs)

        return call


def tracker(tmp_path):
    db = f"sqlite:///{tmp_path / 'm.db'}"
    return Tracker(db, "exp", tmp_path / "artifacts", tmp_path / "pending.jsonl")


def trial_runs(t):
    client = MlflowClient(t.uri)
    return client.search_runs([t.experiment_id], "tags.`specsweep.role` = 'trial'")


def test_outage_midway_resumes_without_duplicates(tmp_path):
    t = tracker(tmp_path)
    t.client = Flaky(t.client, "log_batch", failures=2)  # the run exists, its batch fails twice
    t.log_trial(log("0"))
    assert len(t.queue) == 1
    assert t.flush(retries=3, wait_s=0.01)
    runs = trial_runs(t)
    assert len(runs) == 1 and runs[0].data.metrics == {"accuracy": 0.5} and runs[0].info.status == "FINISHED"


def test_a_series_is_logged_one_step_a_value_and_documents_as_json_files(tmp_path):
    t = tracker(tmp_path)
    entry = log("2")
    entry.series = {"acceptance_rate_pos": [0.75, 0.5, 0.25]}
    entry.documents = {"accept_len_hist.json": {"accept_len_hist": [1, 1, 1, 1]}}
    t.log_trial(entry)
    client = MlflowClient(t.uri)
    history = client.get_metric_history(entry.run_id, "acceptance_rate_pos")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.75), (2, 0.5), (3, 0.25)]
    stored = client.download_artifacts(entry.run_id, "accept_len_hist.json", str(tmp_path))
    assert json.loads(Path(stored).read_text()) == {"accept_len_hist": [1, 1, 1, 1]}


def test_metrics_are_logged_to_four_significant_digits_keeping_their_integer_part(tmp_path):
    t = tracker(tmp_path)
    entry = log("3")
    entry.metrics = {"accuracy": 0.708333333, "throughput_tps": 12345.678, "tokens": 97.0,
                     "drift": -0.0012346}
    entry.series = {"acceptance_rate_pos": [2 / 3]}
    t.log_trial(entry)
    client = MlflowClient(t.uri)
    assert client.get_run(entry.run_id).data.metrics == {
        "accuracy": 0.7083, "throughput_tps": 12346.0, "tokens": 97.0, "drift": -0.001235,
        "acceptance_rate_pos": 0.6667}  # a series' last value
    assert [m.value for m in client.get_metric_history(entry.run_id, "acceptance_rate_pos")] == [0.6667]
    assert shown(0.0) == 0.0 and shown(float("inf")) == float("inf") and shown(2.0004) == 2.0


def test_unsent_logs_are_saved_and_replayed_by_the_next_session(tmp_path):
    t = tracker(tmp_path)
    t.client = Flaky(t.client, "create_run", failures=100)
    t.log_trial(log("1"))
    assert not t.flush(retries=2, wait_s=0.01)
    assert t.save_pending() == 1 and (tmp_path / "pending.jsonl").is_file()
    again = tracker(tmp_path)
    assert len(again.queue) == 1 and not (tmp_path / "pending.jsonl").exists()
    assert again.flush()
    assert [r.data.tags["specsweep.trial"] for r in trial_runs(again)] == ["1"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real `mlflow server` on loopback (about 10 s to start), shared by this module."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    proc = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "mlflow"), "server", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 's.db'}",
         "--default-artifact-root", str(root / "art")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=1).close()
                break
            except OSError:
                time.sleep(0.25)
        yield proc, uri
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _rest(uri: str, path: str, body: dict | None = None, **query) -> dict:
    """GET with `query`, or POST `body` as JSON."""
    url = f"{uri}/api/2.0/mlflow/{path}?" + urllib.parse.urlencode(query)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_a_sweep_reads_well_through_the_servers_rest_api(server, tmp_path, ray_head):
    """The experiment opens as model development; runs are named for their configuration
    (baselines as such); the parent run holds the frontier table and the plots."""
    from orchestrator.spec.sweep import parse_spec
    from orchestrator.sweep.driver import Driver

    _, uri = server
    data = {"name": "rest", "pairs": ["toy"], "task": {"name": "arith", "limit": 2},
            "space": {"schedule": ["linear"], "block": [2], "rule": ["lossless", "linear"],
                      "leniency": [0.5], "max_new_tokens": 8},
            "objectives": {"throughput_tps": "max", "accuracy": "max"},
            "search": {"sampler": "grid", "trials": 2, "parallel": 2}, "baselines": ["ar"],
            "cluster": {"slots": 1}}
    driver = Driver(parse_spec(data), yaml.safe_dump(data), tmp_path, ray_head, tracking_uri=uri)
    driver.run()
    experiment = _rest(uri, "experiments/get-by-name", experiment_name="rest")["experiment"]
    tags = {t["key"]: t["value"] for t in experiment.get("tags", [])}
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(tags["mlflow.sharedViewState.specsweep"])  # the view the printed link opens
    assert view["searchFilter"] == "tags.`specsweep.role` = 'trial'"
    assert (view["orderByKey"], view["orderByAsc"]) == ("tags.`specsweep.frontier`", False)  # frontier first
    assert view["selectedColumns"][0] == view["columnOrder"][0] == "tags.`specsweep.frontier`"  # leftmost
    assert "metrics.`accuracy`" in view["selectedColumns"]
    assert "specsweep sweep `rest`" in tags["mlflow.note.content"]  # the experiment's description
    search = {"experiment_ids": [experiment["experiment_id"]], "max_results": 100}
    runs = _rest(uri, "runs/search", search)["runs"]
    names = sorted(r["info"]["run_name"] for r in runs)
    assert names == ["rest", "toy ar baseline", "toy linear B2 K1 lossless", "toy linear B2 K1 λ0.5"]
    parent = next(r for r in runs if r["info"]["run_name"] == "rest")
    files = {f["path"] for f in _rest(uri, "artifacts/list", run_id=parent["info"]["run_id"])["files"]}
    assert {"frontier.csv", "frontier.html", "plots", "timing.json", "spec.yaml"} <= files
    csv_text = MlflowClient(uri).download_artifacts(parent["info"]["run_id"], "frontier.csv", str(tmp_path))
    header, *rows = Path(csv_text).read_text().splitlines()
    assert header.startswith("trial,run,pair,batch_size,schedule,block,effort,rule,leniency,exact,tied,"
                             "throughput_tps")
    assert rows and all(",toy linear B" in row for row in rows)
    trials = [r for r in runs if r["info"]["run_name"].startswith("toy linear")]
    marks = [{t["key"]: t["value"] for t in r["data"]["tags"]}["specsweep.frontier"] for r in trials]
    assert sorted(marks) in (["no", "yes"], ["yes", "yes"])  # the decision, a column of the runs table
    pictures = {f["path"] for f in _rest(uri, "artifacts/list", run_id=trials[0]["info"]["run_id"])["files"]}
    assert {"accept_len_hist.json", "accept_len_hist.png"} <= pictures


def test_a_server_that_stops_answering_costs_seconds_and_loses_nothing(server, tmp_path, monkeypatch):
    """A real MLflow server frozen (SIGSTOP) after the sweep's run exists: a trial log queues
    within one request timeout, the parent run's call is one TrackingError naming the URI,
    and the saved log reaches the server once it answers again."""
    server, uri = server
    try:
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
        t = Tracker(uri, "exp", tmp_path / "artifacts", tmp_path / "pending.jsonl")
        parent = t.start_sweep("s", "name: s\n")
        os.killpg(server.pid, signal.SIGSTOP)
        started = time.monotonic()
        t.log_trial(log("t0"))  # no background thread: one attempt now
        assert t.failing and len(t.queue) == 1
        with pytest.raises(TrackingError, match=rf"tracking server at {uri} failed to end the sweep's run"):
            t.end_sweep(parent, "FINISHED")
        assert time.monotonic() - started < 20  # MLflow's own defaults wait over 4 minutes per call
        assert t.save_pending() == 1
        os.killpg(server.pid, signal.SIGCONT)
        again = Tracker(uri, "exp", tmp_path / "artifacts", tmp_path / "pending.jsonl")
        assert again.flush()
        assert [r.info.run_name for r in trial_runs(again)] == ["t0"]
    finally:
        os.killpg(server.pid, signal.SIGCONT)


def test_a_run_mlflow_refuses_is_one_error_not_an_outage_blocking_the_queue(tmp_path):
    """A metric name MLflow does not accept (a path out of the store) is raised at once as one
    line, and the runs queued behind it are still sent."""
    t = tracker(tmp_path)
    bad = log("t1")
    bad.metrics = {"accuracy.../../escape": 1.0}
    t.queue.append(bad)
    with pytest.raises(TrackingError) as refused:
        t.log_trial(log("t2"))
        t.flush(retries=1)
    assert str(refused.value).startswith("tracking: MLflow refused run 't1' (")
    assert "\n" not in str(refused.value) and not t.failing
    assert sorted((r.info.run_name, r.info.status) for r in trial_runs(t)) == [("t1", "FAILED"),
                                                                              ("t2", "FINISHED")]
