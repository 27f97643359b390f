"""Faults on a real vLLM server a command started: its engine core killed once a request is in
flight, seen from the outside (the server's access log under a log folder), so the same helper
serves a command run as a process of its own and one run in this process."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path


def engine_cores_of(parent: int) -> list[int]:
    """The engine cores of the vLLM servers process `parent` started (its guard leads their group)."""
    cores = []
    found = subprocess.run(["pgrep", "-f", "VLLM::EngineCore"], capture_output=True, text=True).stdout.split()
    for pid in map(int, found):
        try:
            with open(f"/proc/{os.getpgid(pid)}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:  # the guard's parent
                    cores.append(pid)
        except OSError:  # gone meanwhile
            continue
    return cores


class KillOnce(threading.Thread):
    """SIGKILL the engine cores of the servers `parent` starts under `logs` once the first of
    them logs a request (`POST /v1/`): requests are then in flight. `killed` holds their pids.
    Log folders already there (an earlier command's) are not watched."""

    def __init__(self, logs: Path, parent: int, timeout: float = 900):
        super().__init__(daemon=True)
        self.logs, self.parent, self.timeout = Path(logs), parent, timeout
        self.killed: list[int] = []
        self.before = set(self.logs.glob("vllm-*"))
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for log in (folder / "server.log" for folder in set(self.logs.glob("vllm-*")) - self.before):
                try:
                    serving = "POST /v1/" in log.read_text(errors="replace")
                except OSError:
                    continue
                if serving and (cores := engine_cores_of(self.parent)):
                    for pid in cores:
                        os.kill(pid, signal.SIGKILL)
                    self.killed = cores
                    return
            time.sleep(0.05)
