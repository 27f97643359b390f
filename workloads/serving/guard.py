"""Run a command (a vLLM server) in a process group of its own, and take the whole group down
when this process is told to stop, when its parent dies, and when it is killed itself.

vLLM's server starts its engine and worker processes in its group; stopped by a signal, it
often leaves them running (holding memory and polling the CPU). This script, run by the vLLM
venv's Python with the stdlib only, is what VllmServer starts, as a group leader. It asks the
kernel for SIGTERM when its parent dies (Linux's PR_SET_PDEATHSIG), and on SIGTERM stops the
server, waits a little, then kills what is left of the group. Ray kills a dead worker's
children with SIGKILL, which no handler sees, so a watchdog process forked from this one gets
SIGTERM when this one dies and kills the group then.
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

GRACE_S = 3  # for the server to stop its engine processes itself (it often does not)


def _signal_on_parent_death() -> None:
    with contextlib.suppress(OSError):  # not Linux: VllmServer.stop is then the only way out
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _kill_group(*_) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)  # the server, its engine processes, and this one


def _watchdog(leader: int) -> None:
    """In the forked child: wait for the leader (this guard) to die, then kill the group."""
    signal.signal(signal.SIGTERM, _kill_group)
    _signal_on_parent_death()
    if os.getppid() != leader:  # it died before the request above took effect
        _kill_group()
    while True:
        signal.pause()


def _fork_watchdog(leader: int) -> int:
    pid = os.fork()
    if pid == 0:
        _watchdog(leader)
    return pid


def _wait_for(pid: int, seconds: float) -> None:
    """Reap `pid` or let `seconds` pass, whichever comes first. Not `Popen.wait`: called from a
    signal handler that interrupted `main`'s own `server.wait()`, which holds the Popen's wait
    lock, so a timed `wait` there could never take it and always ran out its full timeout."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:  # reaped already
            return
        time.sleep(0.02)


def main(start=None) -> int:
    """Lead the group until the server exits; its exit code. `start` starts the server (an
    object with Popen's pid, wait and terminate; the launcher forks it so), else the command
    this script was given."""
    _signal_on_parent_death()
    if os.getppid() == 1:  # the parent died before the request above took effect
        return 1
    leader = os.getpid()
    watchdog = [_fork_watchdog(leader)]

    def reap(signum, frame):  # a killed watchdog: reaped, not left a zombie, and replaced
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(watchdog[0], os.WNOHANG)[0] == watchdog[0]:
                watchdog[0] = _fork_watchdog(leader)

    signal.signal(signal.SIGCHLD, reap)
    server = start() if start is not None else subprocess.Popen(sys.argv[1:])

    def stop(signum, frame):
        server.terminate()
        _wait_for(server.pid, GRACE_S)
        _kill_group()

    signal.signal(signal.SIGTERM, stop)
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
