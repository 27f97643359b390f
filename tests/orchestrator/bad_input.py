"""What the bad-input tests share. Bad input: exit 2, one line naming the field or the file,
no traceback, nothing written."""

import os

import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.orchestrator import test_sweep_cli

runner = CliRunner()

GOOD = {**test_sweep_cli.GOOD, "name": "bad"}  # the smallest sweep that runs


def one_line_error(result, starts: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {starts}"), result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


def tree(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)


def run_cli(tmp_path, data, *flags):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return runner.invoke(app, ["run", str(path), "--root", str(tmp_path), *flags])
