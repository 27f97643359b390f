"""Sweeps on a real local Ray instance (GPU slots simulated by a custom resource) with a real
MLflow sqlite store."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.analysis.frontier import frontier_trials
from orchestrator.analysis.metrics import pareto_front
from orchestrator.spec.sweep import parse_spec
from orchestrator.sweep.driver import Driver
from orchestrator.sweep.shards import DEPTH, MIN_SHARD
from orchestrator.sweep.study import SweepError, load_sweep
from orchestrator.sweep.tracking import shown

pytestmark = pytest.mark.slow  # real Ray sweeps

SPEC = {
    "name": "t",
    "pairs": ["toy", "toy-self"],
    "task": {"name": "arith", "limit": 4},
    "space": {
        "schedule": ["linear", "packed"],
        "block": [2, 4],
        "steps": [1, 2],
        "rule": ["lossless", "linear"],
        "leniency": [0.5, 1.0],
        "max_new_tokens": 24,
    },
    "objectives": {"throughput_tps": "max", "accuracy": "max"},
    "search": {"sampler": "random", "trials": 5, "parallel": 2, "seed": 1},
    "baselines": ["ar", "diffusion"],
    "cluster": {"slots": 2, "resource": "gpu_slot"},
}


def run_sweep(root: Path, data=SPEC, **kwargs):
    spec = parse_spec(data)
    driver = Driver(spec, yaml.safe_dump(data), root, **{k: v for k, v in kwargs.items() if k != "resume"})
    driver.run(resume=kwargs.get("resume", False))
    return driver


def runs(driver):
    client = MlflowClient(driver.tracking_uri)
    experiment = client.get_experiment_by_name(driver.spec.name)
    return client, client.search_runs([experiment.experiment_id], max_results=1000)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, ray_head):
    root = tmp_path_factory.mktemp("sweep")
    seeded = {**SPEC, "search": {**SPEC["search"], "seed": 0}}  # seed 0 draws both schedules
    return run_sweep(root, seeded, ray_address=ray_head)


def test_run_structure_in_mlflow(swept):
    client, all_runs = runs(swept)
    parents = [r for r in all_runs if r.data.tags.get("specsweep.role") == "sweep"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent = parents[0].info.run_id
    assert "spec.yaml" in [a.path for a in client.list_artifacts(parent)]
    plots = {a.path for a in client.list_artifacts(parent, "plots")}
    assert {
        "plots/frontier-ratio.png",  # against the controls timed beside each trial
        "plots/frontier-throughput.png",
        "plots/frontier-latency.png",
        "plots/hypervolume.png",
        "plots/schedules.png",
    } <= plots
    children = [r for r in all_runs if r.data.tags.get("specsweep.role") == "trial"]
    assert all(r.data.tags["mlflow.parentRunId"] == parent for r in children)
    baselines = sorted(
        (r.data.tags["specsweep.pair"], r.data.tags["specsweep.baseline"])
        for r in children
        if "specsweep.baseline" in r.data.tags
    )
    assert baselines == [("toy", "ar"), ("toy", "diffusion"), ("toy-self", "ar"), ("toy-self", "diffusion")]
    trials = [r for r in children if "specsweep.trial" in r.data.tags]
    assert sorted(int(r.data.tags["specsweep.trial"]) for r in trials) == [0, 1, 2, 3, 4]
    for r in trials:
        assert r.info.status == "FINISHED"
        assert {"schedule", "block", "rule", "leniency", "pair", "task"} <= r.data.params.keys()
        assert {
            "accuracy",
            "throughput_tps",
            "tokens_per_nfe",
            "latency_s",
            "overhead_frac",
        } <= r.data.metrics.keys()
        table = client.download_artifacts(r.info.run_id, "prompts.jsonl")
        rows = [json.loads(line) for line in Path(table).read_text().splitlines()]
        assert sorted(row["index"] for row in rows) == [0, 1, 2, 3] and "text" in rows[0]
    assert not [r for r in all_runs if r.info.status == "RUNNING"]


def test_trials_log_acceptance_by_position_and_the_parent_plots_the_frontiers(swept):
    client, all_runs = runs(swept)
    parent = next(r.info.run_id for r in all_runs if r.data.tags.get("specsweep.role") == "sweep")
    assert "plots/acceptance.png" in {a.path for a in client.list_artifacts(parent, "plots")}
    for r in (r for r in all_runs if "specsweep.trial" in r.data.tags):
        stored = client.download_artifacts(r.info.run_id, "accept_len_hist.json")
        logged = json.loads(Path(stored).read_text())
        history = client.get_metric_history(r.info.run_id, "acceptance_rate_pos")
        rates = map(shown, logged["acceptance_rate_pos"])
        assert sorted((m.step, m.value) for m in history) == list(enumerate(rates, 1))
        assert sum(logged["accept_len_hist"]) > 0


def test_frontier_equals_brute_force_pareto_over_logged_trials(swept):
    _, all_runs = runs(swept)
    spec, study = load_sweep(swept.root, "t")
    exact = {t.number: t.user_attrs["metrics"] for t in study.trials}  # MLflow shows 4 digits
    logged = {int(r.data.tags["specsweep.trial"]): r for r in all_runs if "specsweep.trial" in r.data.tags}
    for n, r in logged.items():
        assert r.data.metrics["throughput_tps"] == shown(exact[n]["throughput_tps"])
    trials = list(logged)
    points = [(exact[n]["throughput_tps"], exact[n]["accuracy"]) for n in trials]
    expected = {trials[i] for i in pareto_front(points, ("max", "max"))}
    assert {t.number for t in frontier_trials(study, spec)} == expected


def test_grid_stops_when_exhausted_with_the_study_in_an_rdb(tmp_path, ray_head):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"  # an RDB URL, as a cluster's Postgres
    data = {
        **SPEC,
        "pairs": ["toy"],
        "baselines": ["ar"],
        "space": {"schedule": ["linear"], "block": [2, 4], "max_new_tokens": 8},
        "search": {"sampler": "grid", "trials": 10, "parallel": 2, "storage": storage},
    }
    driver = run_sweep(tmp_path, data, ray_address=ray_head)
    assert not (tmp_path / ".specsweep" / "t" / "study.journal").exists()
    assert len(optuna.load_study(study_name="t", storage=storage).trials) == 2
    trials = driver.study.get_trials()
    assert len(trials) == 2 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert sorted(t.params["block"] for t in trials) == [2, 4]


class StopAfter:
    """A progress callback that interrupts the sweep once `n` trials have finished."""

    def __init__(self, n):
        self.n = n

    def __call__(self, progress):
        if progress.finished >= self.n and not progress.note:
            raise KeyboardInterrupt


def test_resume_after_interrupt_finishes_exactly_the_requested_trials(tmp_path, ray_head):
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tmp_path, on_progress=StopAfter(2), ray_address=ray_head)
    spec, study = load_sweep(tmp_path, "t")
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    driver = run_sweep(tmp_path, resume=True, ray_address=ray_head)
    client, all_runs = runs(driver)
    assert not [r for r in all_runs if r.info.status == "RUNNING"]
    finished = [t for t in driver.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))]
    assert len(finished) == 5
    logged = [int(r.data.tags["specsweep.trial"]) for r in all_runs if "specsweep.trial" in r.data.tags]
    assert len(logged) == len(set(logged)) == 5  # no duplicates, none lost
    baselines = [r for r in all_runs if "specsweep.baseline" in r.data.tags]
    assert len(baselines) == 4


def test_resume_asks_the_configurations_a_ctrl_c_interrupted_again(tmp_path, ray_head):
    # random sampling here; TPE, which would never propose them again, as a CLI process in
    # tests/orchestrator/test_sweep_cli.py
    data = {**SPEC, "search": {**SPEC["search"], "sampler": "random", "trials": 4}}
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tmp_path, data, on_progress=StopAfter(1), ray_address=ray_head)
    _, study = load_sweep(tmp_path, "t")
    interrupted = {json.dumps(t.params, sort_keys=True) for t in study.get_trials()
                   if t.user_attrs.get("interrupted")}
    assert interrupted  # the trial in flight at the Ctrl-C
    driver = run_sweep(tmp_path, data, resume=True, ray_address=ray_head)
    complete = driver.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == 4
    assert interrupted <= {json.dumps(t.params, sort_keys=True) for t in complete}
    assert driver.study.get_trials(states=(optuna.trial.TrialState.WAITING,)) == []


def test_resume_refuses_an_empty_study_journal(tmp_path, ray_head):
    data = {**SPEC, "search": {**SPEC["search"], "trials": 1}}
    first = run_sweep(tmp_path, data, ray_address=ray_head)
    for left in (b"", b'{"op_code": 0, "worker_id": "a'):  # emptied, or one record cut short
        (first.dir / "study.journal").write_bytes(left)
        with pytest.raises(SweepError, match="study journal .* is empty"):
            run_sweep(tmp_path, data, resume=True, ray_address=ray_head)
    _, all_runs = runs(first)
    assert len([r for r in all_runs if "specsweep.trial" in r.data.tags]) == 1  # nothing logged twice


class KillWorker:
    """Kill one worker process with SIGKILL after the first trial finishes."""

    def __init__(self):
        self.driver = None
        self.done = False

    def __call__(self, progress):
        if progress.finished >= 1 and not self.done:
            self.done = True
            os.kill(self.driver.executor.worker_info[0]["pid"], signal.SIGKILL)


class KillBusyWorkers(threading.Thread):
    """Once a trial has finished, SIGKILL each worker in turn at a moment it holds DEPTH
    shards in flight (read from the driver's queue while the sweep runs)."""

    def __init__(self, driver):
        super().__init__(daemon=True)
        self.driver, self.killed, self.stop = driver, [], threading.Event()

    def run(self):
        while not self.stop.is_set() and len(self.killed) < self.driver.spec.cluster.slots:
            executor, progress = self.driver.executor, self.driver.progress
            queue = executor.queue if executor else None
            busy = [w for w, load in (queue.load.items() if queue else ()) if load == DEPTH
                    and w not in self.killed and w not in queue.restarting]
            if progress.finished >= 1 and progress.note != "baselines" and busy:
                os.kill(executor.worker_info[busy[0]]["pid"], signal.SIGKILL)
                self.killed.append(busy[0])
            time.sleep(0.01)


def test_workers_killed_holding_several_shards_lose_and_duplicate_nothing(tmp_path, ray_head):
    data = {**SPEC, "pairs": ["toy"], "task": {"name": "arith", "limit": 2 * MIN_SHARD},
            "search": {**SPEC["search"], "trials": 6}, "baselines": ["ar"]}
    driver = Driver(parse_spec(data), yaml.safe_dump(data), tmp_path, ray_head)
    killer = KillBusyWorkers(driver)
    killer.start()
    try:
        driver.run()
    finally:
        killer.stop.set()
    assert sorted(killer.killed) == [0, 1]  # both workers died, each holding DEPTH shards
    trials = [t for t in driver.study.get_trials() if not t.user_attrs.get("duplicate")]
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 6, [
        t.user_attrs.get("error") for t in trials]
    _, all_runs = runs(driver)
    logged = [int(r.data.tags["specsweep.trial"]) for r in all_runs if "specsweep.trial" in r.data.tags]
    assert sorted(logged) == [t.number for t in trials]  # none lost, none logged twice
    assert all(r.info.status == "FINISHED" for r in all_runs)


def test_killing_the_only_worker_waits_for_its_restart(tmp_path, ray_head):
    """With one slot, the shard in flight is retried once Ray has restarted the worker, not
    burnt on calls to a worker that is still coming back."""
    data = {**SPEC, "pairs": ["toy"], "search": {**SPEC["search"], "trials": 3, "parallel": 1},
            "baselines": ["ar"], "cluster": {**SPEC["cluster"], "slots": 1}}
    killer = KillWorker()
    driver = Driver(parse_spec(data), yaml.safe_dump(data), tmp_path, ray_head, on_progress=killer)
    killer.driver = driver
    driver.run()
    assert killer.done
    trials = driver.study.get_trials()
    assert [t.state for t in trials].count(optuna.trial.TrialState.COMPLETE) == 3, [
        t.user_attrs.get("error") for t in trials]
    assert driver.executor.queue.restarting == {}


def test_failing_trials_are_recorded_with_their_error_and_the_sweep_goes_on(tmp_path, ray_head):
    writing = Path(__file__).parents[2] / "workloads" / "tasks" / "fixtures" / "writing.jsonl"
    data = {
        **SPEC,
        "pairs": ["toy"],
        "task": {"name": "writing", "data": str(writing)},
        "baselines": ["ar"],
        "space": {"schedule": ["linear"], "block": [2, 4], "max_new_tokens": 8},
        "search": {"sampler": "grid", "trials": 2, "parallel": 2},
    }
    # writing is unscored: the accuracy objective is undefined
    driver = run_sweep(tmp_path, data, ray_address=ray_head)
    failed = driver.study.get_trials(states=(optuna.trial.TrialState.FAIL,))
    assert len(failed) == 2 and all("accuracy" in t.user_attrs["error"] for t in failed)
    _, all_runs = runs(driver)
    trials = [r for r in all_runs if "specsweep.trial" in r.data.tags]
    assert len(trials) == 2 and all(r.info.status == "FAILED" for r in trials)
    assert all("accuracy" in r.data.tags["specsweep.error"] for r in trials)
    parent = next(r for r in all_runs if r.data.tags.get("specsweep.role") == "sweep")
    assert parent.info.status == "FINISHED"
