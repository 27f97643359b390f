"""The acceptance of vLLM configurations measured without serving them, in specsweep's engine.

At temperature 0 vLLM emits the verifier's greedy tokens under every method, and its counters
per request are known without a server: a drafter it serves (DFlash) drafts and accepts as
specsweep's engine does under ServingConfig.decode_config (conformance); `ngram` as vLLM's
n-gram drafting replayed over the greedy output (serving/ngram.py); `none` takes one step a
token. So one untimed batch per drafter setting, and one greedy batch for the rest, give
every configuration's per-request counters (`served_record`), and from them its `Acceptance`.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.decoding import DecodeConfig
from workloads.decoding.kinds import PairKind
from workloads.serving.config import ServingConfig
from workloads.serving.ngram import replay


def profile_config(config: ServingConfig, kind: PairKind) -> DecodeConfig:
    """What specsweep's engine decodes to know `config`'s counters: the drafter's own
    configuration (decode_config), or greedy `ar` for none and ngram."""
    if config.method in ("none", "ngram"):
        return DecodeConfig(schedule="ar", max_new_tokens=config.max_new_tokens, seed=config.seed,
                            stop=config.stop)
    return config.decode_config(kind)


def served_record(config: ServingConfig, record: dict, prompt_ids: list[int]) -> dict:
    """A decoded prompt's record (under `profile_config`) as vLLM would count it under
    `config`: `steps` (verifications after the prefill), `iterations` (those with a draft),
    `drafted`, `accepted`, and `nfe` as the verifier's passes where nothing else drafts."""
    tokens = len(record["token_ids"])
    if config.method == "none":
        return {**record, "steps": max(0, tokens - 1), "iterations": 0, "drafted": 0, "accepted": 0,
                "nfe": tokens}
    if config.method == "ngram":
        lookup = replay(prompt_ids, record["token_ids"], config.num_speculative_tokens)
        return {**record, "steps": lookup.steps, "iterations": lookup.iterations, "drafted": lookup.drafted,
                "accepted": lookup.accepted, "nfe": lookup.steps + 1}
    return {**record, "steps": record["iterations"]}


@dataclass(frozen=True)
class Acceptance:
    """A configuration's counts over some requests (served_record's, summed)."""

    requests: int
    tokens: int
    steps: int
    drafted: int = 0
    accepted: int = 0
    iterations: int = 0

    @classmethod
    def of(cls, records: list[dict]) -> Acceptance:
        return cls(len(records), *(sum(r[f] for r in records) if f != "tokens" else
                                   sum(len(r["token_ids"]) for r in records)
                                   for f in ("tokens", "steps", "drafted", "accepted", "iterations")))

    @property
    def step_gain(self) -> float:
        """g = (tokens − requests) / steps: tokens a step emits beyond the prefill's first,
        against one without speculation."""
        return (self.tokens - self.requests) / self.steps if self.steps else 1.0

    @property
    def width(self) -> float:
        """W̄ = drafted / steps: draft tokens a step verifies."""
        return self.drafted / self.steps if self.steps else 0.0

    @property
    def mean_accept_len(self) -> float:
        """Accepted tokens per draft (vLLM's mean acceptance length less one)."""
        return self.accepted / self.iterations if self.iterations else 0.0
