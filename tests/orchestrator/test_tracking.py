"""Trial logs survive a tracking store that is briefly unreachable: queued, retried from the
step that failed, never duplicated; what stays unsent is saved and replayed next session."""

import time

from mlflow.tracking import MlflowClient

from orchestrator.tracking import Tracker, TrialLog


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
