"""Escapes from the code sandbox each fail (score 0) within the limit and leave nothing behind."""

import glob
import os
import tempfile
import time

import pytest

from workloads.tasks.sandbox import Limits, run_python

LIMITS = Limits(wall_s=3.0, memory_mb=512)


def sandbox_dirs():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "specsweep-sandbox-*")))


def sandbox_processes():
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"sandbox_child.py" in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


@pytest.fixture
def outside(tmp_path):
    """A file path outside the sandbox that an escape would create."""
    return tmp_path / "escaped"


ESCAPES = {
    "infinite loop": "while True:\n    pass\n",
    "sleep past the limit": "import time\ntime.sleep(60)\n",
    "fork bomb": "import os\nwhile True:\n    os.fork()\n",
    "ctypes fork bomb": "import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    assert libc.fork() >= 0\n",
    "huge allocation": "x = bytearray(16 << 30)\n",
    "os.system": "import os\nos.system('touch {outside}')\n",
    "subprocess": "import subprocess\nsubprocess.run(['touch', '{outside}'])\n",
    "write outside": "open('{outside}', 'w').write('x')\n",
    "read caller files": "print(open('{readme}').read())\n",
    "network": "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n",
    "raw socket": "import _socket\n_socket.socket().connect(('127.0.0.1', 9))\n",
    "udp": ("import _socket\ns = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)\n"
            "s.sendto(b'x', ('127.0.0.1', 9))\n"),
    "thread": "import threading\nthreading.Thread(target=print).start()\n",
    "secrets in env": "import os\nassert 'SPECSWEEP_TEST_SECRET' not in os.environ\nraise SystemExit(1)\n",
}


@pytest.mark.parametrize("name", list(ESCAPES))
def test_escape_fails_in_time_and_leaves_nothing(name, outside, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_TEST_SECRET", "hunter2")
    readme = os.path.join(os.path.dirname(__file__), "test_sandbox.py")
    before = sandbox_dirs()
    start = time.perf_counter()
    result = run_python(ESCAPES[name].format(outside=outside, readme=readme), LIMITS)
    assert not result.passed, result
    assert time.perf_counter() - start < LIMITS.wall_s + 2
    assert not outside.exists()
    assert sandbox_dirs() == before
    assert sandbox_processes() == []
    assert "hunter2" not in result.detail


def test_ordinary_code_runs_and_may_use_its_own_directory():
    result = run_python("import math, re, collections\nopen('f.txt', 'w').write('ok')\n"
                        "assert open('f.txt').read() == 'ok' and math.gcd(4, 6) == 2\n", LIMITS)
    assert result.passed and result.status == "passed"
    assert "seccomp" in result.layers and "landlock" in result.layers


def test_failure_detail_shows_the_error_and_timeout_is_labelled():
    failed = run_python("assert 1 + 1 == 3, 'arithmetic'\n", LIMITS)
    assert failed.status == "failed" and "AssertionError: arithmetic" in failed.detail
    slow = run_python("while True: pass\n", Limits(wall_s=1.0))
    assert slow.status == "timeout" and "1 s" in slow.detail
