"""A vLLM OpenAI server as a subprocess of its own venv (`make vllm`), started with one
verifier and one `speculative_config` and kept while the engine settings stay the same.

Why a server process and not an in-process `LLM`: users serve through `vllm serve`, whose
scheduler batches the requests in flight, so time to first token, time per output token and
throughput at a concurrency are only honest measured at its API, from concurrent streams (as
`vllm bench serve` does); and vLLM pins transformers < 5.20, so it lives in a venv of its
own, which a subprocess keeps apart from the project's. The project's vLLM plugin
(infra/vllm/plugin) checks vLLM's kernels in every process the server starts and reports
what it worked around (`report`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from workloads.serving import plugin
from workloads.serving.config import EngineFailure, ServingConfig, ServingError
from workloads.serving.counters import Counters
from workloads.serving.ports import free_port, listening_pids
from workloads.serving.served import logged_args
from workloads.serving.starts import guarded
from workloads.serving.venv import SETUP, vllm_python

log = logging.getLogger(__name__)
# CPU engines: float32 and eager (no CPU kernels for the alternatives), 1 GiB of KV cache (the
# CPU build otherwise reserves 92% of the machine's memory), no thread pinning (workers share
# the machine's cores)
CPU_KV_CACHE_GIB = 1
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": str(CPU_KV_CACHE_GIB), "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
QUIET_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}


@dataclass(frozen=True)
class EngineSettings:
    """What a server starts with; a measurement with other settings restarts it."""

    model: str  # the verifier: a local path or hub id
    speculative: str | None  # vLLM's speculative_config, as JSON
    dtype: str = "float32"
    max_model_len: int | None = None
    workaround: bool = True  # the plugin's kernel workaround where the check finds the defect
    kv_cache_bytes: int | None = None  # a fixed KV cache (CPU_ENV's, written out for a deployment)
    config_file: str | None = None  # started from this `vllm serve --config` file instead, as a user would
    # the model in a worker process of its own (vLLM's default on CPU), or in the engine core's
    # (False: one interpreter fewer to start); None leaves it to the environment
    worker_process: bool | None = None

    def environment(self) -> dict[str, str]:
        own = {} if self.worker_process is None else {
            "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if self.worker_process else "0"}
        return {"SPECSWEEP_VLLM_WORKAROUND": "on" if self.workaround else "off", **own}

    @property
    def draft_tokens(self) -> int | None:
        """The draft length it starts with (num_speculative_tokens), None without speculation."""
        return None if self.speculative is None else json.loads(self.speculative)["num_speculative_tokens"]

    @classmethod
    def of(cls, checkpoints: dict[str, str], config: ServingConfig) -> EngineSettings:
        """A server for `config` over a pair's checkpoints (`verifier`, and `drafter` where it
        has its own: workloads.models.pairspec.refs)."""
        speculative = config.speculative_config(checkpoints.get("drafter"))
        return cls(checkpoints["verifier"], None if speculative is None else json.dumps(speculative))

    def options(self) -> dict:
        """The server's options as `vllm serve --config FILE` reads them (a YAML mapping of its
        long option names: true a flag, false its --no- form, a mapping a JSON argument); an
        export writes this, so a deployment starts as the measurement did. Eager and float32:
        the CPU build has no kernels for the alternatives. No prefix cache: a measurement serves
        the same prompts again (its warm-up, the next trial, a control on the same server),
        which would then skip their prefill; written as `no-enable-prefix-caching: true`,
        because `vllm serve --config` drops `enable-prefix-caching: false` (served.py)."""
        options: dict = {"model": self.model, "dtype": self.dtype, "enforce-eager": True,
                         "no-enable-prefix-caching": True}
        if self.speculative is not None:
            options["speculative-config"] = json.loads(self.speculative)
        if self.max_model_len is not None:
            options["max-model-len"] = self.max_model_len
        if self.kv_cache_bytes is not None:
            options["kv-cache-memory-bytes"] = self.kv_cache_bytes
        return options

    def arguments(self) -> list[str]:
        """`options` on the command line, as vLLM's config-file reader turns them into one (or
        that file itself, `config_file`)."""
        if self.config_file is not None:
            return ["--config", self.config_file]
        args: list[str] = []
        for key, value in self.options().items():
            if isinstance(value, bool):
                args.append(f"--{key}" if value else f"--no-{key}")
            else:
                args += [f"--{key}", json.dumps(value) if isinstance(value, dict) else str(value)]
        return args


PORT_TRIES = 3  # starts on fresh ports when another process took the port before vLLM bound it


class ServerLost(EngineFailure):
    """The server died, closed its streams, or stopped answering under a load; it has been
    stopped (every process of its group), so nothing waits on it."""


class VllmServer:
    """One vLLM OpenAI server on a loopback port; `start` waits until it serves and identifies
    it; a load that finds it dead or frozen stops it (`lose`), and `supervised` starts it again."""

    def __init__(self, settings: EngineSettings, log_dir: Path | None = None, resident: bool = False):
        self.settings = settings
        # resident: it drafts the k <= n that `draft` sets (the plugin's run-time draft length)
        self.resident = resident and settings.draft_tokens is not None
        self.draft_tokens = settings.draft_tokens
        self._port(free_port())
        self._folder(log_dir)
        self.process: subprocess.Popen | None = None
        self.report: dict = {}
        self.identity: dict = {}  # what it said of itself when it started this life (`identify`)
        self.engine_args: dict | None = None  # the non-default arguments it logged (served.logged_args)
        self.start_s = 0.0
        self.restarts = 0  # starts after a loss (`supervised`)
        self.warmed: set[tuple] = set()  # the load shapes (`shape`) it has served an untimed load at

    def _folder(self, parent: Path | None) -> None:
        """A log folder of its own (the system's temporary directory without `parent`)."""
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix="vllm-", dir=parent))
        self.log = self.dir / "server.log"
        self.troubled = False  # it failed or was lost: `stop` keeps its log folder

    def _port(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def start(self, timeout: float = 600) -> float:
        """Start the server and wait until it answers /health and is identified as the one
        started here (`identify`); the seconds it took. A port another process took before vLLM
        bound it is tried again on a fresh one (PORT_TRIES starts); ServingError with the log's
        last error line when it exits or does not come up."""
        began = time.perf_counter()
        for attempt in range(PORT_TRIES):
            try:
                self._start(timeout - (time.perf_counter() - began))
                break
            except _PortTaken:
                self.stop()
                if attempt + 1 == PORT_TRIES:
                    self.troubled = True
                    raise EngineFailure(f"engine: vllm found {PORT_TRIES} ports taken in a row (log: "
                                       f"{self.log})") from None
                self._port(free_port())
        self.start_s = time.perf_counter() - began
        self.__dict__.pop("lost", None)  # set by `lose`, once a life
        return self.start_s

    def shape(self, config: ServingConfig) -> tuple:
        """A load's shape for warming (load.warm): concurrency, request rate, draft length now."""
        return config.concurrency, config.request_rate, self.draft_tokens

    def draft(self, k: int) -> None:
        """Draft k tokens a step from the next load on (never call it during one). Only a
        resident server drafts another k than its n; ServingError for a k above n."""
        if k == self.draft_tokens:
            return
        n = self.settings.draft_tokens
        if not self.resident or not 1 <= k <= n:
            why = (f"started with num_speculative_tokens {n}" if self.resident
                   else "it was not started resident")
            raise ServingError(f"spec: draft length {k}: the server drafts 1 to {n} tokens ({why})")
        self._write_draft(k)
        self.draft_tokens = k

    def _write_draft(self, k: int) -> None:
        """The file the plugin's scheduler reads k from, replaced whole (it reads at each step)."""
        file = self.dir / "draft_tokens"
        file.with_suffix(".new").write_text(str(k))
        os.replace(file.with_suffix(".new"), file)

    def measured_as(self) -> dict:
        """What a measurement on it ran, for its run to log: the plugin's report and the
        non-default arguments it logged, as a server started at the k it drafts logs them (a
        resident server's speculative_config names its n, `resident_n` then)."""
        args = self.engine_args
        if self.resident and args and isinstance(args.get("speculative_config"), dict):
            args = {**args, "speculative_config": {**args["speculative_config"],
                                                   "num_speculative_tokens": self.draft_tokens}}
        resident = {"resident_n": self.settings.draft_tokens} if self.resident else {}
        return {**self.report, "engine_args": args, **resident}

    def drafted(self) -> int | None:
        """The draft length the plugin's scheduler last applied, as its report says (None: not
        resident, or no step scheduled yet)."""
        return self._report().get("draft_tokens")

    def _report(self) -> dict:
        """The JSON report the plugin writes in each of the server's processes ({} before any)."""
        path = self.dir / "report.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def _start(self, timeout: float) -> None:
        env = {**os.environ, **CPU_ENV, **QUIET_ENV, **self.settings.environment(),
               "SPECSWEEP_VLLM_REPORT": str(self.dir / "report.json")}
        if self.resident:
            env["SPECSWEEP_VLLM_DRAFT_FILE"] = str(self.dir / "draft_tokens")
        python = str(vllm_python())
        server_args = ["--host", "127.0.0.1", "--port", str(self.port), *self.settings.arguments()]
        began = time.perf_counter()
        self.identity = {}  # until this life identifies itself: `stop` judges a life that served
        self.dir.mkdir(parents=True, exist_ok=True)  # a clean `stop` before a retry removed it
        if self.resident:  # a restarted server drafts the k it drafted before
            self._write_draft(self.draft_tokens)
        self.process = guarded(python, server_args, env, self.log)
        while time.perf_counter() - began < timeout:
            if self.process.poll() is not None:
                if _PortTaken.said(self.log):
                    raise _PortTaken
                self.troubled = True
                raise ServingError(f"engine: vllm exited ({self.process.returncode}) while starting: "
                                   f"{self._last_error()} (log: {self.log})")
            if self._healthy():
                if not listening_pids(self.port, self.process.pid) and os.path.isdir("/proc/net"):
                    # another process answers on the port: vLLM will fail to bind it
                    if self._exits_within(60):
                        continue  # the next poll reads why it exited
                    self.stop()
                    self.troubled = True
                    raise EngineFailure(f"engine: port {self.port} answers, but not from the vLLM server "
                                       f"started here (log: {self.log})")
                self.identity = self.identify()
                self.engine_args = logged_args(self.log.read_text(errors="replace"))
                self.report = self._report()
                if self.resident and not self.report.get("runtime_draft"):
                    self.stop()
                    self.troubled = True
                    raise ServingError("engine: the vLLM plugin did not take the draft length at run time "
                                       f"(an older plugin?); {SETUP} (log: {self.log})")
                return
            time.sleep(0.5)
        self.stop()
        self.troubled = True
        raise EngineFailure(f"engine: vllm did not serve within {timeout:.0f} s (log: {self.log})")

    def _exits_within(self, seconds: float) -> bool:
        try:
            self.process.wait(seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def identify(self) -> dict:
        """The server as it reports itself: the pids of its process group listening on the
        port, and the model it serves (/v1/models) and its max_model_len; EngineFailure unless
        they are what it was started with."""
        pids = sorted(listening_pids(self.port, self.process.pid))
        with urllib.request.urlopen(f"{self.url}/v1/models", timeout=10) as response:
            models = json.loads(response.read().decode()).get("data") or []
        served = {m.get("id"): m for m in models}
        if self.settings.model not in served:
            self.stop()
            self.troubled = True
            raise EngineFailure(f"engine: the server on port {self.port} serves {sorted(served)}, not "
                               f"{self.settings.model} (log: {self.log})")
        length = served[self.settings.model].get("max_model_len")
        if self.settings.max_model_len is not None and length != self.settings.max_model_len:
            self.stop()
            self.troubled = True
            raise EngineFailure(f"engine: the server on port {self.port} serves max_model_len {length}, not "
                                f"the {self.settings.max_model_len} it was started with (log: {self.log})")
        return {"pids": pids, "model": self.settings.model, "max_model_len": length}

    def lose(self, why: str) -> ServerLost:
        """Record that the server was lost under a load (`why`), stop it (once, whichever of
        the load's threads gets here first: its other requests then fail at once), and return
        the error to raise."""
        lost = ServerLost(f"engine: vllm server {why} (log: {self.log})")
        first = self.__dict__.setdefault("lost", lost)  # atomic in one step: one thread wins
        if first is lost:
            self.troubled = True
            self.stop()
        return first

    def restart(self) -> float:
        """Stop it and start it again on a fresh port, logging to a fresh folder (a lost
        server's log stays where its error said); it serves no load shape warmed."""
        self.stop()
        self.restarts += 1
        self.warmed.clear()
        self._port(free_port())
        self._folder(self.dir.parent)
        return self.start()

    def kernel_check(self) -> str:
        """What the plugin found and did, in one line."""
        return plugin.kernel_check(self.report)

    def alive(self) -> bool:
        """Its process runs and it answers /health (a dead engine core fails the check)."""
        return self.process is not None and self.process.poll() is None and self._healthy()

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def _last_error(self) -> str:
        """The log's last line naming an error, with the indented line after it where that says
        why (pydantic puts the reason there: `1 validation error for ModelConfig` / `  Value
        error, Model architectures [...] are not supported`); else its last line."""
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        errors = [i for i, line in enumerate(lines) if "Error" in line]
        if not errors:
            return (lines or ["no output"])[-1].strip()[:300]
        i = errors[-1]
        reason = lines[i + 1] if i + 1 < len(lines) else ""
        detail = reason[:1].isspace() and not reason.strip().startswith(("File ", "For further"))
        return (lines[i].strip() + (f": {reason.strip()}" if detail else ""))[:300]

    def stop(self) -> None:
        """Stop the server and every process it started (its process group); remove its log
        folder unless it failed to start, was lost, or served and then stopped serving (its
        errors, and a found-dead server's log, say why; a taken port's start never served)."""
        if self.process is None:
            if not self.troubled:
                shutil.rmtree(self.dir, ignore_errors=True)
            return
        if self.identity and not self.alive():
            self.troubled = True
        if self.process.poll() is None:
            self.process.terminate()  # the guard stops the server, then kills the group
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(ProcessLookupError):  # whatever outlived the guard
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process = None
        if not self.troubled:
            shutil.rmtree(self.dir, ignore_errors=True)

    def counters(self) -> Counters:
        """The spec-decode counters now (Prometheus text at /metrics)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            return Counters.parse(response.read().decode())


class _PortTaken(Exception):
    """vLLM could not bind its port: another process took it after `free_port` chose it."""

    @staticmethod
    def said(log: Path) -> bool:
        text = log.read_text(errors="replace")
        return "Address already in use" in text or "Errno 98" in text


T = TypeVar("T")


def supervised(server: VllmServer, work: Callable[[], T], say: Callable[[str], None] = log.warning) -> T:
    """`work()` (loads on `server`), started first if it is not serving; when the server is
    lost under it (ServerLost: it died, streamed an error, or froze past a load's deadline),
    started again and `work` run once more; lost again, a ServingError in one line naming the
    log. Every command that talks to vLLM outside a sweep runs its loads through this (a sweep's
    shard is retried by the sweep)."""
    if not server.alive():
        say(f"vLLM server on port {server.port} is not serving; starting it again")
        server.restart()
    try:
        return work()
    except ServerLost as lost:
        say(f"{lost}; starting it again and retrying the load once")
        server.restart()
    try:
        return work()
    except ServerLost as again:
        raise EngineFailure(f"{again} again after one restart; see that log") from None
