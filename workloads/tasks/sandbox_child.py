"""Runs inside the sandbox process: confine itself, then execute `program.py` in the cwd.

Started as `python -I -S sandbox_child.py MEMORY_MB CPU_S TOKEN_FD RESULT_FD GUARDED` with a
scrubbed environment in a throwaway directory holding `program.py` and, optionally,
`checks.py`. Standard library only (no site-packages under -S).

A pass is not an exit status (a program can `sys.exit(0)` or `os._exit(0)` its way to one):
after the program and then the checks have run to their end without raising or exiting,
this harness writes a secret token, read from TOKEN_FD before the program ran, to
RESULT_FD, and the caller passes the program only on that exact token. Both files are read
into memory first, so the program cannot rewrite its checks. The functions named in
GUARDED (comma-separated; what the checks call) refuse to return objects of types the
program defined, such as one whose `__eq__` is always true. The token stays in this
process's memory, so a program that deliberately searches its interpreter for it could
still forge a pass; the exits and equality tricks models emit cannot.

Layers, strongest first, each applied when the kernel offers it:

0. privileges: started as root, it mounts a private tmpfs of QUOTA_MB over its directory
   (so the directory's total size is bounded), then drops every capability, and changes to
   the `nobody` user when the interpreter is readable by others (here it often lives under
   root's 0700 home: then uid 0 stays, without capabilities);
1. seccomp: every system call that creates, connects or uses a socket (socket,
   socketpair, connect, bind, listen, accept, sendto, sendmsg, ...), io_uring (its ops
   would reach sockets past the filter), ptrace and fork, vfork, clone and clone3 fail, so
   no network of any kind and no new processes or threads (fork bombs, os.system,
   subprocess);
2. Landlock: reads only under the Python installation and system library dirs, writes only
   in the throwaway dir, no TCP bind/connect, no signals or abstract sockets outside;
3. rlimits: address space, CPU time, file size, and no new processes (RLIMIT_NPROC);
4. Python-level stubs that make process, signal and socket calls raise, so code that tries
   them fails its tests instead of silently carrying on.

(A user + network namespace was tried first: inside it RLIMIT_NPROC no longer counts the
caller's processes, and a ctypes fork bomb ran until the wall-time kill.)

The first line of stderr names the layers in force (`sandbox: ...`).
"""

import ctypes
import os
import resource
import sys

_FS_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_READ = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read file, read dir
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446


def _libc():
    return ctypes.CDLL(None, use_errno=True)


# (audit arch, denied syscall numbers)
_DENIED = {
    # socket..getsockopt, clone, fork, vfork, ptrace, accept4, recvmmsg, sendmmsg, io_uring_*, clone3
    "x86_64": (0xC000003E, (*range(41, 56), 56, 57, 58, 101, 288, 299, 307, 425, 426, 427, 435)),
    # socket..recvmsg, clone, ptrace, accept4, recvmmsg, sendmmsg, io_uring_*, clone3
    "aarch64": (0xC00000B7, (*range(198, 213), 220, 117, 242, 243, 269, 425, 426, 427, 435)),
}
_CHDIR = os.chdir
QUOTA_MB = 64  # the directory's total size, where a tmpfs can be mounted over it
NOBODY = 65534


def _seccomp(libc) -> bool:
    """Install a BPF filter: denied syscalls return EPERM; on x86_64 the x32 ABI is refused."""
    machine = os.uname().machine
    if machine not in _DENIED:
        return False
    arch, denied = _DENIED[machine]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]

    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    n = len(denied)
    code = [(load, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, deny), (load, 0, 0, 0),
            (jge, n + 1, 0, 0x40000000)]  # x32 syscall numbers go to deny
    code += [(jeq, n - i, 0, nr) for i, nr in enumerate(denied)]
    code += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    filters = (Filter * len(code))(*[Filter(*c) for c in code])
    program = Program(len(code), filters)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # PR_SET_SECCOMP, MODE_FILTER


def _landlock(libc, workdir: str) -> bool:
    abi = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return False
    fs = _FS_ABI[max(k for k in _FS_ABI if k <= abi)]

    class Ruleset(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]

    attr = Ruleset(fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    readable = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
                "/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo", "/dev/urandom",
                "/proc/self"}
    rules = [(p, _READ) for p in readable] + [("/dev/null", fs), (workdir, fs)]
    file_rights = fs & ((1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15))
    for path, allowed in rules:
        try:
            fd = os.open(path, os.O_PATH)
        except OSError:
            continue
        allowed &= fs if os.path.isdir(path) else file_rights
        rule = PathBeneath(allowed, fd)
        libc.syscall(_ADD_RULE, ruleset, ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
        os.close(fd)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, required by restrict_self
        return False
    done = libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) == 0
    os.close(ruleset)
    return done


