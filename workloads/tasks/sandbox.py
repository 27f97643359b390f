"""Execute untrusted generated code: a separate confined process in a throwaway directory.

`run_python(program)` writes the program into a fresh temporary directory and runs it with
`python -I -S sandbox_child.py` there: scrubbed environment (no secrets, HOME is the
throwaway dir), its own session, a wall-time limit enforced here and CPU / memory / file /
process limits enforced by the kernel (see sandbox_child.py for the layers). On timeout the
whole process group is killed; the directory is removed whatever happens. A program passes
when it exits with status 0.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

_CHILD = Path(__file__).with_name("sandbox_child.py")


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    memory_mb: int = 1024


@dataclass(frozen=True)
class Execution:
    passed: bool
    status: str  # passed | failed | timeout
    detail: str  # last lines of stderr, or why it stopped
    wall_s: float
    layers: str  # confinement layers that were in force


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_python(program: str, limits: Limits = Limits()) -> Execution:
    """Run `program` (Python source) confined; see the module docstring."""
    workdir = tempfile.mkdtemp(prefix="specsweep-sandbox-")
    start = time.perf_counter()
    try:
        Path(workdir, "program.py").write_text(program)
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        cpu_s = max(1, int(limits.wall_s) + 1)
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(_CHILD), str(limits.memory_mb), str(cpu_s)],
            cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
        )
        try:
            _, err = proc.communicate(timeout=limits.wall_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            _, err = proc.communicate()
            timed_out = True
        finally:
            _kill_group(proc)  # anything left in the group (RLIMIT_NPROC allows no children)
        text = err.decode(errors="replace")
        layers = text.split("\n", 1)[0].removeprefix("sandbox: ") if text.startswith("sandbox: ") else ""
        stderr = text.split("\n", 1)[1] if layers else text
        wall = time.perf_counter() - start
        if timed_out:
            return Execution(False, "timeout", f"killed after {limits.wall_s:g} s", wall, layers)
        tail = "\n".join(stderr.strip().splitlines()[-3:])
        if proc.returncode == 0:
            return Execution(True, "passed", "", wall, layers)
        why = tail or f"exit status {proc.returncode}"
        if proc.returncode < 0:
            why = f"killed by signal {-proc.returncode}" + (f": {tail}" if tail else "")
        return Execution(False, "failed", why, wall, layers)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
