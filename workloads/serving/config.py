"""ServingConfig: what one measurement in a serving engine sets, validated with one-line errors.

vLLM verifies losslessly and drafts one pass per verification, so its space is the speculative
`method`, `num_speculative_tokens` and the verifier's sampling; `concurrency` (requests in
flight) is what batch size means there. Settings of specsweep's own engine (K > 1, τ, lenient
rules, packed, self schedules) have no vLLM setting.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar

from workloads.decoding.config import DecodeConfig
from workloads.decoding.kinds import PairKind
from workloads.serving.ngram import PROMPT_LOOKUP

METHODS = ("none", "ngram", "dflash", "dspark", "draft_model", "eagle3")
# methods whose server drafts any k up to its n at run time as a server started at k does
# (`specsweep conform --resident`; docs/serving.md lists the check per family)
RUNTIME_DRAFT = ("ngram", "dflash", "dspark", "draft_model", "eagle3")


def _positive(value) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


class ServingError(ValueError):
    """An invalid serving configuration, or an engine that cannot serve it; names the field."""


MAX_DRAFT_TOPK = 1 << 20  # DSpark's draft top-k: above every vocabulary
MIN_REQUEST_RATE = 0.01  # requests/s; below it a load measures an idle server
MAX_ARRIVAL_S = 1800.0  # the expected span of a load's arrivals, (requests − 1) / rate


def arrival_error(requests: int, rate: float, field: str) -> str | None:
    """Why a load of `requests` arriving at `rate` would take too long, naming `field`: its
    expected arrival span (requests − 1) / rate above MAX_ARRIVAL_S; else None."""
    span = (requests - 1) / rate
    if span <= MAX_ARRIVAL_S:
        return None
    return (f"{field}: {rate:g} requests/s spreads a load of {requests} requests over {span:,.0f} s; "
            f"at most {MAX_ARRIVAL_S:,.0f} s: raise the rate to {(requests - 1) / MAX_ARRIVAL_S:.3g} or more")


class EngineFailure(RuntimeError):
    """A serving engine that failed while serving valid input (it died, froze, or was not the
    server started): one line naming its log, exit code 1, not bad input."""


@dataclass(frozen=True)
class ServingConfig:
    method: str = "none"
    num_speculative_tokens: int = 0  # drafts per verification (0 under method none)
    temperature: float = 0.0
    max_new_tokens: int = 64
    concurrency: int = 1  # requests in flight (the bound on them under a request rate)
    request_rate: float | None = None  # requests/s arriving; None: all at once (fixed concurrency)
    burstiness: float = 1.0  # shape of the gamma inter-arrival law: 1 Poisson, < 1 burstier
    seed: int = 0
    stop: tuple[str, ...] = field(default_factory=tuple)
    dspark_draft_topk: int | None = None  # DSpark: its Markov chain picks among the block's top k
    enable_adaptive_verification: bool = False  # DSpark: drafts sized per request by its confidence head
    engine: ClassVar[str] = "vllm"

    def __post_init__(self) -> None:
        if isinstance(self.stop, list | str):
            object.__setattr__(self, "stop", (self.stop,) if isinstance(self.stop, str) else tuple(self.stop))
        if self.method not in METHODS:
            raise ServingError(f"method: must be one of {', '.join(METHODS)}; got {self.method!r}")
        drafts = self.num_speculative_tokens
        if not isinstance(drafts, int) or drafts < 0 or (drafts == 0) != (self.method == "none"):
            raise ServingError(f"num_speculative_tokens: an integer >= 1 with a method, 0 under method none; "
                               f"got {drafts!r} with method {self.method}")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, int | float) or not (
                math.isfinite(self.temperature) and self.temperature >= 0):
            raise ServingError(f"temperature: must be a finite number >= 0; got {self.temperature!r}")
        for name in ("max_new_tokens", "concurrency"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ServingError(f"{name}: must be an integer >= 1; got {getattr(self, name)!r}")
        for name in ("request_rate", "burstiness"):
            value = getattr(self, name)
            if (value is not None or name == "burstiness") and not _positive(value):
                raise ServingError(f"{name}: must be a finite number > 0; got {value!r}")
        if self.request_rate is not None and self.request_rate < MIN_REQUEST_RATE:
            raise ServingError(f"request_rate: at least {MIN_REQUEST_RATE:g} requests/s (one every "
                               f"{1 / MIN_REQUEST_RATE:g} s); got {self.request_rate:g}")
        if not isinstance(self.enable_adaptive_verification, bool):
            raise ServingError(f"enable_adaptive_verification: true or false; got "
                               f"{self.enable_adaptive_verification!r}")
        top_k = self.dspark_draft_topk
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool)
                                  or not 1 <= top_k <= MAX_DRAFT_TOPK):
            raise ServingError(f"dspark_draft_topk: must be an integer from 1 to {MAX_DRAFT_TOPK:,} (no "
                               f"vocabulary is larger); got {top_k!r}")
        if self.method != "dspark" and (top_k is not None or self.enable_adaptive_verification):
            name = "dspark_draft_topk" if top_k is not None else "enable_adaptive_verification"
            raise ServingError(f"{name}: a setting of method dspark; got method {self.method}")

    def speculative_config(self, drafter: str | None) -> dict | None:
        """vLLM's `speculative_config` for this method over `drafter` (a path or hub id; ngram
        and none take none)."""
        if self.method == "none":
            return None
        config: dict = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.method == "ngram":
            smallest, largest = PROMPT_LOOKUP
            return {**config, "prompt_lookup_min": smallest, "prompt_lookup_max": largest}
        if drafter is None:
            raise ServingError(f"method: {self.method} needs a drafter; this pair has none")
        if self.dspark_draft_topk is not None:
            config["dspark_draft_topk"] = self.dspark_draft_topk
        if self.enable_adaptive_verification:
            config["enable_adaptive_verification"] = True
        return {**config, "model": drafter}

    def decode_config(self, kind: PairKind) -> DecodeConfig:
        """The configuration of specsweep's engine that decodes as this one does on a pair of
        `kind`: its drafter's method drafts `num_speculative_tokens` in one pass per
        verification from the newest features, lossless, so `linear`, K = 1, at the block
        whose draft width is num_speculative_tokens; the same sampling and length."""
        if kind.serving_method is None or self.method != kind.serving_method:
            served = f"; use {kind.serving_method}" if kind.serving_method else ""
            raise ServingError(f"method: {self.method} has no counterpart in specsweep's engine on a "
                               f"{kind.name} pair{served}")
        if self.enable_adaptive_verification:
            raise ServingError("enable_adaptive_verification: has no counterpart in specsweep's engine (vLLM "
                               "sizes each draft from cost tables it times at start)")
        return DecodeConfig(schedule="linear", block=kind.block_for(self.num_speculative_tokens), steps=1,
                            rule="lossless", temperature=self.temperature, max_new_tokens=self.max_new_tokens,
                            seed=self.seed, stop=self.stop, draft_top_k=self.dspark_draft_topk)

    @property
    def setting(self) -> tuple:
        """What a server is started with, beside the load: (method, num_speculative_tokens,
        dspark_draft_topk, enable_adaptive_verification)."""
        return (self.method, self.num_speculative_tokens, self.dspark_draft_topk,
                self.enable_adaptive_verification)

    @property
    def one_at_a_time(self) -> bool:
        """Whether requests go one after another (concurrency 1, no rate): then each has its
        own spec-decode counters."""
        return self.concurrency == 1 and self.request_rate is None

    def unspeculative(self) -> ServingConfig:
        """The same load without speculation: the control a trial's speed is compared with."""
        return dataclasses.replace(self, method="none", num_speculative_tokens=0, dspark_draft_topk=None,
                                   enable_adaptive_verification=False)

    @property
    def exact(self) -> bool:
        """vLLM verifies by lossless rejection sampling: its output follows the verifier's law."""
        return True

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["stop"] = list(self.stop)
        return {"engine": self.engine, **out}

    @classmethod
    def from_dict(cls, data: dict) -> ServingConfig:
        return cls(**{k: v for k, v in data.items() if k != "engine"})
