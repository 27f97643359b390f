"""A server's process group as Linux's /proc shows it: its processes, the CPU they use, and
when they have gone quiet.

vLLM's processes keep polling their queues after a server's last step where the model runs in
a worker process of its own (vLLM's default on CPU): the engine core and the worker spin in
the shared-memory broadcast's busy loop, one core for a second in vLLM 0.32, then sleep; where
the model runs in the engine core (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) nothing polls. A load
timed on another server while they spin loses that core, so a timed load waits until the
server that served last is quiet: less than QUIET_CORES over a window of WINDOW_S, measured
rather than assumed (a fixed wait either wastes the difference or falls short of a slower
machine's polling), and at most MAX_WAIT_S.
"""

from __future__ import annotations

import contextlib
import os
import time

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
QUIET_CORES = 0.5  # a window below this is quiet: the busy loop holds a whole core (1.0-1.1 measured)
WINDOW_S = 0.1
MAX_WAIT_S = 5.0


def stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the ")" that closes the process's name (pgrp is
    field 2 of them, utime 11, stime 12, starttime 19, in clock ticks since boot)."""
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


def cpu_ticks(pids: list[int]) -> int:
    """User and system CPU time of `pids` so far, in clock ticks (the ones that have ended: 0)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat_fields(pid)
            total += int(fields[11]) + int(fields[12])
    return total


def cores(ticks: int, seconds: float) -> float:
    """Cores busy on average over `seconds` that used `ticks` clock ticks of CPU:
    ticks / (TICKS_PER_S · seconds)."""
    return ticks / (TICKS_PER_S * seconds)


def wait_quiet(group: int, quiet: float = QUIET_CORES, window: float = WINDOW_S,
               limit: float = MAX_WAIT_S) -> float:
    """Wait until process group `group` used less than `quiet` cores over a window of `window`
    seconds (at once where it has no process), at most `limit` seconds; the seconds waited."""
    began = time.monotonic()
    pids = group_pids(group)
    if not pids:
        return 0.0
    before, at = cpu_ticks(pids), time.monotonic()
    while True:
        time.sleep(window)
        ticks, now = cpu_ticks(pids), time.monotonic()
        if cores(ticks - before, now - at) < quiet or now - began >= limit:
            return now - began
        before, at = ticks, now