def _quota(libc, workdir: str) -> bool:
    """As root: a private mount namespace with a QUOTA_MB tmpfs over the directory."""
    if os.getuid() != 0 or libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
        return False
    if libc.mount(b"none", b"/", None, ctypes.c_ulong((1 << 14) | (1 << 18)), None) != 0:  # MS_REC|MS_PRIVATE
        return False
    options = f"size={QUOTA_MB}m,mode=0700,uid={_owner()},gid={_owner()}".encode()
    if libc.mount(b"tmpfs", workdir.encode(), b"tmpfs", ctypes.c_ulong(0), options) != 0:
        return False
    _CHDIR(workdir)  # the old cwd is the directory under the mount (os.chdir is stubbed by now)
    return True


def _interpreter_is_public() -> bool:
    """Whether `nobody` could still import the standard library (every directory from / to
    it searchable by others)."""
    path = os.path.realpath(os.path.dirname(os.__file__))
    while True:
        if not os.stat(path).st_mode & 0o001:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def _owner() -> int:
    return NOBODY if os.getuid() == 0 and _interpreter_is_public() else os.getuid()


def _drop_privileges(libc) -> str:
    """Drop every capability (bounding set included) and, where the interpreter allows it,
    become `nobody`; returns the layer's name, or '' when not root."""
    if os.getuid() != 0:
        return ""
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP; fails past the last capability
    if _owner() == NOBODY:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)  # clears the permitted and effective sets
        return "nobody"

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    empty = (Data * 2)()
    if libc.capset(ctypes.byref(Header(0x20080522, 0)), empty) != 0:  # _LINUX_CAPABILITY_VERSION_3
        return ""
    return "nocaps"


def _rlimits(memory_mb: int, cpu_s: int) -> None:
    for limit, value in ((resource.RLIMIT_AS, memory_mb << 20), (resource.RLIMIT_CPU, cpu_s),
                         (resource.RLIMIT_FSIZE, 16 << 20), (resource.RLIMIT_NPROC, 1),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))


def _disabled(name: str):
    def refuse(*args, **kwargs):
        raise PermissionError(f"sandbox: {name} is disabled")

    return refuse


def _stubs() -> None:
    import socket
    import subprocess

    for name in ("system", "popen", "fork", "forkpty", "kill", "killpg", "execv", "execve", "execvp",
                 "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnl",
                 "spawnle", "posix_spawn", "posix_spawnp", "setsid", "putenv", "chdir", "chroot"):
        if hasattr(os, name):
            setattr(os, name, _disabled(f"os.{name}"))
    subprocess.Popen = _disabled("subprocess")  # type: ignore[assignment,misc]
    socket.socket = _disabled("socket")  # type: ignore[assignment,misc]
    socket.create_connection = _disabled("socket")


class Refused(TypeError):
    """A checked function returned an object of a type the program itself defined."""


def _own_type(value, depth: int = 0) -> bool:
    if type(value).__module__ == "__main__":  # classes made by the exec'd program
        return True
    if depth < 8 and isinstance(value, list | tuple | set | frozenset):
        return any(_own_type(v, depth + 1) for v in value)
    if depth < 8 and isinstance(value, dict):
        return any(_own_type(k, depth + 1) or _own_type(v, depth + 1) for k, v in value.items())
    return False


def _guard(function):
    def guarded(*args, **kwargs):
        result = function(*args, **kwargs)
        if _own_type(result):
            raise Refused(f"{function.__name__} returned a {type(result).__name__} the program defined")
        return result

    return guarded


def _run(source: str, checks: str | None, guarded: list[str]) -> bool:
    """Run the program, then its checks, in one namespace; True when both ran to the end."""
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(source, "program.py", "exec"), namespace)
        if checks is not None:
            for name in guarded:
                if callable(namespace.get(name)):
                    namespace[name] = _guard(namespace[name])
            exec(compile(checks, "checks.py", "exec"), namespace)
    except SystemExit:
        sys.stderr.write("sandbox: the program exited before its checks had run\n")
        return False
    return True


def main() -> None:
    memory_mb, cpu_s, token_fd, result_fd = (int(a) for a in sys.argv[1:5])
    guarded = [g for g in sys.argv[5].split(",") if g] if len(sys.argv) > 5 else []
    workdir = os.getcwd()
    token = os.read(token_fd, 64)
    os.close(token_fd)
    with open("program.py") as f:
        source = f.read()
    checks = None
    if os.path.exists("checks.py"):
        with open("checks.py") as f:
            checks = f.read()
    libc = _libc()
    _stubs()  # before seccomp: importing socket and subprocess must still work
    quota = _quota(libc, workdir)
    privileges = _drop_privileges(libc)
    landlock = _landlock(libc, workdir)
    _rlimits(memory_mb, cpu_s)
    layers = [name for name, ok in (("quota", quota), (privileges, bool(privileges)),
                                    ("seccomp", _seccomp(libc)), ("landlock", landlock)) if ok]
    sys.stderr.write(f"sandbox: {'+'.join(layers + ['rlimits', 'stubs'])}\n")
    sys.stderr.flush()
    if _run(source, checks, guarded):
        os.write(result_fd, token)
    else:
        os._exit(1)  # and no atexit handler of the program's turns it into a success


if __name__ == "__main__":
    main()
