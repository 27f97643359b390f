"""Screenshots of a sweep in the MLflow UI, as a user sees it, in headless Chromium: the runs
table the printed link opens (frontier column first) and a frontier trial's page with its
accept-length histogram.

    .venv/bin/python infra/mlflow/screenshots.py SWEEP [--root .] [--out screenshots]

Needs Chromium (`apt-get install -y chromium`); starts an MLflow server of its own on a free
loopback port over the sweep's local store and stops it after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from mlflow.tracking import MlflowClient

from orchestrator.sweep.runs import run_link, ui_link
from workloads.serving.ports import free_port


def shoot(url: str, path: Path, browser: str) -> None:
    """One page, rendered for 20 s of virtual time (the UI is a single-page app)."""
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1900,1000", "--virtual-time-budget=20000", f"--screenshot={path}", url],
                   check=True, capture_output=True, timeout=120)
    print(f"{path}: {url}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep")
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, default=Path("screenshots"))
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("error: no Chromium on PATH (apt-get install -y chromium)", file=sys.stderr)
        return 2
    store = (args.root / ".specsweep").resolve()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(args.sweep)
    if experiment is None:
        print(f"error: no experiment {args.sweep!r} in {uri}", file=sys.stderr)
        return 2
    runs = client.search_runs([experiment.experiment_id], "tags.`specsweep.frontier` = 'yes'")
    pictured = [r for r in runs
                if "accept_len_hist.png" in {a.path for a in client.list_artifacts(r.info.run_id)}]
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", uri, "--artifacts-destination", str(store / "artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        args.out.mkdir(parents=True, exist_ok=True)
        shoot(ui_link(base, experiment.experiment_id), args.out / "runs_table.png", browser)
        if pictured:
            run = pictured[0].info
            shoot(run_link(base, experiment.experiment_id, run.run_id, "accept_len_hist.png"),
                  args.out / "trial_histogram.png", browser)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
