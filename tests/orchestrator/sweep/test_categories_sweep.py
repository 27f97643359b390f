"""Category labels from a dataset reach MLflow as names it accepts: a sweep over records whose
`category` is a path or holds a newline logs every run, its metrics per category under the
safe names, and the mapping on the sweep's run."""

import json
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.orchestrator.test_sweep_cli import GOOD

pytestmark = pytest.mark.slow  # a real sweep


def test_a_sweep_over_hostile_category_labels_logs_every_run(tmp_path, ray_head):
    data = tmp_path / "gsm8k.jsonl"
    labels = ["../../escape", "a\nb", "../../escape", "a\nb"]
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}",
                                        "category": label}) + "\n" for i, label in enumerate(labels)))
    spec = {**GOOD, "name": "cats", "task": {"name": "gsm8k", "data": str(data), "limit": 4}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["run", str(path), "--root", str(tmp_path), "--ray-address", ray_head])
    assert result.exit_code == 0, result.output
    assert "note: 2 category labels renamed for metric names" in result.output
    assert "could not reach MLflow" not in result.output
    client = MlflowClient(f"sqlite:///{tmp_path / '.specsweep' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("cats").experiment_id])
    assert {r.info.status for r in runs} == {"FINISHED"} and len(runs) == 3  # sweep, baseline, trial
    trial = next(r for r in runs if r.data.tags.get("specsweep.role") == "trial")
    assert {"latency_s.escape", "latency_s.a_b"} <= set(trial.data.metrics)
    sweep = next(r for r in runs if r.data.tags.get("specsweep.role") == "sweep")
    mapping = json.loads(Path(client.download_artifacts(sweep.info.run_id, "categories.json",
                                                        str(tmp_path))).read_text())
    assert mapping == {"../../escape": "escape", "a\nb": "a_b"}
