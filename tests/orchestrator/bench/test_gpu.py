"""The GPU check script: refuses without CUDA; rehearsed end to end on the CPU."""

import subprocess
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from orchestrator.cli import app

SCRIPT = Path(__file__).parents[3] / "infra" / "gpu-check.sh"


def test_the_script_refuses_a_machine_without_cuda(tmp_path):
    if torch.cuda.is_available():  # the refusal only exists where there is no GPU
        return
    run = subprocess.run([str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True)
    assert run.returncode == 2 and "no CUDA device" in run.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_rehearsal_on_cpu_writes_a_passing_report(tmp_path):
    result = CliRunner().invoke(app, ["bench", "gpu", "--device", "cpu", "--n", "2", "--samples", "100",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "report.md").read_text()
    assert "**all checks passed**" in report
    for row in ("greedy packed B=8", "greedy quadratic B=8", "sampled packed B=4", "| packed B=4 |"):
        assert row in report
