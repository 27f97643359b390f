"""The sustained-rate search's rule, pure: bisection along the request rate, a rate labelled
sustained only when every one of its repeated loads met the SLO.

Let p(r) be the chance that one load at rate r meets every SLO limit (`slo_met`), falling as
r grows, and r_q the highest rate with p(r) >= q. A rate whose p <= q is labelled sustained
with chance p^R <= q^R (R repeats: at 3, 12.5% for q = 1/2, 1.6% for q = 1/4). The search
probes `high`, then `low`, then `steps` geometric midpoints of the bracket; the reported rate
(the highest rate labelled sustained) exceeds r_q only when a probe above r_q was labelled
sustained, so with chance at most (steps + 2) · q^R (`overshoot_bound`).
tests/orchestrator/analysis/test_sustain.py checks both by simulation, for q = 1/2 and 1/4,
at every R and step count the command allows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_REPEATS = 9
MAX_STEPS = 8


@dataclass
class Bracket:
    """What a search found: `sustained`, the highest rate whose loads all met the SLO (None
    when not even `low` did); `failed`, the lowest rate where one did not (None when `high`
    was sustained); every probe as (rate, loads that met the SLO, loads)."""

    sustained: float | None = None
    failed: float | None = None
    probes: list[tuple[float, int, int]] = field(default_factory=list)


def midpoint(low: float, high: float) -> float:
    """The geometric midpoint √(low · high): rates are bisected on a log scale, so each step
    halves the bracket's ratio high / low in log terms."""
    return math.sqrt(low * high)


def label_error(p: float, repeats: int) -> float:
    """The chance a rate whose loads each meet the SLO with chance p is labelled sustained: p^R."""
    return p ** repeats


def overshoot_bound(steps: int, repeats: int, q: float = 0.5) -> float:
    """A bound on P(reported rate > r_q): (steps + 2) probes, each above r_q labelled
    sustained with chance <= q^R (union bound): min(1, (steps + 2) · q^R)."""
    return min(1.0, (steps + 2) * q ** repeats)


def search(meets: Callable[[float, int], bool], low: float, high: float, steps: int, repeats: int,
           found: Bracket | None = None) -> Bracket:
    """Bisect the rate between `low` and `high`: `meets(rate, i)` runs load i (0 ≤ i < R) at
    `rate` and says whether it met the SLO; a rate is sustained when all R did (its loads stop
    at the first that did not). `high` first (sustained: done), then `low` (not sustained:
    done), then `steps` midpoints, each moving the bracket's low end up when sustained, else
    its high end down. `found`, where given, is filled as the search goes (what a caller keeps
    of a search cut short)."""
    found = Bracket() if found is None else found

    def sustained(rate: float) -> bool:
        met = 0
        while met < repeats and meets(rate, met):
            met += 1
        found.probes.append((rate, met, min(met + 1, repeats)))
        return met == repeats

    if sustained(high):
        found.sustained = high
        return found
    found.failed = high
    if not sustained(low):
        found.failed = low
        return found
    found.sustained = low
    for _ in range(steps):
        rate = midpoint(found.sustained, found.failed)
        if sustained(rate):
            found.sustained = rate
        else:
            found.failed = rate
    return found
