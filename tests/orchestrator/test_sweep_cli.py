import json
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator.cli import app

runner = CliRunner()

GOOD = {
    "name": "cli",
    "pairs": ["toy"],
    "task": {"name": "arith", "limit": 2},
    "space": {"schedule": ["linear"], "block": [2], "max_new_tokens": 8},
    "objectives": {"throughput_tps": "max", "accuracy": "max"},
    "search": {"sampler": "grid", "trials": 1, "parallel": 1},
    "baselines": ["ar"],
    "cluster": {"slots": 1},
}


def write(tmp_path, data):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_bad_spec_exits_2_with_one_line_and_creates_nothing(tmp_path):
    bad = {**GOOD, "space": {**GOOD["space"], "leniency": [1.5]}}
    result = runner.invoke(app, ["run", str(write(tmp_path, bad)), "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.startswith("error: spec: space.leniency") and result.output.count("\n") == 1
    assert not (tmp_path / ".specsweep").exists()


def test_run_then_status_frontier_export_and_decode(tmp_path):
    spec = write(tmp_path, GOOD)
    result = runner.invoke(app, ["run", str(spec), "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    again = runner.invoke(app, ["run", str(spec), "--root", str(tmp_path)])
    assert again.exit_code == 2 and "--resume" in again.output
    status = runner.invoke(app, ["status", "cli", "--root", str(tmp_path)])
    assert "1 complete" in status.output and "toy:ar" in status.output
    front = runner.invoke(app, ["frontier", "cli", "--root", str(tmp_path), "--json"])
    assert front.exit_code == 0 and '"run_id": "' in front.output
    out = tmp_path / "exported"
    exported = runner.invoke(app, ["export", "cli", "--root", str(tmp_path), "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    (path,) = out.glob("trial*.yaml")
    document = yaml.safe_load(path.read_text())
    assert document["exact"] is True and document["provenance"]["trial"] == 0
    assert (out / "routes.yaml").is_file() and (out / "plots" / "frontier-throughput.png").is_file()
    # the export decodes with exactly the measured settings: the trial's tokens, at temperature 0
    from orchestrator.sweep.study import load_sweep

    _, study = load_sweep(tmp_path, "cli")
    mlflow = MlflowClient(study.user_attrs["tracking_uri"])
    table = mlflow.download_artifacts(document["provenance"]["mlflow_run_id"], "prompts.jsonl")
    row = json.loads(Path(table).read_text().splitlines()[0])
    args = ["decode", "--pair", "toy", "--config", str(path), "--prompt", row["prompt"], "--json"]
    decoded = runner.invoke(app, args)
    assert decoded.exit_code == 0, decoded.output
    assert json.loads(decoded.stdout.splitlines()[-1])["token_ids"] == row["token_ids"]
    missing = runner.invoke(app, ["status", "nosuch", "--root", str(tmp_path)])
    assert missing.exit_code == 2 and "nosuch" in missing.output


def test_offline_dataset_or_missing_chat_template_exit_2_and_create_nothing(tmp_path):
    for task in ({"name": "gsm8k", "limit": 2}, {"name": "arith", "limit": 2, "chat": True}):
        spec = write(tmp_path, {**GOOD, "task": task})
        result = runner.invoke(app, ["run", str(spec), "--root", str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: ") and result.output.count("\n") == 1, result.output
        assert not (tmp_path / ".specsweep").exists()


def test_a_dflash_pair_sweeps_skips_the_baseline_it_cannot_run_and_exports_serving_settings(tmp_path):
    data = {**GOOD, "name": "dfl", "pairs": ["toy-dflash"], "baselines": ["ar", "diffusion"],
            "space": {"schedule": ["linear"], "block": [4], "max_new_tokens": 8}}
    result = runner.invoke(app, ["run", str(write(tmp_path, data)), "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    from orchestrator.sweep.study import load_sweep

    _, study = load_sweep(tmp_path, "dfl")
    assert sorted(k for k in study.user_attrs if k.startswith("baseline:")) == ["baseline:toy-dflash:ar"]
    out = tmp_path / "exported"
    assert runner.invoke(app, ["export", "dfl", "--root", str(tmp_path), "--out", str(out)]).exit_code == 0
    (path,) = out.glob("trial*.yaml")
    serving = yaml.safe_load(path.read_text())["serving"]
    assert serving["vllm"]["speculative_config"]["method"] == "dflash"
    assert serving["vllm"]["speculative_config"]["num_speculative_tokens"] == 3
