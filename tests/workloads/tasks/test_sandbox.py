"""Escapes from the code sandbox each fail (score 0) within the limit and leave nothing behind."""

import glob
import os
import tempfile
import time

import pytest

from workloads.tasks.sandbox import Limits, run_python

LIMITS = Limits(wall_s=3.0, memory_mb=512)


def sandbox_dirs(root):
    return set(glob.glob(os.path.join(root, "specsweep-sandbox-*")))


def sandbox_processes(root):
    """Sandboxed processes whose directory is under `root` (each gets its directory as TMPDIR),
    not those of another test process running sandboxes meanwhile."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"sandbox_child.py" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"TMPDIR={root}/".encode() in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


@pytest.fixture
def outside(tmp_path):
    """A file path outside the sandbox that an escape would create."""
    return tmp_path / "escaped"


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The system temporary directory, for this test alone: the sandboxes it runs make their
    directories here, apart from those another test process makes meanwhile."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


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
    # io_uring_setup: its socket ops would create sockets past a filter on socket() alone
    "io_uring": ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                 "assert libc.syscall(425, 8, ctypes.create_string_buffer(120)) >= 0\n"),
    "socketpair": ("import ctypes\nfds = (ctypes.c_int * 2)()\n"
                   "assert ctypes.CDLL(None).socketpair(1, 2, 0, fds) == 0\n"),  # AF_UNIX, SOCK_DGRAM
    "capabilities": ("line = next(l for l in open('/proc/self/status') if l.startswith('CapEff'))\n"
                     "assert int(line.split()[1], 16) != 0\n"),
    "disk flood": "for i in range(64):\n    open('f%d' % i, 'wb').write(b'x' * (15 << 20))\n",
}


@pytest.mark.parametrize("name", list(ESCAPES))
def test_escape_fails_in_time_and_leaves_nothing(name, outside, private_tmp, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_TEST_SECRET", "hunter2")
    readme = os.path.join(os.path.dirname(__file__), "test_sandbox.py")
    before = sandbox_dirs(private_tmp)
    start = time.perf_counter()
    result = run_python(ESCAPES[name].format(outside=outside, readme=readme), LIMITS)
    assert not result.passed, result
    assert time.perf_counter() - start < LIMITS.wall_s + 2
    assert not outside.exists()
    assert sandbox_dirs(private_tmp) == before == set()
    assert sandbox_processes(private_tmp) == []
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


def test_a_datagram_to_a_unix_socket_outside_never_arrives(tmp_path):
    """socketpair(AF_UNIX, SOCK_DGRAM) + sendto(path) once delivered to a socket outside."""
    import socket

    path = str(tmp_path / "listener")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    listener.setblocking(False)
    program = f"""import ctypes, struct
libc = ctypes.CDLL(None, use_errno=True)
fds = (ctypes.c_int * 2)()
libc.socketpair(1, 2, 0, fds)
address = struct.pack("H", 1) + {path.encode()!r}.ljust(108, b"\\0")
sent = libc.sendto(fds[0], b"escaped", 7, 0, address, len(address))
fd = libc.socket(1, 2, 0)
sent2 = libc.sendto(fd, b"escaped", 7, 0, address, len(address))
assert sent == 7 or sent2 == 7
"""
    try:
        result = run_python(program, LIMITS)
        assert not result.passed
        with pytest.raises(BlockingIOError):
            listener.recv(64)
    finally:
        listener.close()


def test_an_output_flood_stays_out_of_the_callers_memory():
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_python("import os\nchunk = b'x' * (1 << 20)\nfor _ in range(256):\n    os.write(2, chunk)\n"
                        "raise SystemExit(3)\n", Limits(wall_s=8.0, memory_mb=512))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert not result.passed and "stderr was 268435" in result.detail and "were kept" in result.detail
    assert grown_mb < 64


def test_the_layers_say_what_is_in_force():
    layers = run_python("pass\n", LIMITS).layers.split("+")
    assert {"seccomp", "landlock", "rlimits", "stubs"} <= set(layers)
    if os.getuid() == 0:  # root: no capabilities (or nobody); "quota" where a tmpfs can be mounted
        assert "nocaps" in layers or "nobody" in layers
