"""A process group's demand for CPU read from /proc, and the wait until it is quiet, on real
processes: a group spinning as vLLM's busy loop does, then sleeping; also while other processes
keep every core busy (a spinning process then runs less than half a core, but asks for one)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from workloads.serving.procs import QUIET_CORES, cores, demand_ns, group_pids, runnable, wait_quiet

# spins for argv[1] seconds in its main thread or (argv[2] "thread") in another while the main
# thread waits for it, then sleeps: one core asked for, as vLLM's busy loop
SPINNER = """
import sys, threading, time
def spin():
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        pass
if sys.argv[2] == "thread":
    spinner = threading.Thread(target=spin)
    spinner.start()
    spinner.join()
else:
    spin()
time.sleep(60)
"""


def _spinning(seconds: float, where: str = "main") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SPINNER, str(seconds), where], start_new_session=True)
    deadline = time.monotonic() + 10
    while not group_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def _busy(group: int, seconds: float = 0.3) -> float:
    pids = group_pids(group)
    before = demand_ns(pids)
    time.sleep(seconds)
    return cores(demand_ns(pids) - before, seconds)


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_cores_are_nanoseconds_asked_over_the_window():
    assert cores(10**9, 1.0) == 1.0 and cores(5 * 10**8, 0.25) == 2.0


@pytest.fixture(params=["idle", "every core busy"])
def machine(request):
    """Nothing else, or two spinning processes a core beside the group (a loaded machine: the
    group's spinner then runs about a third of a core)."""
    hogs = [] if request.param == "idle" else [_spinning(120) for _ in range(2 * (os.cpu_count() or 1))]
    yield
    for hog in hogs:
        _stop(hog)


@pytest.mark.parametrize("where", ["main", "thread"])
def test_the_wait_ends_once_the_group_stops_spinning_and_not_before(machine, where):
    proc = _spinning(1.2, where)  # ends before the wait's limit (1.5 s)
    try:
        began = time.monotonic()
        assert _busy(proc.pid, 0.2) > QUIET_CORES  # the harness sees the spinning: a short wait would not do
        waited = wait_quiet(proc.pid)
        assert 1.0 <= time.monotonic() - began <= 4.0 and waited > 0.5
        assert _busy(proc.pid) < QUIET_CORES  # and once it returned, the group is quiet
    finally:
        _stop(proc)


def test_a_group_that_never_quiets_is_waited_for_at_most_the_limit(machine):
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


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_spinning_group_is_runnable_and_a_sleeping_one_is_not(machine, where):
    """What keeps a window that read quiet from ending the wait: a spinner waiting for a CPU
    has not had that wait counted yet (the kernel adds it once the spinner runs again)."""
    proc = _spinning(1.0, where)
    try:
        assert _busy(proc.pid, 0.2) > QUIET_CORES and runnable(group_pids(proc.pid))  # in its loop
        deadline = time.monotonic() + 10
        while runnable(group_pids(proc.pid)) and time.monotonic() < deadline:  # until it sleeps
            time.sleep(0.05)
        assert time.monotonic() - deadline < -1 and not runnable(group_pids(proc.pid))
    finally:
        _stop(proc)
