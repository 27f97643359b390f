"""What each pair kind can run, in one place. A `two-model` pair (drafter + verifier) runs
every schedule but `quadratic`, left to right. A `self` pair (one dual-mode network) runs
`linear`, `packed` and `quadratic` with B >= 2 (its draft holds B − 1 tokens), and under
`packed` / `quadratic` drafts inside the verify call, so in one step. A `dflash` pair
(target-conditioned drafter) runs `ar`, `linear` and `packed` with B >= 2: its block is
the anchor and B − 1 drafts, and it cannot draft alone (it reads the verifier's features).
The engine checks a config against these rules before any model loads; the sweep space is
cut by them."""

from __future__ import annotations

from workloads.decoding.config import ConfigError, DecodeConfig

KINDS = ("self", "two-model", "dflash")
DFLASH_SCHEDULES = ("ar", "linear", "packed")
SELF_SCHEDULES = ("linear", "packed", "quadratic")


def allows_schedule(kind: str, schedule: str) -> bool:
    if kind == "dflash":
        return schedule in DFLASH_SCHEDULES
    return kind == "self" or schedule != "quadratic"


def min_block(kind: str) -> int:
    return 1 if kind == "two-model" else 2


def draft_width(kind: str, block: int) -> int:
    """Tokens drafted per iteration at block size B: B, or B − 1 where the block's first row
    is the anchor (DFlash; vLLM's num_speculative_tokens = B − 1)."""
    return block - 1 if kind == "dflash" else block


def one_step(kind: str, schedule: str) -> bool:
    """The draft comes out of the verify call: no K or τ to choose."""
    return kind == "self" and schedule in ("packed", "quadratic")


def check_kind(kind: str, config: DecodeConfig) -> None:
    """Raise ConfigError naming the setting a pair kind cannot run."""
    if not allows_schedule(kind, config.schedule):
        if kind == "dflash":
            raise ConfigError(f"schedule: {config.schedule} cannot run on a DFlash pair (its drafter needs "
                              f"the verifier's hidden states); use {', '.join(DFLASH_SCHEDULES)}")
        raise ConfigError("schedule: quadratic needs a dual-mode (self) pair; use linear or packed")
    if kind == "dflash" and config.schedule != "ar" and config.block < min_block(kind):
        raise ConfigError("block: a DFlash pair needs block >= 2 (the anchor and at least one draft)")
    if kind != "self" and config.verify_order != "ltr":
        raise ConfigError("verify_order: confidence needs a dual-mode (self) pair")
    if kind != "self" or config.schedule not in SELF_SCHEDULES:
        return
    if config.block < min_block(kind):
        raise ConfigError("block: a dual-mode pair needs block >= 2 (the draft holds block - 1 tokens)")
    if one_step(kind, config.schedule) and (config.threshold is not None or config.k != 1):
        raise ConfigError(f"steps: {config.schedule} on a dual-mode pair drafts inside the verify call, so "
                          "one step only (steps 1, no threshold)")
