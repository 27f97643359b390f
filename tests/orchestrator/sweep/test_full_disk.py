"""A full disk at the end of a finished sweep loses nothing (real filesystems: tmpfs mounts of a
few kilobytes): every trial stays recorded, the sweep's MLflow run says what it is, its lock is
free, and one line says what could not be written."""

import fcntl
import subprocess

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.orchestrator.bad_input import GOOD

pytestmark = pytest.mark.slow  # real sweeps


def _mount(folder, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")


def _runs(root) -> dict[str, str]:
    """Run name -> status: the sweep's, its ar baseline's and its trial's."""
    client = MlflowClient(f"sqlite:///{root / '.specsweep' / 'mlflow.db'}")
    return {r.info.run_name: r.info.status
            for r in client.search_runs([client.get_experiment_by_name("bad").experiment_id])}


EVERY_RUN = {"bad": "FINISHED", "toy ar baseline": "FINISHED", "toy linear B2 K1 lossless": "FINISHED"}


def _lock_is_free(root) -> bool:
    with open(root / ".specsweep" / "bad.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while held
        return True


def test_plots_a_full_disk_refuses_are_one_line_after_the_results_are_safe(tmp_path, ray_head):
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(GOOD))
    plots = tmp_path / ".specsweep" / "bad" / "plots"
    _mount(plots, "4k")
    try:
        result = CliRunner().invoke(app, ["run", str(tmp_path / "spec.yaml"), "--root", str(tmp_path),
                                          "--ray-address", ray_head])
    finally:
        subprocess.run(["umount", str(plots)], check=True)
    assert result.exit_code == 1, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the sweep finished and its trials are recorded (MLflow and ")
    assert "the disk could not take the plots (No space left on device)" in last
    assert "Traceback" not in result.output
    assert _runs(tmp_path) == EVERY_RUN
    assert _lock_is_free(tmp_path)
    assert (tmp_path / ".specsweep" / "bad" / "timing.json").is_file()  # written before the plots


def test_a_store_the_disk_cannot_finish_is_one_line_and_resume_finishes_it(tmp_path, ray_head):
    """The whole root on a tmpfs too small for the sweep's last MLflow writes: one line naming
    the store, the lock free; once there is room, --resume ends the sweep's run FINISHED."""
    root = tmp_path / "root"
    _mount(root, "1200k")
    try:
        (root / "spec.yaml").write_text(yaml.safe_dump(GOOD))
        run = ["run", str(root / "spec.yaml"), "--root", str(root), "--ray-address", ray_head]
        full = CliRunner().invoke(app, run)
        assert full.exit_code == 2 and "Traceback" not in full.output, full.output
        last = full.stderr.strip().splitlines()[-1]
        # the store or an artifact beside it is the write the full disk refuses, as sizes fall
        assert last.startswith("error: tracking: ") and last.endswith(
            "; the sweep's state is kept: rerun with --resume once it answers"), last
        assert "(database or disk is full)" in last or "No space left on device" in last, last
        assert _lock_is_free(root) and _runs(root)["toy linear B2 K1 lossless"] == "FINISHED"
        subprocess.run(["mount", "-o", "remount,size=16m", str(root)], check=True)
        resumed = CliRunner().invoke(app, [*run, "--resume"])
        assert resumed.exit_code == 0, resumed.output
        assert _runs(root) == EVERY_RUN
    finally:
        subprocess.run(["umount", "-l", str(root)], check=True)
