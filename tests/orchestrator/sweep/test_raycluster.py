"""Ray start-up: an interrupted local `ray.init` leaves no Ray process behind."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.sweep import raycluster

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
    from orchestrator.sweep.spec import ClusterSpec

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

