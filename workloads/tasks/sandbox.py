"""Execute untrusted generated code: a separate confined process in a throwaway directory.

`run_python(program)` writes the program into a fresh temporary directory and runs it with
`python -I -S sandbox_child.py` there: scrubbed environment (no secrets, HOME is the
throwaway dir), its own session, a wall-time limit enforced here and CPU / memory / file /
process limits enforced by the kernel (see sandbox_child.py for the layers). On timeout the
whole process group is killed; the directory is removed whatever happens. A program passes
when the harness reports that it, and then its checks, ran to their end (a token on a
pipe, not the exit status: sandbox_child.py).

What the caller holds stays bounded whatever the program does: of its stderr only the
first line (the layers) and the last OUTPUT_CAP bytes are kept (the detail says how much
was cut), stdout is discarded, and where the child could not mount its own size-limited
directory (not root) a watchdog here kills it once the directory passes QUOTA_MB.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

_CHILD = Path(__file__).with_name("sandbox_child.py")
OUTPUT_CAP = 64 << 10  # bytes of stderr kept (its tail)
QUOTA_MB = 64  # the directory's total size (sandbox_child.QUOTA_MB, enforced there as root)
_POLL_S = 0.02


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    memory_mb: int = 1024


@dataclass(frozen=True)
class Checks:
    """Test code run by the harness after the program, in its namespace; `guarded`: the
    program's functions it calls, whose results must not be of a type the program defined."""

    source: str
    guarded: tuple[str, ...] = ()


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


class _Capture:
    """Keeps a stream's first line and its last `cap` bytes, read without blocking as the
    program runs (`wait`, the watchdog's pause between polls, reads whenever the stream has
    something): memory stays bounded however much the program writes, and a flood is read as
    fast as it comes, so it ends by its own exit or by the watchdog's limits."""

    def __init__(self, stream, cap: int = OUTPUT_CAP):
        self.fd, self.cap = stream.fileno(), cap
        os.set_blocking(self.fd, False)
        self.first, self.tail, self.total = b"", bytearray(), 0

    def wait(self, seconds: float) -> None:
        """Read what the stream brings for `seconds` (after its end, only wait)."""
        end = time.perf_counter() + seconds
        while (left := end - time.perf_counter()) > 0:
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready and not self.drain():
                time.sleep(max(0.0, end - time.perf_counter()))
                return

    def drain(self) -> bool:
        """Read what the stream holds now (to its end once the program has gone); False once
        the stream has ended."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            if self.total == 0 and b"\n" in chunk[:4096]:
                line, _, chunk = chunk.partition(b"\n")
                self.first = line + b"\n"
            self.total += len(chunk)
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.cap)]

    def text(self) -> tuple[str, str, str]:
        """(first line, the tail of the rest, a note when something was cut)."""
        self.drain()
        cut = self.total - len(self.tail)
        note = f" [stderr was {self.total} bytes; only its last {len(self.tail)} were kept]" if cut else ""
        return self.first.decode(errors="replace"), self.tail.decode(errors="replace"), note


def _size(path: str) -> int:
    """Bytes in the files under `path`."""
    total = 0
    with os.scandir(path) as entries:
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                total += _size(e.path)
            elif e.is_file(follow_symlinks=False):
                total += e.stat(follow_symlinks=False).st_size
    return total


def run_python(program: str, limits: Limits = Limits(), checks: Checks | None = None) -> Execution:
    """Run `program` (Python source) confined, then `checks`; see the module docstring."""
    workdir = tempfile.mkdtemp(prefix="specsweep-sandbox-")
    start = time.perf_counter()
    token = secrets.token_hex(16).encode()
    token_r, token_w = os.pipe()
    result_r, result_w = os.pipe()
    try:
        Path(workdir, "program.py").write_text(program)
        if checks is not None:
            Path(workdir, "checks.py").write_text(checks.source)
        os.write(token_w, token)
        os.close(token_w)
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        cpu_s = max(1, int(limits.wall_s) + 1)
        guarded = ",".join(checks.guarded) if checks else ""
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(_CHILD), str(limits.memory_mb), str(cpu_s), str(token_r),
             str(result_w), guarded],
            cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True, pass_fds=(token_r, result_w),
        )
        os.close(result_w)
        result_w = -1
        capture = _Capture(proc.stderr)
        stopped = ""
        try:
            deadline = start + limits.wall_s
            while proc.poll() is None:
                if time.perf_counter() > deadline:
                    stopped = f"killed after {limits.wall_s:g} s"
                    break
                if _size(workdir) > QUOTA_MB << 20:
                    stopped = f"its directory passed {QUOTA_MB} MiB"
                    break
                capture.wait(_POLL_S)
        finally:
            _kill_group(proc)  # anything left in the group (RLIMIT_NPROC allows no children)
        first, stderr, cut = capture.text()
        os.set_blocking(result_r, False)
        try:
            reported = os.read(result_r, 4096)
        except BlockingIOError:
            reported = b""
        layers = first.strip().removeprefix("sandbox: ") if first.startswith("sandbox: ") else ""
        if not layers:
            stderr = first + stderr
        wall = time.perf_counter() - start
        if stopped.startswith("killed after"):
            return Execution(False, "timeout", stopped + cut, wall, layers)
        if stopped:
            return Execution(False, "failed", f"killed: {stopped}{cut}", wall, layers)
        tail = "\n".join(stderr.strip().splitlines()[-3:])
        if reported == token:
            return Execution(True, "passed", "", wall, layers)
        if proc.returncode == 0:  # exit status 0 without the harness's word
            why = tail or "exited before its checks had run"
            return Execution(False, "failed", why + cut, wall, layers)
        why = tail or f"exit status {proc.returncode}"
        if proc.returncode < 0:
            why = f"killed by signal {-proc.returncode}" + (f": {tail}" if tail else "")
        return Execution(False, "failed", why + cut, wall, layers)
    finally:
        for fd in (token_r, result_r, result_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
