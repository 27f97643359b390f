"""A vLLM server leaves no process behind: not when stopped, not when the process that
started it is killed with requests in flight."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.needs_vllm import needs_vllm

pytestmark = needs_vllm

# a process that starts the toy DFlash server, puts 4 requests in flight and waits to be killed
STARTER = """
import threading, time
from tests.workloads.serving.engines import DFLASH
from workloads.models.pairspec import BUNDLED
from workloads.serving.load import serve
from workloads.serving.vllm import EngineSettings, VllmServer
server = VllmServer(EngineSettings.of(BUNDLED["toy-dflash"], DFLASH))
server.start()
for _ in range(4):
    threading.Thread(target=serve, args=(server, [[1, 2, 3]] * 50, DFLASH), daemon=True).start()
print(server.process.pid, flush=True)
time.sleep(600)
"""


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(autouse=True)
def plain_starts(monkeypatch):
    """vLLM's default start (guard.py as a process of its own), where the other test files fork
    their servers from a launcher; the first test takes both ways."""
    monkeypatch.setenv("SPECSWEEP_VLLM_LAUNCHER", "0")


@pytest.mark.parametrize("launcher", ["0", "1"])
def test_killing_the_process_that_started_a_server_takes_down_all_of_its_processes(launcher):
    # the launcher forks only a one-thread vLLM import: one OpenMP thread, as under `make test`
    env = {**os.environ, "SPECSWEEP_VLLM_LAUNCHER": launcher}
    if launcher == "1":
        env["OMP_NUM_THREADS"] = "1"
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True,
                               cwd=os.getcwd(), env=env)
    try:
        group = int(starter.stdout.readline())
        time.sleep(2)  # requests in flight
        members = subprocess.run(["pgrep", "-g", str(group)], capture_output=True, text=True).stdout.split()
        assert len(members) >= 3  # the guard, the API server, the engine core (and its worker)
        if launcher == "1":  # forked from the launcher, which the starter started
            assert str(group) not in subprocess.run(["pgrep", "-P", str(starter.pid)], capture_output=True,
                                                    text=True).stdout.split()
    finally:  # the kill under test, also where a check above failed (nothing left for 10 minutes)
        starter.send_signal(signal.SIGKILL)
        starter.wait()
    deadline = time.monotonic() + 60
    while _alive(group) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(group), subprocess.run(["ps", "-o", "pid,comm", "-g", str(group)], capture_output=True,
                                             text=True).stdout


def _watchdogs(guard: int) -> list[tuple[int, str]]:
    """(pid, state) of the guard's children that run the guard itself: its watchdog."""
    found = []
    for pid in subprocess.run(["pgrep", "-P", str(guard)], capture_output=True, text=True).stdout.split():
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if state == "Z" or b"guard.py" in f.read():
                found.append((int(pid), state))
    return found


def test_a_guard_killed_outright_still_takes_down_its_server():
    """Ray kills a dead worker's children with SIGKILL, which no handler sees: the guard's
    watchdog does; a watchdog killed first is reaped (no zombie) and replaced."""
    from tests.workloads.serving.engines import DFLASH
    from workloads.models.pairspec import BUNDLED
    from workloads.serving.vllm import EngineSettings, VllmServer

    server = VllmServer(EngineSettings.of(BUNDLED["toy-dflash"], DFLASH))
    server.start()
    group = server.process.pid
    [(first, _)] = _watchdogs(group)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while [w for w, _ in _watchdogs(group)] in ([], [first]) and time.monotonic() < deadline:
        time.sleep(0.1)
    [(second, state)] = _watchdogs(group)
    assert second != first and state != "Z"
    os.kill(group, signal.SIGKILL)
    server.process.wait()
    deadline = time.monotonic() + 30
    while _alive(group) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(group)


def test_a_server_that_stops_on_sigterm_is_not_held_for_the_whole_grace():
    """The guard waits for its server at most GRACE_S after SIGTERM, and no longer than the
    server takes to exit: its wait runs in a signal handler that interrupted the guard's own
    wait on the server, so it must not wait on the same Popen (whose lock that wait holds)."""
    from workloads.serving.guard import GRACE_S

    guard = Path(__file__).parents[3] / "workloads" / "serving" / "guard.py"
    child = "import time; print('up', flush=True); time.sleep(600)"  # exits at once on SIGTERM
    process = subprocess.Popen([sys.executable, str(guard), sys.executable, "-c", child],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stdout.readline().strip() == "up"
    began = time.monotonic()
    process.terminate()
    process.wait(30)
    assert time.monotonic() - began < GRACE_S / 2
    deadline = time.monotonic() + 10  # the group's last member (the watchdog) reaped by init
    while _alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(process.pid)
