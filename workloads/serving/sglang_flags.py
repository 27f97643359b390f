"""SGLang's flags of an export, read by SGLang's own server-argument parser (not by running
SGLang: its DFLASH refuses a CPU). The parser lives in the vLLM venv (infra/vllm/setup.sh)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from workloads.serving.config import ServingError
from workloads.serving.venv import vllm_python

SCRIPT = Path(__file__).with_name("sglang_args.py")  # run by the vLLM venv's Python


def parser_path() -> Path:
    """Where SGLang's package is: $SPECSWEEP_SGLANG_PATH, else `sglang/` in the vLLM venv."""
    path = Path(os.environ.get("SPECSWEEP_SGLANG_PATH", vllm_python().parents[1] / "sglang"))
    if not (path / "sglang").is_dir():
        raise ServingError(f"sglang: SGLang's parser is not set up ({path / 'sglang'} is missing); run "
                           "`make vllm`, or set SPECSWEEP_SGLANG_PATH to a folder holding the sglang package")
    return path


def settings(algorithm: str, drafter: str, drafts: int) -> dict:
    """SGLang's speculative server arguments for `algorithm` (DFLASH and DSPARK, which draft a
    block, or EAGLE3 and STANDALONE, which draft a chain) drafting `drafts` tokens with
    `drafter`. Its draft tokens count the verified token too (vLLM's n drafts are SGLang's
    n + 1); DSPARK's block size is its n drafts (gamma); a chain takes n steps of one
    candidate each (top-k 1), as vLLM drafts it."""
    out = {"speculative_algorithm": algorithm, "speculative_draft_model_path": drafter,
           "speculative_num_draft_tokens": drafts + 1}
    if algorithm == "DSPARK":
        out["speculative_dspark_block_size"] = drafts
    elif algorithm != "DFLASH":
        out |= {"speculative_num_steps": drafts, "speculative_eagle_topk": 1}
    return out


def flags(wanted: dict) -> list[str]:
    """`settings` as SGLang's command-line flags."""
    return [part for key, value in wanted.items() for part in (f"--{key.replace('_', '-')}", str(value))]


def parse(command_lines: list[list[str]]) -> list[dict]:
    """Each command line parsed by SGLang: {parser, read: {speculative fields}} or {error}."""
    env = {**os.environ, "PYTHONPATH": str(parser_path())}
    done = subprocess.run([str(vllm_python()), str(SCRIPT)], input=json.dumps(command_lines), env=env,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ServingError(f"sglang: its parser did not run: {tail}")
    return json.loads(done.stdout)


def check(exports: list[tuple[str, list[str], dict]]) -> list[dict]:
    """SGLang's reading of each export's flags after `--model-path verifier`, held to what the
    export means (`settings`). Per export {parser, read} (the fields meant) or {error}: the
    parser's line, or each field it read otherwise."""
    results = parse([["--model-path", verifier, *given] for verifier, given, _ in exports])
    out = []
    for (_, _, want), result in zip(exports, results):
        if "error" in result:
            out.append(result)
            continue
        read = {k: result["read"][k] for k in want}
        wrong = [f"{k} {read[k]!r}, not {v!r}" for k, v in want.items() if read[k] != v]
        out.append({"error": "SGLang reads " + "; ".join(wrong)} if wrong else {**result, "read": read})
    return out
