"""Ray start-up: an interrupted local `ray.init` leaves no Ray process behind; a local head
that does not come up (its raylet frozen; two sweeps starting Ray at once) is one line and
leaves no sweep state."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.sweep import raycluster
from tests.orchestrator.test_sweep_cli import GOOD

# Sends itself SIGINT as soon as a process of its Ray session exists (Ray spawns them mid-`ray.init`;
# the first, the GCS server, names the session directory), then reports whether the init had finished.
# Ray installs its own SIGINT handler part-way through `ray.init` (it raises SystemExit), so which
# exception arrives depends on where the signal lands. A background job of a non-interactive shell
# (CI started with `cmd &`) inherits SIGINT ignored, so the child puts Python's handler back first.
INTERRUPTED = textwrap.dedent("""
    import os, signal, threading, time
    from pathlib import Path
    import ray
    from orchestrator.sweep import raycluster
    from orchestrator.spec.sweep import ClusterSpec

    signal.signal(signal.SIGINT, signal.default_int_handler)

    def watch():
        while True:
            for proc in Path("/proc").glob("[0-9]*"):
                try:
                    command = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"/session_" in command and f"_{os.getpid()}/".encode() in command:
                    os.kill(os.getpid(), signal.SIGINT)
                    return
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()
    try:
        raycluster.start(ClusterSpec(slots=1), None)
        time.sleep(30)
    except (KeyboardInterrupt, SystemExit):  # once Ray's own handler is installed, SIGINT exits
        print("interrupted", ray.is_initialized(), flush=True)
""")


def _session_processes(pid: int) -> list[str]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{raycluster.temp_dir()}/session_" in command and f"_{pid}/" in command:
            found.append(command[:120])
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reaping reads /proc (Linux)")
def test_sigint_during_ray_start_leaves_no_ray_process():
    # a fresh local start: no Ray setting an earlier test or the shell left in the environment
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    out, err = proc.communicate(timeout=120)
    # the interrupt landed inside ray.init
    assert out.strip() == "interrupted False", (proc.returncode, err[-2000:])
    assert _session_processes(proc.pid) == []



def _sweep(tmp_path, name: str) -> subprocess.Popen:
    """`specsweep run` of the smallest sweep, named `name`, as a process of its own."""
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump({**GOOD, "name": name}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    cli = "from orchestrator.cli import main; main()"
    return subprocess.Popen([sys.executable, "-c", cli, "run", str(spec), "--root", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _freeze_raylet(pid: int, timeout: float = 60) -> int:
    """SIGSTOP the raylet of process `pid`'s local Ray session as soon as it exists (before it
    registers its node); its pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                command = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"raylet" in command.split(b"\0")[0] and f"_{pid}/".encode() in command:
                os.kill(int(proc.name), signal.SIGSTOP)
                return int(proc.name)
        time.sleep(0.005)
    raise AssertionError("no raylet started")


@pytest.mark.slow(5)  # Ray's own 30 s wait for the node (5: taken early, tests/conftest.py)
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc (Linux)")
def test_a_local_ray_that_does_not_come_up_is_one_line_and_leaves_nothing(tmp_path):
    sweep = _sweep(tmp_path, "frozen")
    raylet = _freeze_raylet(sweep.pid)
    try:
        out, err = sweep.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(raylet, signal.SIGKILL)
    assert sweep.returncode == 2, err[-3000:]
    last = err.splitlines()[-1]  # after the progress bar: one line
    assert last.startswith("error: cluster: the local Ray head did not start (Exception: The current node "
                           "timed out during startup"), err[-3000:]
    assert last.endswith("run the sweep again") and err.count("error") == 1 and "Traceback" not in err
    assert not (tmp_path / ".specsweep" / "frozen").exists()  # no spec, journal, shards nor lock
    assert not (tmp_path / ".specsweep" / "frozen.lock").exists()
    assert _session_processes(sweep.pid) == []  # with no state left, a plain rerun is a new sweep


@pytest.mark.slow(5)  # two sweeps
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc (Linux)")
def test_two_sweeps_starting_ray_at_once_each_finish_or_fail_in_one_line(tmp_path):
    sweeps = {name: _sweep(tmp_path, name) for name in ("first", "second")}
    for name, sweep in sweeps.items():
        out, err = sweep.communicate(timeout=600)
        if sweep.returncode == 0:
            assert "frontier of " + name in err
        else:  # Ray did not come up in time on a loaded machine: one line, nothing left behind
            last = err.splitlines()[-1]
            assert sweep.returncode == 2 and last.startswith("error: cluster: "), err
            assert "Traceback" not in err
            assert not (tmp_path / ".specsweep" / name).exists()
        assert _session_processes(sweep.pid) == []


