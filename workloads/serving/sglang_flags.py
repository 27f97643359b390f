"""SGLang's flags of an export, read by SGLang's own server-argument parser (not by running
SGLang: its DFLASH refuses a CPU). The parser lives in the vLLM venv (infra/vllm/setup.sh)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from workloads.serving.config import ServingError
from workloads.serving.vllm import vllm_python

SCRIPT = Path(__file__).with_name("sglang_args.py")  # run by the vLLM venv's Python


def parser_path() -> Path:
    """Where SGLang's package is: $SPECSWEEP_SGLANG_PATH, else `sglang/` in the vLLM venv."""
    path = Path(os.environ.get("SPECSWEEP_SGLANG_PATH", vllm_python().parents[1] / "sglang"))
    if not (path / "sglang").is_dir():
        raise ServingError(f"sglang: SGLang's parser is not set up ({path / 'sglang'} is missing); run "
                           "`make vllm`, or set SPECSWEEP_SGLANG_PATH to a folder holding the sglang package")
    return path


def parse(command_lines: list[list[str]]) -> list[dict]:
    """Each command line parsed by SGLang: {parser, read: {speculative fields}} or {error}."""
    env = {**os.environ, "PYTHONPATH": str(parser_path())}
    done = subprocess.run([str(vllm_python()), str(SCRIPT)], input=json.dumps(command_lines), env=env,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ServingError(f"sglang: its parser did not run: {tail}")
    return json.loads(done.stdout)


def check(exports: list[tuple[str, list[str], str, int]]) -> list[dict]:
    """SGLang's reading of each export's `flags` after `--model-path verifier`, held to what the
    export means: DFLASH drafting with `drafter`, verifying `block` tokens (SGLang's DFLASH
    counts the block, anchor included, as its draft tokens). Per export {parser, read} or
    {error}: the parser's line, or each field it read otherwise."""
    results = parse([["--model-path", verifier, *flags] for verifier, flags, _, _ in exports])
    out = []
    for (_, _, drafter, block), result in zip(exports, results):
        want = {"speculative_algorithm": "DFLASH", "speculative_draft_model_path": drafter,
                "speculative_num_draft_tokens": block}
        wrong = [] if "error" in result else [f"{k} {result['read'][k]!r}, not {v!r}"
                                              for k, v in want.items() if result["read"][k] != v]
        out.append({"error": "SGLang reads " + "; ".join(wrong)} if wrong else result)
    return out
