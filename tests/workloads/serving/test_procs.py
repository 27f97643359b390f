"""A process group's CPU read from /proc, and the wait until it is quiet, on real processes: a
group spinning as vLLM's busy loop does (two processes, so that it stays above the threshold on
a loaded machine), then sleeping."""

import os
import signal
import subprocess
import sys
import time

import pytest

from workloads.serving.procs import QUIET_CORES, TICKS_PER_S, cores, cpu_ticks, group_pids, wait_quiet

# spins SPIN seconds in two processes (this one and a fork), then both sleep
SPINNER = """
import os, sys, time
os.fork()
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
time.sleep(60)
"""


def _spinning(seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SPINNER, str(seconds)], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(group_pids(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def _busy(group: int, seconds: float = 0.3) -> float:
    pids = group_pids(group)
    before = cpu_ticks(pids)
    time.sleep(seconds)
    return cores(cpu_ticks(pids) - before, seconds)


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_cores_are_ticks_over_the_tick_rate_and_the_window():
    assert cores(TICKS_PER_S, 1.0) == 1.0 and cores(TICKS_PER_S // 2, 0.25) == pytest.approx(2.0, abs=0.1)


def test_the_wait_ends_once_the_group_stops_spinning_and_not_before():
    proc = _spinning(1.5)
    try:
        began = time.monotonic()
        assert _busy(proc.pid, 0.2) > QUIET_CORES  # the harness sees the spinning: a short wait would not do
        waited = wait_quiet(proc.pid)
        assert 1.0 <= time.monotonic() - began <= 4.0 and waited > 0.5
        assert _busy(proc.pid) < QUIET_CORES  # and once it returned, the group is quiet
    finally:
        _stop(proc)


def test_a_group_that_never_quiets_is_waited_for_at_most_the_limit():
    proc = _spinning(60)
    try:
        waited = wait_quiet(proc.pid, limit=0.5)
        assert 0.5 <= waited < 1.5 and _busy(proc.pid, 0.2) > QUIET_CORES
    finally:
        _stop(proc)


def test_a_group_with_no_process_is_quiet_at_once():
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    assert group_pids(proc.pid) == [] and wait_quiet(proc.pid) == 0.0
