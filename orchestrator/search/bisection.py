"""The sustained-rate search's rule, pure: bisection along the request rate, a rate labelled
sustained only when every one of its repeated loads met the SLO.

Let p(r) be the chance that one load at rate r meets every SLO limit (`slo_met`), falling as
r grows, and r_q the highest rate with p(r) >= q. A rate whose p <= q is labelled sustained
with chance p^R <= q^R (R repeats: at 3, 12.5% for q = 1/2, 1.6% for q = 1/4). The search
probes `high`, then `low`, then `steps` geometric midpoints of the bracket; the reported rate
(the highest rate labelled sustained) exceeds r_q only when a probe above r_q was labelled
sustained, so with chance at most (steps + 2) · q^R (`overshoot_bound`).
tests/orchestrator/search/test_bisection.py checks both by simulation, for q = 1/2 and 1/4,
at every R and step count the command allows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.search.strategy import Decision, Measured, Request, run

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


@dataclass
class Bisection:
    """The bisection as a search strategy (strategy.Strategy): each request one load, the
    `load`-th of its rate's repeats (its key: (("request_rate", rate), ("load", i))), judged
    met or not by `judge` on what it measured; `high` first (sustained: done), then `low` (not
    sustained: done), then `steps` midpoints, each moving the bracket's low end up when
    sustained, else its high end down. A rate's loads stop at the first that misses. Its one
    decision, once over, carries the bracket (`found`, filled as the search goes: what a
    caller keeps of a search cut short)."""

    low: float
    high: float
    steps: int
    repeats: int
    judge: Callable[[Measured], bool]
    found: Bracket = field(default_factory=Bracket)
    rate: float | None = None  # the rate probed now
    met: int = 0  # its loads that met the SLO so far
    probed: int = 0  # rates probed so far
    over: bool = False
    handed: bool = False

    def ask(self, in_flight: int) -> list[Request]:
        if in_flight or self.over:
            return []
        self.rate = self.high if self.rate is None else self.rate
        return [Request((("request_rate", self.rate), ("load", self.met)), True, 0, 0, "load")]

    def tell(self, request: Request, measured: Measured) -> None:
        if measured.error is None and self.judge(measured):
            self.met += 1
            if self.met < self.repeats:
                return
        self._probed(self.met == self.repeats)

    def _probed(self, sustained: bool) -> None:
        found, rate = self.found, self.rate
        found.probes.append((rate, self.met, min(self.met + 1, self.repeats)))
        self.met, self.probed = 0, self.probed + 1
        if sustained:
            found.sustained = rate
        else:
            found.failed = rate
        if self.probed == 1 and not sustained:  # high missed: low next
            self.rate = self.low
            return
        if self.probed == 1 or (self.probed == 2 and not sustained) or self.probed == self.steps + 2:
            self.over = True
            return
        self.rate = midpoint(found.sustained, found.failed)

    def decided(self) -> list[Decision]:
        if not self.over or self.handed:
            return []
        self.handed = True
        return [Decision((), attrs={"bracket": self.found})]

    def note(self, requests: list[Request]) -> str:
        rate, load = (value for _, value in requests[0].key)
        return f"{rate:.3g} requests/s, load {load + 1} of {self.repeats}"


def search(meets: Callable[[float, int], bool], low: float, high: float, steps: int, repeats: int,
           found: Bracket | None = None) -> Bracket:
    """Run the `Bisection` with `meets(rate, i)` running load i (0 ≤ i < R) at `rate` and
    saying whether it met the SLO; `found`, where given, is filled as the search goes."""
    bisection = Bisection(low, high, steps, repeats, lambda measured: measured.records[0]["met"],
                          Bracket() if found is None else found)

    def measure(request: Request) -> Measured:
        rate, load = (value for _, value in request.key)
        return Measured([{"met": meets(rate, load)}], 0.0)

    run(bisection, measure)
    return bisection.found
