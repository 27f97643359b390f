"""A server's process group as Linux's /proc shows it: its processes, the CPU they ask for,
and when they have gone quiet.

vLLM's processes keep polling their queues after a server's last step where the model runs in
a worker process of its own (vLLM's default on CPU): the engine core and the worker spin in
the shared-memory broadcast's busy loop, one core for a second in vLLM 0.32, then sleep; where
the model runs in the engine core (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) nothing polls. A load
timed on another server while they spin loses that core, so a timed load waits until the
server that served last is quiet: it asked for less than QUIET_CORES over a window of WINDOW_S,
measured rather than assumed (a fixed wait either wastes the difference or falls short of a
slower machine's polling), and at most MAX_WAIT_S. What a process asks for is its time on a CPU
plus its time waiting for one (each thread's schedstat: a process may poll from a thread other
than its main one): on a machine busy with other work a spinning process gets less than a core
but is runnable all the time, so its CPU time alone would read as quiet. The kernel adds a
wait to schedstat only once the process runs again, so a process still waiting for a CPU when
a window ends has not had that wait counted yet: a window ending with a process runnable
(state R) is not quiet, whatever it read.
"""

from __future__ import annotations

import contextlib
import os
import time

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
QUIET_CORES = 0.5  # a window below this is quiet: the busy loop asks for a whole core
WINDOW_S = 0.1
MAX_WAIT_S = 1.5  # never longer than the fixed wait this replaced


def stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat (`pid` a process id, or PID/task/TID for one of its
    threads) after the ")" that closes the name (state is field 0 of them, ppid 1, pgrp 2,
    starttime 19, in clock ticks since boot)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def group_pids(group: int) -> list[int]:
    """The processes of process group `group` (none where /proc cannot tell)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat_fields(pid)[2]) == group:
                found.append(int(pid))
    return found


def threads(pids: list[int]) -> list[str]:
    """Every thread of `pids` as PID/task/TID under /proc: /proc/PID itself reads as its main
    thread alone, and a process may poll from another thread."""
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            found += [f"{pid}/task/{tid}" for tid in os.listdir(f"/proc/{pid}/task")]
    return found


def demand_ns(pids: list[int]) -> int:
    """Nanoseconds the threads of `pids` have run on a CPU or waited runnable for one so far
    (the first two fields of each thread's schedstat; the ones that have ended: 0)."""
    total = 0
    for thread in threads(pids):
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{thread}/schedstat") as f:
                running, waiting = f.read().split()[:2]
            total += int(running) + int(waiting)
    return total


def runnable(pids: list[int]) -> bool:
    """Whether a thread of `pids` is running or waiting for a CPU now (state R in its stat)."""
    for thread in threads(pids):
        with contextlib.suppress(OSError, IndexError):
            if stat_fields(thread)[0] == "R":
                return True
    return False


def cores(nanoseconds: int, seconds: float) -> float:
    """Cores asked for on average over `seconds` by processes that ran or waited to run for
    `nanoseconds`: nanoseconds / (10⁹ · seconds)."""
    return nanoseconds / (1e9 * seconds)


def wait_quiet(group: int, quiet: float = QUIET_CORES, window: float = WINDOW_S,
               limit: float = MAX_WAIT_S) -> float:
    """Wait until process group `group` asked for less than `quiet` cores over a window of
    `window` seconds and none of its processes is runnable as the window ends (at once where it
    has no process), at most `limit` seconds; the seconds waited."""
    began = time.monotonic()
    pids = group_pids(group)
    if not pids:
        return 0.0
    before, at = demand_ns(pids), time.monotonic()
    while True:
        time.sleep(window)
        asked, now = demand_ns(pids), time.monotonic()
        if (cores(asked - before, now - at) < quiet and not runnable(pids)) or now - began >= limit:
            return now - began
        before, at = asked, now
