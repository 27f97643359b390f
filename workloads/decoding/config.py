"""DecodeConfig: every setting that shapes one decode, validated with one-line errors."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from workloads.decoding.acceptance import RULES
from workloads.decoding.sampling import point_mass

SCHEDULES = ("ar", "diffusion", "linear", "packed", "quadratic")
SPECULATIVE = ("linear", "packed", "quadratic")  # the schedules that draft and verify
UNMASK = ("ltr", "confidence", "margin", "entropy", "random")
VERIFY_ORDERS = ("ltr", "confidence")
MAX_SEED = 2**32 - 1  # what Optuna's samplers and numpy's generators accept


class ConfigError(ValueError):
    """An invalid decoding configuration; the message names the field."""


@dataclass(frozen=True)
class DecodeConfig:
    schedule: str = "linear"
    block: int = 4  # B: draft tokens per iteration (dual-mode pairs: rows per region, B - 1 drafted)
    steps: int | None = None  # K denoising steps (default 1 unless threshold is set)
    threshold: float | None = None  # τ: adaptive commit threshold instead of K
    unmask: str = "ltr"
    rule: str = "lossless"
    leniency: float = 0.0  # λ for linear/match, δ for cactus
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    draft_temperature: float | None = None  # None: same as temperature
    draft_top_k: int | None = None
    draft_top_p: float | None = None
    max_new_tokens: int = 64
    seed: int = 0
    verify_order: str = "ltr"  # confidence: any-order Packed-SS (dual-mode pairs, greedy)
    stop: tuple[str, ...] = field(default_factory=tuple)
    engine: ClassVar[str] = "specsweep"  # the engine that decodes it (serving.ServingConfig: vllm)

    def __post_init__(self) -> None:
        if isinstance(self.stop, list | str):
            object.__setattr__(self, "stop", (self.stop,) if isinstance(self.stop, str) else tuple(self.stop))
        self.validate()

    @property
    def exact(self) -> bool:
        """`is_exact(self)`."""
        return is_exact(self)

    @property
    def k(self) -> int | None:
        """Denoising steps, or None under the threshold rule."""
        return None if self.threshold is not None else (self.steps or 1)

    def drafter_sampling(self) -> tuple[float, int, float]:
        pick = lambda own, base: base if own is None else own  # noqa: E731
        return (pick(self.draft_temperature, self.temperature), pick(self.draft_top_k, self.top_k),
                pick(self.draft_top_p, self.top_p))

    def validate(self) -> None:
        def bad(name: str, allowed: str) -> ConfigError:
            return ConfigError(f"{name}: {allowed}; got {getattr(self, name)!r}")

        for name in ("threshold", "leniency", "temperature", "top_p", "draft_temperature", "draft_top_p"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value)):
                raise bad(name, "must be a finite number")
        if self.schedule not in SCHEDULES:
            raise bad("schedule", f"must be one of {', '.join(SCHEDULES)}")
        if self.unmask not in UNMASK:
            raise bad("unmask", f"must be one of {', '.join(UNMASK)}")
        if self.rule not in RULES:
            raise bad("rule", f"must be one of {', '.join(RULES)}")
        if not isinstance(self.block, int) or self.block < 1:
            raise bad("block", "must be an integer >= 1")
        if self.steps is not None and self.threshold is not None:
            raise ConfigError("steps, threshold: give one of them, not both")
        if self.steps is not None and (not isinstance(self.steps, int) or not 1 <= self.steps <= self.block):
            raise bad("steps", f"must be an integer in [1, block={self.block}]")
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise bad("threshold", "must be in (0, 1]")
        if self.rule in ("linear", "match") and not 0 <= self.leniency <= 1:
            raise bad("leniency", f"λ for rule {self.rule} must be in [0, 1]")
        if self.rule == "cactus" and self.leniency < 0:
            raise bad("leniency", "δ for rule cactus must be >= 0")
        if self.rule == "lossless" and self.leniency != 0:
            raise bad("leniency", "must be 0 under rule lossless (use linear or cactus)")
        for name in ("temperature", "draft_temperature"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise bad(name, "must be >= 0 (0 is greedy)")
        for name in ("top_k", "draft_top_k"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise bad(name, "must be an integer >= 0 (0 keeps all)")
        for name in ("top_p", "draft_top_p"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise bad(name, "must be in (0, 1]")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise bad("max_new_tokens", "must be an integer >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise bad("seed", f"must be an integer in [0, {MAX_SEED}]")
        if self.verify_order not in VERIFY_ORDERS:
            raise bad("verify_order", f"must be one of {', '.join(VERIFY_ORDERS)}")
        if self.verify_order != "ltr" and (self.schedule != "packed" or not point_mass(self.temperature, 0)
                                           or self.rule != "lossless"):
            raise bad("verify_order", "confidence runs greedy lossless packed only (schedule packed, "
                                      "temperature 0, rule lossless): its sampling is not proven exact")

    @classmethod
    def from_dict(cls, data: dict) -> DecodeConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown setting; known: {', '.join(sorted(names))}")
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path) -> DecodeConfig:
        """Load a config YAML/JSON: either the settings themselves or an export with a
        `config:` section."""
        import yaml

        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config: no such file {path}")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except UnicodeDecodeError as err:
            raise ConfigError(f"config: {path} is not UTF-8 text (byte {err.start})") from None
        except yaml.YAMLError as err:
            raise ConfigError(f"config: {path} is not valid YAML ({str(err).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config: {path} must hold a mapping of settings")
        return cls.from_dict(data.get("config", data))

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["stop"] = list(self.stop)
        return out


def is_exact(config: DecodeConfig) -> bool:
    """Whether `config` provably reproduces the verifier's output distribution (joint).

    `ar` always does and drafter-only `diffusion` never does; neither does any-order
    verification (its verifier is the diffusion mode, not the AR mode). Lenient rules do not,
    except Cactus under a point-mass (greedy) verifier: there π = p(y) is 0 or 1, so γ = π
    and the target is p itself. Else rejection sampling with stored proposals is exact when
    each draft token was drawn from its stored q given the earlier ones: one-step drafts,
    left-to-right commits (K steps or τ, decided from the slots' distributions only), or
    point-mass drafts (temperature 0 or top-k 1, a deterministic draft); `match` is exact
    for any drafter; a point-mass verifier outputs greedy AR whatever happens.
    """
    if config.schedule in ("ar", "diffusion"):
        return config.schedule == "ar"
    if config.verify_order != "ltr":
        return False
    greedy_verifier = point_mass(config.temperature, config.top_k)
    if config.leniency != 0:
        return config.rule == "cactus" and greedy_verifier
    temperature, top_k, _ = config.drafter_sampling()
    if config.rule == "match" or greedy_verifier or point_mass(temperature, top_k):
        return True
    return config.unmask == "ltr" or config.k == 1
