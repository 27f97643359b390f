"""A process that imports vLLM's OpenAI server once and forks each server asked of it from
itself: a start without importing vLLM again (about 8 of a toy server's CPU-seconds here). Run
by the vLLM venv's Python (workloads.serving.starts.Launcher starts it), beside guard.py.

One JSON object a line. On stdout: {"ready": true} once vLLM is imported, or {"refused": why}
before it exits where the import left a second thread running or loaded vLLM's plugins (a fork
copies a half-made thread pool or the plugins' state). On stdin, for each server,
{"argv", "env", "cwd", "log", "exit"}; for each it forks a guard (guard.main) that leads a new
session with its output in `log`, its environment exactly `env` and its directory `cwd`, and
that forks the server (vLLM's `api_server` main with `argv`); it answers {"pid": the guard's}.
When a guard exits, its exit code is written to its `exit` file. The launcher asks for SIGTERM
when its parent dies and ends with its stdin; each guard asks the same of it, so a launcher gone
takes every server it forked down, as the death of a guard's starter does.
"""

import contextlib
import importlib.util
import json
import os
import select
import signal
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
# off the path: this folder holds the project's vllm.py, which `import vllm` would find first
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
_spec = importlib.util.spec_from_file_location("guard", os.path.join(HERE, "guard.py"))
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)


class ForkedServer:
    """The server forked from its guard, with what guard.main uses of a Popen."""

    def __init__(self, entry, argv: list[str]):
        self.pid = os.fork()
        if self.pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the guard's, not the server's
            code = 1
            try:
                sys.argv = argv
                entry.main()
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
            except BaseException:
                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)

    def wait(self) -> int:
        return os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)


def _guard(entry, request: dict) -> None:
    """In the forked child: become the server's guard, as VllmServer's Popen would start it."""
    try:
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)  # the server holds its log as its output only, as a Popen's child does
        os.close(log)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        code = guard.main(lambda: ForkedServer(entry, request["argv"]))
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)


def _reap(exits: dict[int, str]) -> None:
    """Reap the guards that exited; write each one's exit code to its file."""
    while exits:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if (path := exits.pop(pid, None)) is None:
            continue
        with contextlib.suppress(OSError):  # its folder removed: its starter reads that as well
            with open(f"{path}.new", "w") as f:
                f.write(str(os.waitstatus_to_exitcode(status)))
            os.replace(f"{path}.new", path)


def _say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def main() -> int:
    guard._signal_on_parent_death()
    if os.getppid() == 1:  # the parent died before the request above took effect
        return 1
    import vllm.entrypoints.launchers.api_server.entry as entry
    import vllm.entrypoints.openai.api_server  # noqa: F401  (what `-m` of it imports)
    import vllm.plugins

    with contextlib.suppress(ImportError):  # vLLM names its processes with it (VLLM::EngineCore):
        import setproctitle  # its set-up finds the title's memory through the environment, which

        setproctitle.getproctitle()  # a guard replaces; set up here, before any is forked
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1 or vllm.plugins.plugins_loaded:
        _say(refused=f"importing vLLM left {threads} threads, plugins loaded: {vllm.plugins.plugins_loaded}")
        return 1
    _say(ready=True)
    exits: dict[int, str] = {}
    pending = b""
    while True:
        readable = select.select([0], [], [], 0.2)[0]
        _reap(exits)
        if not readable:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:  # the starter closed our stdin or died
            return 0
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if not line.strip():
                continue
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _guard(entry, request)
            exits[pid] = request["exit"]
            _say(pid=pid)


if __name__ == "__main__":
    sys.exit(main())
