"""Loopback ports: a free one for a server to bind, and which processes of a group listen on
one (how a started server is told from another process that took its port)."""

from __future__ import annotations

import contextlib
import os
import socket

from workloads.serving.procs import group_pids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_pids(port: int, group: int) -> set[int]:
    """The processes of process group `group` that listen on loopback TCP `port` (Linux's
    /proc: the listening sockets' inodes, then the group's file descriptors); None where /proc
    cannot tell."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    found = set()
    for pid in group_pids(group):
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                found.add(pid)
    return found