def _kill_raylet_once_workers_load(pid: int, timeout: float = 120) -> None:
    """SIGKILL the raylet of process `pid`'s local Ray session once its workers run (another
    process stopping the node while the workers load their pairs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                procs.append((int(proc.name), (proc / "cmdline").read_bytes()))
            except OSError:
                continue
        session = f"_{pid}/".encode()
        raylet = [p for p, command in procs if b"raylet" in command.split(b"\0")[0] and session in command]
        workers = [p for p, command in procs if b"PairWorker" in command]  # an actor, loading its pairs
        if raylet and workers:
            os.kill(raylet[0], signal.SIGKILL)
            return
        time.sleep(0.01)
    raise AssertionError("no Ray worker started")


@pytest.mark.slow(5)  # a sweep, then its resume
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc (Linux)")
def test_the_ray_node_lost_while_workers_load_leaves_nothing_or_a_sweep_that_resumes(tmp_path):
    sweep = _sweep(tmp_path, "lost")
    _kill_raylet_once_workers_load(sweep.pid)
    out, err = sweep.communicate(timeout=180)
    assert sweep.returncode != 0 and "Traceback" not in err, err[-3000:]
    if (tmp_path / ".specsweep" / "lost").exists():  # Ray ended the driver itself: resumable
        resumed = subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()", "run",
                                  str(tmp_path / "lost.yaml"), "--root", str(tmp_path), "--resume"],
                                 capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    else:  # the driver saw the loss: one line, nothing left
        last = err.splitlines()[-1]
        assert last.startswith("error: cluster: ") and last.endswith("run the sweep again"), err[-3000:]
        assert not (tmp_path / ".specsweep" / "lost.lock").exists()
    assert _session_processes(sweep.pid) == []


def _kill_head_once_a_trial_completes(pid: int, journal: Path, timeout: float = 300) -> None:
    """SIGKILL the raylet and GCS server of process `pid`'s local Ray session once its study
    journal records a completed trial (`ray stop --force` on that one session, mid-sweep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if journal.exists() and '"state":1' in journal.read_text().replace(" ", ""):  # TrialState.COMPLETE
            break
        time.sleep(0.05)
    else:
        raise AssertionError("no trial completed")
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            program = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        head = b"raylet" in program[0] or b"gcs_server" in program[0]
        if head and f"_{pid}/".encode() in b" ".join(program):
            os.kill(int(proc.name), signal.SIGKILL)


@pytest.mark.slow(5)  # a sweep, then its resume
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc (Linux)")
def test_the_ray_node_lost_mid_sweep_is_one_line_and_the_sweep_resumes(tmp_path):
    spec = tmp_path / "mid.yaml"
    space = {**GOOD["space"], "block": [2, 3, 4, 5, 6, 7, 8, 9], "max_new_tokens": 16}
    spec.write_text(yaml.safe_dump({**GOOD, "name": "mid", "task": {"name": "arith", "limit": 12},
                                    "space": space, "search": {**GOOD["search"], "trials": 8}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    run = [sys.executable, "-c", "from orchestrator.cli import main; main()", "run", str(spec),
           "--root", str(tmp_path)]
    sweep = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _kill_head_once_a_trial_completes(sweep.pid, tmp_path / ".specsweep" / "mid" / "study.journal")
    started = time.monotonic()
    out, err = sweep.communicate(timeout=180)
    assert sweep.returncode == 1 and "Traceback" not in err, err[-3000:]
    last = err.splitlines()[-1]
    assert last.startswith("error: cluster: the Ray node was lost mid-sweep (its "), err[-3000:]
    assert last.endswith("rerun the sweep with --resume") and err.count("error:") == 1, err[-3000:]
    assert time.monotonic() - started < 50  # before Ray's own minute runs out
    assert _session_processes(sweep.pid) == []
    resumed = subprocess.run([*run, "--resume"], capture_output=True, text=True, timeout=300, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]  # the lock was freed, the state kept
    assert "frontier of mid" in resumed.stderr
