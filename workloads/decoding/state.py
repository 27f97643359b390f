"""The mutable state of one decode, shared by the schedule loops."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workloads.decoding.calls import Meter
from workloads.decoding.config import DecodeConfig
from workloads.decoding.output import Output
from workloads.decoding.sampling import sample


@dataclass
class DecodeState:
    """What one decode has emitted and counted so far, and the randomness it draws from."""

    config: DecodeConfig
    out: Output
    generator: torch.Generator
    meter: Meter
    iterations: int = 0
    accepted: int = 0
    drafted: int = 0
    accept_lengths: list[int] = field(default_factory=list)

    def sample(self, logits: torch.Tensor) -> int:
        """One token from the verifier's sampling distribution of logits (V,) (sampling.sample),
        the noise from this decode's generator."""
        c = self.config
        return int(sample(logits[None], c.temperature, c.top_k, c.top_p,
                          lambda p: torch.empty_like(p).exponential_(generator=self.generator))[0])
