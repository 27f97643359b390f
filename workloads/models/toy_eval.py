"""Quality of the toy pair on `arith` test prompts: the figures the foundation promises.

Every mode runs through the decoding engine, greedily: the verifier and `toy-self` as AR
models (`ar` schedule), the drafter and `toy-self` as diffusion models drafting the whole
completion as one block of CANVAS slots in K steps (`diffusion` schedule), committing slots
left to right (`ltr`) or most confident first (`confidence`). The target-conditioned
drafter of `toy-dflash` cannot draft alone; it is measured by its `mean_accept_len`, the draft
tokens the verifier accepts per iteration (linear, B = 8, K = 1), beside the diffusion drafter's.
"""

from __future__ import annotations

from pathlib import Path

from workloads.decoding import DecodeConfig, decode
from workloads.models.pair import Pair, load_pair
from workloads.tasks.arith import Arith

STEPS = (1, 2, 4, 8, 16, 32)
CANVAS = 32  # covers the longest scratchpad, so one block drafts the whole completion
POLICIES = ("ltr", "confidence")


def accuracy(pair: Pair, config: DecodeConfig, examples) -> float:
    task = Arith()
    return sum(task.score(ex, decode(pair, ex.prompt, config).text) for ex in examples) / len(examples)


def quality(directory: str | Path, n: int = 200, seed: int = 0) -> dict[str, float]:
    """Accuracy per model and mode on `n` arith test prompts.

    Keys: `verifier/ar`, `self/ar`, `<drafter|self>/<policy>/K=<k>`, and with a DFlash
    drafter `<drafter|dflash>/mean_accept_len` (draft tokens, not an accuracy).
    """
    directory = Path(directory)
    examples = Arith().examples("test", n=n, seed=seed)
    two = load_pair({"drafter": str(directory / "drafter"), "verifier": str(directory / "verifier")})
    dual = load_pair({"model": str(directory / "self")})
    ar = DecodeConfig(schedule="ar", max_new_tokens=CANVAS)
    out = {"verifier/ar": accuracy(two, ar, examples), "self/ar": accuracy(dual, ar, examples)}
    for name, pair in (("drafter", two), ("self", dual)):
        for policy in POLICIES:
            for k in STEPS:
                config = DecodeConfig(schedule="diffusion", block=CANVAS, steps=k, unmask=policy,
                                      max_new_tokens=CANVAS)
                out[f"{name}/{policy}/K={k}"] = accuracy(pair, config, examples)
    if (directory / "dflash" / "config.json").is_file():
        dflash = load_pair({"drafter": str(directory / "dflash"), "verifier": str(directory / "verifier")})
        for name, pair in (("drafter", two), ("dflash", dflash)):
            out[f"{name}/mean_accept_len"] = mean_accept_len(pair, examples)
    return out


def mean_accept_len(pair: Pair, examples, block: int = 8) -> float:
    """mean_accept_len = Σaccepted/Σiterations (the trial metric docs/sweeps.md names): draft tokens
    accepted per verification, greedy linear K = 1 at block B."""
    config = DecodeConfig(schedule="linear", block=block, steps=1, max_new_tokens=CANVAS)
    results = [decode(pair, ex.prompt, config) for ex in examples]
    return sum(r.accepted for r in results) / sum(r.iterations for r in results)


def quality_checks(acc: dict[str, float]) -> list[tuple[str, bool]]:
    """The foundation's promises about the toy pair, each with whether it holds.

    "Rising with steps" (left-to-right commits): never lower, beyond 0.02 of noise, at more
    steps, and at least 0.10 higher at the most steps than at one.
    """
    drafter = [acc[f"drafter/ltr/K={k}"] for k in STEPS]
    rising = all(b >= a - 0.02 for a, b in zip(drafter, drafter[1:])) and drafter[-1] >= drafter[0] + 0.10
    return [
        ("verifier greedy accuracy >= 0.90", acc["verifier/ar"] >= 0.90),
        ("drafter one-step accuracy <= verifier - 0.15", drafter[0] <= acc["verifier/ar"] - 0.15),
        (f"drafter accuracy rises with steps K={STEPS[0]}..{STEPS[-1]} (ltr)", rising),
        ("toy-self AR-mode accuracy >= 0.85", acc["self/ar"] >= 0.85),
    ] + ([("toy-dflash accepts more per iteration than the diffusion drafter (linear, B=8, K=1)",
           acc["dflash/mean_accept_len"] > acc["drafter/mean_accept_len"])]
         if "dflash/mean_accept_len" in acc else [])
