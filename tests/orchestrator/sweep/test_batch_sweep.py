"""A sweep over batch sizes 1 and 8 on a real local Ray instance and MLflow store: both
logged with their own `ar` baseline, one frontier per batch size, and `by_batch_size.yaml`
checked against a brute-force frontier per batch size over the logged runs."""

import statistics
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.analysis.export import export_configs
from orchestrator.analysis.metrics import pareto_front
from orchestrator.analysis.summary import frontier_rows
from orchestrator.spec.sweep import parse_spec
from orchestrator.stored import baseline
from orchestrator.sweep.driver import Driver
from orchestrator.sweep.study import load_sweep
from orchestrator.sweep.tracking import trial_run_ids

pytestmark = pytest.mark.slow  # real batched sweeps

SPEC = {
    "name": "batched",
    "pairs": ["toy"],
    "task": {"name": "arith", "limit": 16},
    "space": {"schedule": ["linear"], "block": [2, 4], "rule": ["lossless", "linear"],
              "leniency": [1.0], "batch_size": [1, 8], "max_new_tokens": 16},
    "objectives": {"throughput_tps": "max", "accuracy": "max"},
    "search": {"sampler": "grid", "trials": 8, "parallel": 2, "seed": 0},
    "baselines": ["ar"],
    "cluster": {"slots": 2, "resource": "gpu_slot"},
}


@pytest.fixture(scope="module")
def swept(tmp_path_factory, ray_head):
    root = tmp_path_factory.mktemp("batched")
    driver = Driver(parse_spec(SPEC), yaml.safe_dump(SPEC), root, ray_head)
    driver.run()
    client = MlflowClient(driver.tracking_uri)
    experiment = client.get_experiment_by_name("batched")
    return root, client.search_runs([experiment.experiment_id], max_results=1000)


def test_both_batch_sizes_are_logged_against_their_own_baseline(swept):
    root, runs = swept
    trials = [r for r in runs if "specsweep.trial" in r.data.tags]
    assert sorted(r.data.params["batch_size"] for r in trials) == ["1"] * 4 + ["8"] * 4
    baselines = sorted(r.data.tags["specsweep.batch_size"] for r in runs
                       if "specsweep.baseline" in r.data.tags)
    assert baselines == ["1", "8"]
    spec, study = load_sweep(root, "batched")
    ar = {size: baseline(study, "toy", "ar", size)["throughput_tps"] for size in (1, 8)}
    assert ar[8] > 2 * ar[1]  # the machine does more at batch 8: a ratio against ar at batch 1 would flatter
    # the ratio is against ar controls timed beside the trial at its own batch size: a batch-8
    # trial's controls run far faster per token than a batch-1 trial's (compared within the
    # sweep's controls, not against baselines timed minutes apart on a loaded machine)
    trials_at = {size: [t for t in study.get_trials() if t.user_attrs.get("batch_size") == size]
                 for size in (1, 8)}
    control_ms = {size: statistics.median(t.user_attrs["control"]["ms_per_token"] for t in found)
                  for size, found in trials_at.items()}
    assert 2 * control_ms[8] < control_ms[1]
    for r in trials:
        assert r.data.metrics["throughput_ratio"] > 0


def test_by_batch_size_export_matches_a_brute_force_frontier_per_batch_size(swept, tmp_path):
    root, runs = swept
    spec, study = load_sweep(root, "batched")
    rows = frontier_rows(spec, study, trial_run_ids(study))
    export_configs(spec, study, rows, tmp_path, None, "fastest")
    mapping = yaml.safe_load((tmp_path / "by_batch_size.yaml").read_text())["by_batch_size"]
    assert sorted(mapping) == [1, 8]
    trials = [r for r in runs if "specsweep.trial" in r.data.tags]
    for size in (1, 8):
        group = [r for r in trials if r.data.params["batch_size"] == str(size)]
        points = [(r.data.metrics["throughput_tps"], r.data.metrics["accuracy"]) for r in group]
        front = [group[i] for i in pareto_front(points, ("max", "max"))]
        expected = {int(r.data.tags["specsweep.trial"]) for r in front}
        assert {r["trial"] for r in frontier_rows(spec, study, {}, size)} == expected
        fastest = max(front, key=lambda r: (r.data.metrics["throughput_tps"], r.data.metrics["accuracy"]))
        entry = mapping[size]
        assert entry["provenance"]["trial"] == int(fastest.data.tags["specsweep.trial"])
        assert entry["batch_size"] == size and entry["pair"] == "toy"
        assert entry["config"]["schedule"] == fastest.data.params["schedule"]
        assert entry["exact"] == (fastest.data.params["rule"] == "lossless")
        logged = fastest.data.metrics["throughput_tps"]  # to 4 significant digits
        assert entry["metrics"]["throughput_tps"] == pytest.approx(logged, rel=5e-4)
    routes = yaml.safe_load((tmp_path / "routes.yaml").read_text())["routes"]
    assert sorted({r["batch_size"] for r in routes}) == [1, 8]
    assert all((tmp_path / r["file"]).exists() for r in routes if r["file"])
    assert {p.name for p in Path(tmp_path, "plots").iterdir()} >= {"frontier-throughput-b1.png",
                                                                   "frontier-throughput-b8.png"}
