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
import functools
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from workloads.serving.config import ServingConfig, ServingError

ROOT = Path(__file__).resolve().parents[2]
GUARD = Path(__file__).with_name("guard.py")  # run by the vLLM venv's Python
# CPU engines: float32 and eager (no CPU kernels for the alternatives), 1 GiB of KV cache (the
# CPU build otherwise reserves 92% of the machine's memory), no thread pinning (workers share
# the machine's cores)
CPU_KV_CACHE_GIB = 1
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": str(CPU_KV_CACHE_GIB), "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
QUIET_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}


SETUP = ("run `make vllm`, or set SPECSWEEP_VLLM_PYTHON to a Python with vllm and infra/vllm/plugin "
         "installed")


def vllm_python() -> Path:
    """The vLLM venv's interpreter: $SPECSWEEP_VLLM_PYTHON, else .venv-vllm of the checkout;
    ServingError naming the set-up command unless it runs and finds vllm and the project's
    plugin (checked once a process: a server start would otherwise fail minutes later)."""
    path = Path(os.environ.get("SPECSWEEP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
    if not path.is_file():
        raise ServingError(f"engine: vllm is not set up ({path} is missing); {SETUP}")
    why = _missing_modules(str(path))
    if why:
        raise ServingError(f"engine: vllm is not set up ({path}: {why}); {SETUP}")
    return path


@functools.cache
def _missing_modules(python: str) -> str | None:
    """Why `python` cannot serve (it does not run, or lacks vllm or the plugin), or None."""
    probe = ("import importlib.util as u; "
             "print('ok', *(m for m in ('vllm', 'specsweep_vllm') if u.find_spec(m) is None))")
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"does not run: {err}"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        return f"does not run: {lines[-1][:200]}"
    said = done.stdout.split()
    if said[:1] != ["ok"]:
        return "not a Python interpreter"
    return f"no module {' nor '.join(said[1:])}" if said[1:] else None


@dataclass(frozen=True)
class EngineSettings:
    """What a server starts with; a measurement with other settings restarts it."""

    model: str  # the verifier: a local path or hub id
    speculative: str | None  # vLLM's speculative_config, as JSON
    dtype: str = "float32"
    max_model_len: int | None = None
    workaround: bool = True  # the plugin's kernel workaround where the check finds the defect
    kv_cache_bytes: int | None = None  # a fixed KV cache (CPU_ENV's, written out for a deployment)

    def environment(self) -> dict[str, str]:
        return {"SPECSWEEP_VLLM_WORKAROUND": "on" if self.workaround else "off"}

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
        which would then skip their prefill."""
        options: dict = {"model": self.model, "dtype": self.dtype, "enforce-eager": True,
                         "enable-prefix-caching": False}
        if self.speculative is not None:
            options["speculative-config"] = json.loads(self.speculative)
        if self.max_model_len is not None:
            options["max-model-len"] = self.max_model_len
        if self.kv_cache_bytes is not None:
            options["kv-cache-memory-bytes"] = self.kv_cache_bytes
        return options

    def arguments(self) -> list[str]:
        """`options` on the command line, as vLLM's config-file reader turns them into one."""
        args: list[str] = []
        for key, value in self.options().items():
            if isinstance(value, bool):
                args.append(f"--{key}" if value else f"--no-{key}")
            else:
                args += [f"--{key}", json.dumps(value) if isinstance(value, dict) else str(value)]
        return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """One vLLM OpenAI server on a loopback port; `start` waits until it serves."""

    def __init__(self, settings: EngineSettings, log_dir: Path | None = None):
        self.settings = settings
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="vllm-", dir=log_dir))
        self.log = self.dir / "server.log"
        self.process: subprocess.Popen | None = None
        self.report: dict = {}
        self.start_s = 0.0
        # the load shapes (concurrency, request rate) it has served an untimed load at
        self.warmed: set[tuple[int, float | None]] = set()

    def start(self, timeout: float = 600) -> float:
        """Start the server and wait for /health; the seconds it took. ServingError with the
        log's last line when it exits or does not come up."""
        env = {**os.environ, **CPU_ENV, **QUIET_ENV, **self.settings.environment(),
               "SPECSWEEP_VLLM_REPORT": str(self.dir / "report.json")}
        python = str(vllm_python())
        command = [python, str(GUARD), python, "-m", "vllm.entrypoints.openai.api_server", "--host",
                   "127.0.0.1", "--port", str(self.port), *self.settings.arguments()]
        began = time.perf_counter()
        with open(self.log, "w") as log:  # the guard leads a new process group: the server and its engine
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        while time.perf_counter() - began < timeout:
            if self.process.poll() is not None:
                raise ServingError(f"engine: vllm exited ({self.process.returncode}) while starting: "
                                   f"{self._last_error()} (log: {self.log})")
            if self._healthy():
                self.start_s = time.perf_counter() - began
                report = self.dir / "report.json"
                self.report = json.loads(report.read_text()) if report.is_file() else {}
                return self.start_s
            time.sleep(0.5)
        self.stop()
        raise ServingError(f"engine: vllm did not serve within {timeout:.0f} s (log: {self.log})")

    def kernel_check(self) -> str:
        """What the plugin found and did, in one line."""
        if not self.report:
            return "vLLM kernel check: no report (the plugin did not run; run `make vllm`)"
        drafter = self.report.get("drafter")
        port = f"; drafted by the plugin's V1 port {drafter}" if drafter else ""
        if not self.report.get("rms_norm_row_zero_defect"):
            return "vLLM kernel check: rms_norm is right; nothing worked around" + port
        if not self.report.get("workaround", True):
            return ("vLLM kernel check: rms_norm row-0 defect found, workaround off "
                    "(multi-layer DFlash drafts normalise context K with layer 0's weight)")
        return ("vLLM kernel check: rms_norm row-0 defect found, worked around in "
                + (", ".join(self.report.get("patched", [])) or "no loaded module") + port)

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
        """Stop the server and every process it started (its process group)."""
        if self.process is None:
            return
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

    def counters(self) -> Counters:
        """The spec-decode counters now (Prometheus text at /metrics)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            return Counters.parse(response.read().decode())


_SAMPLE = re.compile(r'^vllm:spec_decode_(\w+)_total\{([^}]*)\} ([0-9.eE+-]+)$', re.M)


@dataclass(frozen=True)
class Counters:
    """vLLM's spec-decode counters, by specsweep's names: `iterations` (drafts: one per
    verification of a request), `drafted` (draft tokens), `accepted` (accepted draft tokens)
    and `accepted_per_pos` (accepted tokens at each draft position)."""

    iterations: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_pos: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Counters:
        totals: dict[str, float] = {}
        positions: dict[int, float] = {}
        for name, labels, value in _SAMPLE.findall(text):
            position = re.search(r'position="(\d+)"', labels)
            if name == "num_accepted_tokens_per_pos" and position:
                positions[int(position.group(1))] = positions.get(int(position.group(1)), 0) + float(value)
            else:
                totals[name] = totals.get(name, 0) + float(value)
        per_pos = tuple(int(positions[i]) for i in sorted(positions))
        return cls(int(totals.get("num_drafts", 0)), int(totals.get("num_draft_tokens", 0)),
                   int(totals.get("num_accepted_tokens", 0)), per_pos)

    def __sub__(self, before: Counters) -> Counters:
        width = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        pad = lambda c: c.accepted_per_pos + (0,) * (width - len(c.accepted_per_pos))  # noqa: E731
        return Counters(self.iterations - before.iterations, self.drafted - before.drafted,
                        self.accepted - before.accepted, tuple(a - b for a, b in zip(pad(self), pad(before))))
