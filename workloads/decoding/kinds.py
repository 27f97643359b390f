"""What each pair kind can run, in one place. A `two-model` pair (drafter + verifier) runs
every schedule but `quadratic`, left to right. A `self` pair (one dual-mode network) runs
`linear`, `packed` and `quadratic` with B >= 2 (its draft holds B − 1 tokens), and under
`packed` / `quadratic` drafts inside the verify call, so in one step. The engine checks a
config against these rules before any model loads; the sweep space is cut by them."""

from __future__ import annotations

from workloads.decoding.config import ConfigError, DecodeConfig

KINDS = ("self", "two-model")
SELF_SCHEDULES = ("linear", "packed", "quadratic")


def allows_schedule(kind: str, schedule: str) -> bool:
    return kind == "self" or schedule != "quadratic"


def min_block(kind: str) -> int:
    return 2 if kind == "self" else 1


def one_step(kind: str, schedule: str) -> bool:
    """The draft comes out of the verify call: no K or τ to choose."""
    return kind == "self" and schedule in ("packed", "quadratic")


def check_kind(kind: str, config: DecodeConfig) -> None:
    """Raise ConfigError naming the setting a pair kind cannot run."""
    if not allows_schedule(kind, config.schedule):
        raise ConfigError("schedule: quadratic needs a dual-mode (self) pair; use linear or packed")
    if kind != "self" and config.verify_order != "ltr":
        raise ConfigError("verify_order: confidence needs a dual-mode (self) pair")
    if kind != "self" or config.schedule not in SELF_SCHEDULES:
        return
    if config.block < min_block(kind):
        raise ConfigError("block: a dual-mode pair needs block >= 2 (the draft holds block - 1 tokens)")
    if one_step(kind, config.schedule) and (config.threshold is not None or config.k != 1):
        raise ConfigError(f"steps: {config.schedule} on a dual-mode pair drafts inside the verify call, so "
                          "one step only (steps 1, no threshold)")
