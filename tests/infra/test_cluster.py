"""Running remote: a real two-node Ray cluster on loopback, and a real MLflow server with
basic auth over HTTP."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from base64 import b64encode
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.spec.sweep import parse_spec
from orchestrator.sweep.driver import Driver

pytestmark = pytest.mark.slow(5)  # a real two-node Ray cluster and MLflow servers (5: taken early)

BIN = Path(sys.executable).parent
SPEC = {
    "name": "remote",
    "pairs": ["toy"],
    "task": {"name": "arith", "limit": 16},
    "space": {"schedule": ["linear", "packed"], "block": [4], "steps": [1], "max_new_tokens": 16},
    "objectives": {"throughput_tps": "max", "accuracy": "max"},
    "search": {"sampler": "grid", "trials": 2, "parallel": 2},
    "baselines": ["ar"],
    "cluster": {"slots": "auto", "resource": "gpu_slot"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_matching(marker: str) -> None:
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd and int(pid) != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


@pytest.fixture(scope="module")
def two_nodes():
    """`ray start --head` and a second `ray start --address` node, each with two simulated
    GPU slots; every process of this cluster is killed afterwards (and only those)."""
    temp = tempfile.mkdtemp(prefix="ss2n-", dir="/tmp")  # unix socket paths must stay short
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    common = [
        "--node-ip-address=127.0.0.1",
        "--num-cpus=2",
        '--resources={"gpu_slot": 2}',
        "--disable-usage-stats",
    ]
    try:
        subprocess.run(
            [
                BIN / "ray",
                "start",
                "--head",
                f"--port={port}",
                "--include-dashboard=false",
                f"--temp-dir={temp}",
                *common,
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [BIN / "ray", "start", f"--address=127.0.0.1:{port}", *common],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield f"127.0.0.1:{port}"
    finally:
        kill_matching(temp)
        kill_matching(f"127.0.0.1:{port}")


def trial_outputs(driver) -> dict:
    """(schedule, prompt index) -> generated token ids, from the MLflow artifacts."""
    client = MlflowClient(driver.tracking_uri)
    experiment = client.get_experiment_by_name(driver.spec.name)
    out, nodes = {}, set()
    for run in client.search_runs([experiment.experiment_id], "tags.`specsweep.role` = 'trial'"):
        if "specsweep.trial" not in run.data.tags:
            continue
        nodes |= set(run.data.tags["specsweep.nodes"].split(","))
        rows = Path(client.download_artifacts(run.info.run_id, "prompts.jsonl")).read_text().splitlines()
        for row in map(json.loads, rows):
            out[(run.data.params["schedule"], row["index"])] = row["token_ids"]
    return out, nodes


def test_sweep_on_a_two_node_cluster_uses_both_nodes_and_matches_a_local_run(two_nodes, tmp_path):
    spec = parse_spec(SPEC)
    remote = Driver(spec, yaml.safe_dump(SPEC), tmp_path / "remote", ray_address=two_nodes)
    remote.run()
    assert len(remote.executor.workers) == 4  # slots: auto found 2 + 2 gpu_slot
    remote_out, nodes = trial_outputs(remote)
    assert len(nodes) == 2  # shards ran on both nodes
    local_data = {**SPEC, "cluster": {"slots": 2, "resource": "gpu_slot"}}
    local = Driver(parse_spec(local_data), yaml.safe_dump(local_data), tmp_path / "local")
    local.run()
    local_out, _ = trial_outputs(local)
    assert remote_out == local_out and len(local_out) == 2 * 16  # temperature 0: identical tokens


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    password = "s3cret-pass-2026"
    (root / "auth.ini").write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{root / 'auth.db'}\nadmin_username = admin\nadmin_password = {password}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    port = free_port()
    env = {
        **os.environ,
        "MLFLOW_AUTH_CONFIG_PATH": str(root / "auth.ini"),
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "test-secret",
    }
    proc = subprocess.Popen(
        [
            BIN / "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{root / 'm.db'}",
            "--artifacts-destination",
            str(root / "art"),
            "--app-name",
            "basic-auth",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not start within 60 s")
        yield url, password
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def rest(url: str, path: str, body: dict, password: str) -> dict:
    request = urllib.request.Request(
        f"{url}/api/2.0/mlflow/{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    request.add_header("Authorization", "Basic " + b64encode(f"admin:{password}".encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_sweep_logs_to_an_mlflow_server_with_basic_auth(mlflow_server, tmp_path, monkeypatch, ray_head):
    url, password = mlflow_server
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
    data = {**SPEC, "cluster": {"slots": 1}}
    Driver(parse_spec(data), yaml.safe_dump(data), tmp_path, ray_head, tracking_uri=url).run()
    found = rest(url, "experiments/search", {"filter": "name = 'remote'", "max_results": 1}, password)
    runs = rest(url, "runs/search", {"experiment_ids": [found["experiments"][0]["experiment_id"]]}, password)
    roles = sorted(
        next(t["value"] for t in r["data"]["tags"] if t["key"] == "specsweep.role") for r in runs["runs"]
    )
    assert roles == ["sweep", "trial", "trial", "trial"]  # parent, the ar baseline, two trials
    assert all(r["info"]["status"] == "FINISHED" for r in runs["runs"])
    with pytest.raises(urllib.error.HTTPError) as refused:
        rest(url, "runs/search", {"experiment_ids": ["0"]}, "wrong-password")
    assert refused.value.code == 401
