"""The recorder without Ray: each kind of decision a strategy hands over (search/strategy.py),
recorded on an Optuna study and a real local MLflow store: finished (its objectives told), stopped
by a race (pruned, never on a frontier), failed (its error kept), only profiled (pruned, with its
untimed metrics and predicted objectives); and a baseline kept for scoring the trials."""

import optuna
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.search.samplers import describe
from orchestrator.search.strategy import Decision, Progress
from orchestrator.spec.space import Candidate
from orchestrator.spec.sweep import parse_spec
from orchestrator.stored import STOPPED
from orchestrator.sweep.record import Recorder
from orchestrator.sweep.shards import Job
from orchestrator.sweep.tracking import default_uri
from tests.orchestrator.analysis.test_outcome import AR, TRIAL, decoded  # noqa: F401 (a fixture)

SPEC = parse_spec({"name": "rec", "pairs": ["toy"], "task": {"name": "arith", "limit": 8},
                   "space": {"schedule": ["linear"], "block": [4], "max_new_tokens": 12},
                   "objectives": {"throughput_tps": "max", "accuracy": "max"},
                   "constraints": ["accuracy >= 0"]})


@pytest.fixture
def recorder(tmp_path, decoded):  # noqa: F811
    shards, ar = decoded
    study = optuna.create_study(directions=["maximize", "maximize"])
    prompts = {"toy": {i: f"prompt {i}" for i in range(8)}}
    recorder = Recorder(SPEC, study, tmp_path, prompts, Progress(4))
    recorder.open(default_uri(tmp_path), tmp_path / "artifacts", "name: rec\n")
    baseline = Job("baseline:toy:ar", "toy ar baseline", Candidate("toy", AR, 1), [], None,
                   {0: {"records": ar, "controls": [], "node": "local", "gpu": "cpu", "engine_s": 1.0}})
    recorder.finish_baseline(baseline)
    yield recorder, shards
    recorder.tracker.stop_background()


def trial_job(recorder, shards, error=None):
    trial = recorder.study.ask({"block": optuna.distributions.CategoricalDistribution([4])})
    candidate = Candidate("toy", TRIAL, 1)
    describe(trial, candidate)
    results = {} if error else dict(enumerate(shards))
    return Job(f"trial:{trial.number}", f"trial {trial.number}", candidate, [], trial, results, error=error)


def runs(recorder) -> list:
    recorder.send_logs()
    client = MlflowClient(recorder.tracker.uri)
    experiment = client.get_experiment_by_name("rec")
    return client.search_runs([experiment.experiment_id], "tags.`specsweep.trial` != ''")


def test_each_kind_of_decision_is_recorded_as_its_trial(recorder):
    recorder, shards = recorder
    finished = trial_job(recorder, shards)
    recorder.record(finished, Decision(("a",), finished.trial, attrs={"how": "measured"}))
    stopped = trial_job(recorder, shards)
    recorder.record(stopped, Decision(("b",), stopped.trial, stopped=True))
    failed = trial_job(recorder, shards, error="decode failed")
    recorder.record(failed, Decision(("c",), failed.trial, error="decode failed"))
    profiled = trial_job(recorder, [])
    profile = shards[0]["records"]
    recorder.record(profiled, Decision(("d",), profiled.trial, profile=profile,
                                       predicted={"throughput_tps": 123.0, "accuracy": None},
                                       why="dominated after 4 prompts"))
    trials = recorder.study.get_trials(deepcopy=False)
    states = [t.state for t in trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
                      optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED]
    assert trials[0].user_attrs["how"] == "measured" and trials[0].values[0] > 0
    assert trials[0].user_attrs["constraints"] == [-trials[0].values[1]]  # accuracy >= 0
    assert trials[1].user_attrs[STOPPED] == 8 and trials[2].user_attrs["error"] == "decode failed"
    assert trials[3].user_attrs[STOPPED] == 0
    assert trials[3].user_attrs["metrics"]["predicted_throughput_tps"] == 123.0
    assert "throughput_tps" not in trials[3].user_attrs["metrics"]  # untimed: no speed of its own
    progress = recorder.progress
    assert (progress.finished, progress.failed, progress.stopped) == (4, 1, 2)
    logged = {r.data.tags["specsweep.trial"]: r for r in runs(recorder)}
    assert logged["1"].data.tags["specsweep.racing"] == "stopped"
    assert logged["2"].info.status == "FAILED" and logged["2"].data.tags["specsweep.error"] == "decode failed"
    assert "untimed; dominated after 4 prompts" in logged["3"].data.tags["specsweep.fidelity"]
    assert logged["0"].data.metrics["throughput_ratio"] > 0  # scored against the ar baseline kept


def test_a_trial_missing_an_objective_is_recorded_failed(recorder):
    recorder, shards = recorder
    unscored = [{**r, "correct": None} for r in shards[0]["records"]]
    job = trial_job(recorder, [{**shards[0], "records": unscored}])
    recorder.record(job, Decision(("a",), job.trial))
    trial = recorder.study.get_trials(deepcopy=False)[0]
    assert trial.state == optuna.trial.TrialState.FAIL and "accuracy" in trial.user_attrs["error"]
