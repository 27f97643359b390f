"""Faults on a real vLLM server a command started: its engine core killed once a request is in
flight, seen from the outside (the server's access log under a log folder), so the same helper
serves a command run as a process of its own and one run in this process."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from workloads.serving.procs import stat_fields


def _all_engine_cores() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "VLLM::EngineCore"], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:  # gone meanwhile
        return None


def engine_cores(group: int) -> list[int]:
    """The pids of the vLLM engine core processes in a server's process group."""
    return [pid for pid in _all_engine_cores() if _group(pid) == group]


def engine_cores_of(parent: int, folder: Path | None = None) -> list[int]:
    """The engine cores of the vLLM servers process `parent` started (its guard leads their group);
    with `folder`, only those of the server logging there (each server's processes carry its log
    folder in their environment: SPECSWEEP_VLLM_REPORT names its report.json)."""
    cores = []
    for pid in _all_engine_cores():
        try:
            if (guard := _group(pid)) is None or int(stat_fields(guard)[1]) != parent:  # the guard's parent
                continue
            if folder is not None and _log_folder(pid) != os.path.realpath(folder):
                continue
        except OSError:  # gone meanwhile
            continue
        cores.append(pid)
    return cores


def _log_folder(pid: int) -> str | None:
    with open(f"/proc/{pid}/environ", "rb") as f:
        for entry in f.read().split(b"\0"):
            if entry.startswith(b"SPECSWEEP_VLLM_REPORT="):
                return os.path.realpath(os.path.dirname(entry.split(b"=", 1)[1].decode()))
    return None


class KillOnce(threading.Thread):
    """SIGKILL the engine core of the first server `parent` starts under `logs` to log a request
    (`POST /v1/`), once it does: requests are then in flight on it. Another server it started
    beside that one is left serving. `killed` holds the pids. Log folders already there (an
    earlier command's) are not watched."""

    def __init__(self, logs: Path, parent: int, timeout: float = 900):
        super().__init__(daemon=True)
        self.logs, self.parent, self.timeout = Path(logs), parent, timeout
        self.killed: list[int] = []
        self.before = set(self.logs.glob("vllm-*"))
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for folder in set(self.logs.glob("vllm-*")) - self.before:
                try:
                    serving = "POST /v1/" in (folder / "server.log").read_text(errors="replace")
                except OSError:
                    continue
                if serving and (cores := engine_cores_of(self.parent, folder)):
                    for pid in cores:
                        os.kill(pid, signal.SIGKILL)
                    self.killed = cores
                    return
            time.sleep(0.05)
