"""vLLM's spec-decode counters, read from a server's Prometheus metrics (/metrics) and named
as specsweep's records name them."""

from __future__ import annotations

import re
from dataclasses import dataclass

_SAMPLE = re.compile(r'^vllm:spec_decode_(\w+)_total\{([^}]*)\} ([0-9.eE+-]+)$', re.M)


@dataclass(frozen=True)
class Counters:
    """vLLM's spec-decode counters, by specsweep's names: `iterations` (drafts: one per
    verification of a request), `drafted` (draft tokens), `accepted` (accepted draft tokens)
    and `accepted_per_pos` (accepted tokens at each draft position)."""

    iterations: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_pos: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Counters:
        totals: dict[str, float] = {}
        positions: dict[int, float] = {}
        for name, labels, value in _SAMPLE.findall(text):
            position = re.search(r'position="(\d+)"', labels)
            if name == "num_accepted_tokens_per_pos" and position:
                positions[int(position.group(1))] = positions.get(int(position.group(1)), 0) + float(value)
            else:
                totals[name] = totals.get(name, 0) + float(value)
        per_pos = tuple(int(positions[i]) for i in sorted(positions))
        return cls(int(totals.get("num_drafts", 0)), int(totals.get("num_draft_tokens", 0)),
                   int(totals.get("num_accepted_tokens", 0)), per_pos)

    def __sub__(self, before: Counters) -> Counters:
        width = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        pad = lambda c: c.accepted_per_pos + (0,) * (width - len(c.accepted_per_pos))  # noqa: E731
        return Counters(self.iterations - before.iterations, self.drafted - before.drafted,
                        self.accepted - before.accepted, tuple(a - b for a, b in zip(pad(self), pad(before))))
