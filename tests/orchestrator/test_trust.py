"""Exports and sweep specs never run a checkpoint's own Python unless the command line allows
it: a pair asking for trust_remote_code is one line and exit code 2 without --trust-remote-code."""

import json
import shutil

import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.orchestrator.bad_input import GOOD, one_line_error, run_cli, tree
from workloads.models.pairspec import TOY_DIR

runner = CliRunner()


def remote_code_checkpoint(tmp_path):
    """The toy verifier with an `auto_map` naming Python of its own, which leaves a marker file
    when anything imports it."""
    model = tmp_path / "model"
    shutil.copytree(TOY_DIR / "verifier", model)
    marker = tmp_path / "ran"
    (model / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import LlamaConfig\n\n\nclass EvilConfig(LlamaConfig):\n    pass\n")
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig"}
    (model / "config.json").write_text(json.dumps(config))
    return model, marker


def test_an_export_asking_for_remote_code_is_refused_and_runs_nothing(tmp_path):
    model, marker = remote_code_checkpoint(tmp_path)
    export = tmp_path / "trial1.yaml"
    export.write_text(yaml.safe_dump({"pair": {"name": "shared", "drafter": str(TOY_DIR / "drafter"),
                                               "verifier": str(model), "trust_remote_code": True},
                                      "config": {"schedule": "linear", "block": 4}}))
    result = runner.invoke(app, ["decode", "--config", str(export), "--prompt", "1+1="])
    one_line_error(result, "config: pair shared: trust_remote_code would run the checkpoint's own Python; "
                           "pass --trust-remote-code")
    assert not marker.exists()


def test_a_string_is_no_request_to_trust(tmp_path):
    model, marker = remote_code_checkpoint(tmp_path)
    export = tmp_path / "trial1.yaml"
    export.write_text(yaml.safe_dump({"pair": {"drafter": str(TOY_DIR / "drafter"), "verifier": str(model),
                                               "trust_remote_code": "false"}, "config": {}}))
    result = runner.invoke(app, ["decode", "--config", str(export), "--prompt", "1", "--trust-remote-code"])
    one_line_error(result, "config: pair custom: trust_remote_code: 'false' is not true or false")
    assert not marker.exists()


def test_the_flag_lets_the_checkpoint_code_run(tmp_path):
    model, marker = remote_code_checkpoint(tmp_path)
    export = tmp_path / "trial1.yaml"
    export.write_text(yaml.safe_dump({"pair": {"drafter": str(TOY_DIR / "drafter"), "verifier": str(model),
                                               "trust_remote_code": True}, "config": {}}))
    runner.invoke(app, ["decode", "--config", str(export), "--prompt", "1", "--max-new-tokens", "2",
                        "--trust-remote-code"])
    assert marker.exists()  # the opt-in is real: the same file's code runs when allowed


def test_a_sweep_spec_asking_for_remote_code_is_refused_before_any_state(tmp_path):
    model, marker = remote_code_checkpoint(tmp_path)
    spec = {**GOOD, "pairs": [{"name": "p", "drafter": str(TOY_DIR / "drafter"), "verifier": str(model),
                               "trust_remote_code": True}]}
    result = run_cli(tmp_path, spec)
    one_line_error(result, "spec: pair p: trust_remote_code would run the checkpoint's own Python")
    assert not marker.exists()
    assert not (tmp_path / ".specsweep").exists(), tree(tmp_path)
