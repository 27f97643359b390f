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
    """The engine cores of the vLLM servers process `parent` started (its guard leads their group;
    the guard's parent is `parent`, or the launcher `parent` started: workloads.serving.starts);
    with `folder`, only those of the server logging there."""
    cores = []
    for pid in _all_engine_cores():
        try:
            if (guard := _group(pid)) is None or parent not in _parents(guard):
                continue
            if folder is not None and log_folder(pid) != os.path.realpath(folder):
                continue
        except OSError:  # gone meanwhile
            continue
        cores.append(pid)
    return cores


def _parents(pid: int) -> tuple[int, int]:
    """A process's parent and that one's parent."""
    parent = int(stat_fields(pid)[1])
    return parent, int(stat_fields(parent)[1])


def log_folder(pid: int) -> str:
    """The log folder of the server a process belongs to: every process of a server writes its
    output to the folder's server.log."""
    return os.path.dirname(os.path.realpath(f"/proc/{pid}/fd/1"))


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
