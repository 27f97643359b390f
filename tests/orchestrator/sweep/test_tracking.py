"""Trial logs survive a tracking store that is briefly unreachable: queued, retried from the
step that failed, never duplicated; what stays unsent is saved and replayed next session."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.sweep.tracking import Tracker, TrackingError, TrialLog


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_stops_answering_costs_seconds_and_loses_nothing(tmp_path, monkeypatch):
    """A real MLflow server frozen (SIGSTOP) after the sweep's run exists: a trial log queues
    within one request timeout, the parent run's call is one TrackingError naming the URI,
    and the saved log reaches the server once it answers again."""
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "mlflow"), "server", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 's.db'}",
         "--default-artifact-root", str(tmp_path / "art")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=1).close()
                break
            except OSError:
                time.sleep(0.25)
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
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
