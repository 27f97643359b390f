"""Connecting to Ray: a local head for one machine, or the cluster at `--ray-address`.

A local head is started under a short temp dir (Ray's unix socket paths must stay under
108 bytes). Ray names each session directory `session_<date>_<time>_<driver pid>`; when
`ray.init` is interrupted before it has registered the node, nothing in Ray knows about
the processes it already spawned (its dashboard and runtime-env agents live on for a
minute), so `start` kills every process whose command line names this driver's session.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path

import ray

from orchestrator.errors import RunFailure
from orchestrator.sweep.shards import ShardFailed, WorkerLost


class ClusterError(ValueError):
    """A Ray cluster that cannot be reached or lacks the resources the spec asks for."""


class ClusterLost(RunFailure):
    """The Ray head a running sweep uses is gone (valid input, a failed run: exit code 1)."""


def temp_dir() -> Path:
    return Path("/tmp") / f"specsweep-ray-{os.getuid()}"


def start(cluster, address: str | None) -> None:
    """`ray.init` on `address`, or a local head with one CPU per worker slot (+1 for the
    driver's tasks) and the spec's custom slot resource."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if address:
        try:
            ray.init(address=address, log_to_driver=False)
        except Exception as err:  # noqa: BLE001 (Ray raises bare Exception, ConnectionError, ...)
            raise ClusterError(f"cluster: cannot join the Ray cluster at {address}: {cause(err)}") from None
        return
    slots = 1 if cluster.slots == "auto" else cluster.slots
    resources = {} if cluster.resource in ("cpu", "gpu") else {cluster.resource: slots}
    try:
        ray.init(num_cpus=slots + 1, resources=resources, include_dashboard=False,
                 _temp_dir=str(temp_dir()), log_to_driver=False, configure_logging=False)
    except BaseException as err:
        if not ray.is_initialized():
            reap_session(temp_dir())
        if isinstance(err, Exception):  # Ray's start-up timeout is a bare Exception
            raise ClusterError(f"cluster: the local Ray head did not start ({cause(err)}); a loaded "
                               "machine or another sweep starting Ray at the same moment can cause this: "
                               "run the sweep again") from None
        raise


def reap_session(temp: Path, settle_s: float = 0.5) -> int:
    """SIGKILL the processes of this driver's local Ray session under `temp`; returns how
    many. Scanned twice, `settle_s` apart, for a child spawned while the first scan ran."""
    session = re.compile(rf"{re.escape(str(temp))}/session_[\d_-]+_{os.getpid()}(/|\s|$)")
    killed = 0
    for scan in range(2):
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if int(proc.name) != os.getpid() and session.search(command):
                try:
                    os.kill(int(proc.name), signal.SIGKILL)
                    killed += 1
                except OSError:
                    pass
        if scan == 0:
            time.sleep(settle_s)
    return killed


def slot_count(cluster) -> int:
    """Worker slots: the spec's number, or for `auto` the cluster's count of the slot
    resource (CPU slots: `cpu_slots_per_node` per live node)."""
    if cluster.slots != "auto":
        return cluster.slots
    if cluster.resource == "cpu":
        return cluster.cpu_slots_per_node * len([n for n in ray.nodes() if n["Alive"]])
    key = "GPU" if cluster.resource == "gpu" else cluster.resource
    count = int(ray.cluster_resources().get(key, 0))
    if count < 1:
        raise ClusterError(f"cluster.slots: auto found no {key!r} resource on the Ray cluster")
    return count


def _started_here() -> str | None:
    """The address of the cluster `ray start` left on this machine, or None (also when Ray
    no longer keeps the private helper that reads it)."""
    try:
        from ray._private.services import find_bootstrap_address
    except ImportError:
        return None
    return find_bootstrap_address(None)


def check_head(address: str, timeout: float = 5.0) -> str:
    """The address to connect to, refused unless its host:port accepts a connection within
    `timeout`. `auto` names RAY_ADDRESS, else the cluster `ray start` last started on this
    machine; never another driver's local head, which Ray's own `auto` would also pick up."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "").removesuffix("auto") or _started_here()
        if not address:
            raise ClusterError("cluster: the Ray address auto finds no Ray cluster on this machine "
                               "(RAY_ADDRESS is unset and no `ray start` is running); start one or give "
                               "host:port")
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"cluster: the Ray address must be auto, host:port or ray://host:port; "
                           f"got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise ClusterError(f"cluster: cannot reach the Ray cluster at {address} (waited {timeout:g} s: "
                           f"{err.strerror or err})") from None
    return address


def head_lost(timeout: float = 2.0) -> str | None:
    """Why the Ray head this driver uses is gone, or None while it lives: a local head's
    raylet or GCS process has exited, or a joined cluster's GCS address refuses connections.
    Checked by the driver because Ray ends a driver whose head is gone on its own, up to a
    minute later and in its own words, with nothing of the sweep's said."""
    node = getattr(ray._private.worker, "_global_node", None)  # private: None if Ray moves it
    if node is not None and node.head:
        for name in ("gcs_server", "raylet"):
            for info in node.all_processes.get(name, []):
                code = info.process.poll()
                if code is not None:
                    return f"its {name} exited with " + (f"signal {-code}" if code < 0 else f"code {code}")
        return None
    address = ray.get_runtime_context().gcs_address
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        return f"its head at {address} refuses connections ({err.strerror or err})"
    return None


def wait(refs: list, timeout: float) -> list:
    """The first of `refs` to be ready within `timeout` (or none)."""
    return ray.wait(refs, num_returns=1, timeout=timeout)[0]


def fetch(ref) -> dict:
    """A call's result, with Ray's failures sorted into the shard queue's two kinds."""
    try:
        return ray.get(ref)
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
        raise WorkerLost from None
    except ray.exceptions.RayError as err:
        raise ShardFailed(cause(err)) from None


def cause(err: Exception) -> str:
    """The exception a remote call raised, in one line: `Type: its last message line`."""
    cause = getattr(err, "cause", None) or err
    lines = [line for line in str(cause).strip().splitlines() if line.strip()]
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"[:500]
