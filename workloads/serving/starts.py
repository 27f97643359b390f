"""How a vLLM server's processes start: its guard (guard.py) as a process of its own that runs
`python -m vllm.entrypoints.openai.api_server`, vLLM's default; or, where
`SPECSWEEP_VLLM_LAUNCHER=1` (the project's tests), forked from a launcher (launcher.py) that
imported vLLM once, so a process that starts many servers imports vLLM once instead of once a
server. Either way the guard leads a new session and process group holding the server and its
engine, and takes it down when its starter dies (a launcher dies with its starter).

The launcher imports vLLM with its starter's environment at its first server; a server gets its
own environment whole, but what vLLM, torch, OpenMP, Hugging Face and Python read while they are
imported comes from the launcher's. So a launcher serves the starts whose variables of those
families (IMPORT_READ) are the ones it was started with, and another is started for others.
One start at a time goes through a launcher; a start from another thread meanwhile is a default
one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

GUARD = Path(__file__).with_name("guard.py")  # run by the vLLM venv's Python
LAUNCHER = Path(__file__).with_name("launcher.py")
# variables read on import (a launcher's are its first start's); the plugin and vLLM's engine
# read the others when a server runs
IMPORT_READ = ("VLLM_", "OMP_", "MKL_", "KMP_", "HF_", "TRANSFORMERS_", "TORCH", "CUDA", "LD_", "PYTHON")
# vLLM reads these when the engine starts (VllmServer sets them a server at a time)
PER_SERVER = ("VLLM_ENABLE_V1_MULTIPROCESSING",)


# who holds this process's launchers: a start appends itself and goes through a launcher only
# if it is first in line (appending is atomic, so one start at a time is), since the exchange
# with a launcher is one request line and one answer line; a start from another thread
# meanwhile is a default one
_in_line: list[object] = []


def guarded(python: str, server_args: list[str], env: dict[str, str], log: Path):
    """The guard of a server `python -m vllm.entrypoints.openai.api_server *server_args`, its
    output to `log`: a Popen, or a Forked where the launcher is asked for and takes it."""
    if os.environ.get("SPECSWEEP_VLLM_LAUNCHER") == "1":
        start = object()
        _in_line.append(start)
        try:
            if _in_line[0] is start and (launcher := _launcher(python, env)) is not None:
                return launcher.fork(["vllm.entrypoints.openai.api_server", *server_args], env, log)
        finally:
            _in_line.remove(start)
    with open(log, "w") as output:  # the guard leads a new process group: the server and its engine
        return subprocess.Popen([python, str(GUARD), python, "-m", "vllm.entrypoints.openai.api_server",
                                 *server_args], stdout=output, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


class Forked:
    """A guard forked by the launcher, with what VllmServer uses of a Popen (the launcher, its
    parent, writes its exit code to `exit_file` when it reaps it)."""

    def __init__(self, pid: int, exit_file: Path):
        self.pid, self.exit_file = pid, exit_file
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.exit_file.is_file():
                self.returncode = int(self.exit_file.read_text())
            elif not os.path.exists(f"/proc/{self.pid}"):  # reaped: its code comes next, unless
                time.sleep(0.5)  # its folder was removed under it (then 1: exited, code unknown)
                self.returncode = int(self.exit_file.read_text()) if self.exit_file.is_file() else 1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"guard {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def _signal(self, signum: int) -> None:
        if self.poll() is None:  # not reaped: the pid is still the guard's
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)


class Launcher:
    """The launcher process (launcher.py) and the one-line exchange with it."""

    def __init__(self, python: str, env: dict[str, str]):
        # a session of its own, as a guard's: a Ctrl-C to its starter's terminal is the
        # starter's to handle (it stops its servers), not the launcher's; its stderr is vLLM's
        # import chatter (a launcher that fails to come up leaves the starts plain, whose logs say why)
        self.process = subprocess.Popen([python, str(LAUNCHER)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                        text=True, start_new_session=True)
        said = json.loads(self.process.stdout.readline() or '{"refused": "it exited"}')
        self.ready = bool(said.get("ready"))

    def alive(self) -> bool:
        return self.ready and self.process.poll() is None

    def fork(self, argv: list[str], env: dict[str, str], log: Path) -> Forked:
        exit_file = log.with_name("guard.exit")
        exit_file.unlink(missing_ok=True)
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "log": str(log), "exit": str(exit_file)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        pid = json.loads(self.process.stdout.readline())["pid"]
        return Forked(pid, exit_file)


# a process's launchers (one question and its answer at a time: `_in_line`)
_launchers: dict[tuple, Launcher | None] = {}


def _launcher(python: str, env: dict[str, str]) -> Launcher | None:
    """The running launcher for this environment's import-time variables, started at need; None
    where one refused (the starts then stay plain)."""
    read = sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_READ) and k not in PER_SERVER)
    key = (python, *read)
    launcher = _launchers.get(key)
    if key not in _launchers or (launcher is not None and not launcher.alive()):
        # nothing of one server's own (its report file and the plugin's switches are read when
        # it runs): the launcher's environment, which /proc shows for every process forked
        # from it, names no server
        base = {k: v for k, v in env.items() if k not in PER_SERVER and not k.startswith("SPECSWEEP_")}
        launcher = _launchers[key] = Launcher(python, base)
        if not launcher.ready:
            launcher = _launchers[key] = None
    return launcher
