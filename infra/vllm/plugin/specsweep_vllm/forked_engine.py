"""A cheaper server start: the engine core forked from the API server instead of spawned.

vLLM's CPU platform starts the engine core with multiprocessing's `spawn`: a fresh interpreter
that imports vLLM again, about 7 of a toy model's 18 s start here. Forked, the engine core
starts with everything the API server imported (10.8 s against 19.5 s, toy DFlash). Forking is
safe only while the API server has no OpenMP thread pool (the plugin's kernel check runs torch
there): with more than one OpenMP thread the forked engine core hung at model load. So it is
taken only with `SPECSWEEP_VLLM_FORK_ENGINE=1`, `OMP_NUM_THREADS=1` and the model in the engine
core (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: nothing is forked from the engine core). The project's
test suite starts its servers so (they assert tokens, counters and faults, never speed); a
sweep's servers start as vLLM does by default.
"""

from __future__ import annotations

import os


def wanted() -> bool:
    """Whether this server asked for it and can take it (see the module's docstring)."""
    return (os.environ.get("SPECSWEEP_VLLM_FORK_ENGINE") == "1" and os.environ.get("OMP_NUM_THREADS") == "1"
            and os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0")


def install() -> None:
    """After the CPU platform chooses `spawn` for the processes vLLM starts, choose `fork`."""
    from vllm.platforms.cpu import CpuPlatform

    chosen = CpuPlatform.check_and_update_config.__func__

    def check_and_update_config(cls, vllm_config) -> None:
        chosen(cls, vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"

    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)
