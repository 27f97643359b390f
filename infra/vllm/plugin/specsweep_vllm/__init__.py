"""specsweep's vLLM plugin, loaded by vLLM in every process it starts (entry point
`vllm.general_plugins`).

It checks one kernel defect and works around it only where the installed vLLM has it: the
CPU `rms_norm` kernel normalises every row of a 2-D weight with row 0 (the CUDA kernel
selects the weight row by the input's outermost index). DFlash drafters normalise the context
K of all their layers in one call with the stacked per-layer k_norm weights
(`_normalize_context_k`), so on CPU every drafter with more than one layer drafts with layer
0's norm. Where the check finds the defect, `_normalize_context_k` calls the kernel once per
layer with that layer's weight, which is what the stacked call means, unless
`SPECSWEEP_VLLM_WORKAROUND=off` (to show what stock vLLM does). What it found and did is
written as JSON to the file `SPECSWEEP_VLLM_REPORT` names, for the run to log.

On CPU it also lets the V1 model runner draft DSpark and DFlash 2, which vLLM drafts only in its
V2 runner (v1_drafters), unless the same switch is off. Where `SPECSWEEP_VLLM_DRAFT_FILE` is
set, the scheduler takes its draft length from that file (runtime_draft), so one server times
every draft length up to the one it started with. Where `SPECSWEEP_VLLM_FORK_ENGINE=1` (the
project's tests), a CPU server forks its engine core instead of spawning it (forked_engine).
"""

from __future__ import annotations

import json
import os

# vLLM's DFlash drafter models whose context-K norm stacks the layers' weights
DFLASH_MODULES = ("qwen3_dflash", "laguna_dflash")


def row_zero_defect() -> bool:
    """Whether `ops.rms_norm` with a 2-D weight (L, D) normalises layer l with row 0 instead
    of row l: input (L, 1, 1, D) of ones, weight rows 1 and 2; a right kernel gives rows of
    1s and 2s (D = 16: the CPU kernel works on vectors of 8 or 16 elements)."""
    import torch
    from vllm import _custom_ops as ops

    x = torch.ones(2, 1, 1, 16)
    weight = torch.tensor([[1.0] * 16, [2.0] * 16])
    out = torch.empty_like(x)
    ops.rms_norm(out, x, weight, 1e-6)
    return bool(torch.allclose(out[1], torch.ones_like(out[1]), atol=1e-3))  # layer 1 got row 0


def per_layer(self, all_k):
    """`_normalize_context_k`, one kernel call per layer l with its weight row l."""
    import torch
    from vllm import _custom_ops as ops

    out = torch.empty_like(all_k)
    for layer in range(all_k.shape[0]):
        ops.rms_norm(out[layer], all_k[layer].contiguous(), self._k_norm_weights[layer].contiguous(),
                     self._rms_norm_eps)
    return out


def register() -> None:
    import importlib

    from vllm.platforms import current_platform

    from specsweep_vllm import forked_engine

    defect = current_platform.is_cpu() and row_zero_defect()
    allowed = os.environ.get("SPECSWEEP_VLLM_WORKAROUND", "on") != "off"
    patched = []
    if defect and allowed:
        for name in DFLASH_MODULES:
            module = importlib.import_module(f"vllm.model_executor.models.{name}")
            for cls in vars(module).values():  # classes defined there (not imported) that stack the norm
                if isinstance(cls, type) and cls.__module__ == module.__name__ \
                        and "_normalize_context_k" in vars(cls):
                    cls._normalize_context_k = per_layer
                    patched.append(f"{name}.{cls.__name__}")
    if current_platform.is_cpu() and allowed:
        from specsweep_vllm import v1_drafters

        v1_drafters.install()
    if os.environ.get("SPECSWEEP_VLLM_DRAFT_FILE"):
        from specsweep_vllm import runtime_draft

        runtime_draft.install(os.environ["SPECSWEEP_VLLM_DRAFT_FILE"])
    forked = current_platform.is_cpu() and forked_engine.wanted()
    if forked:
        forked_engine.install()
    record(rms_norm_row_zero_defect=defect, workaround=allowed, patched=patched, forked_engine=forked)


def record(**fields) -> None:
    """Adds `fields` to the JSON report `SPECSWEEP_VLLM_REPORT` names (each of the server's
    processes adds what it found; the engine's adds the drafter it built)."""
    path = os.environ.get("SPECSWEEP_VLLM_REPORT")
    if not path:
        return
    report = {}
    if os.path.isfile(path):
        with open(path) as f:
            report = json.load(f)
    with open(f"{path}.{os.getpid()}", "w") as f:  # renamed into place: a reader never sees half of it
        json.dump(report | fields, f)
    os.replace(f"{path}.{os.getpid()}", path)
