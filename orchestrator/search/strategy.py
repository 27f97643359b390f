"""The one protocol every search strategy implements, and the registry that names them.

A strategy says what to measure next (`ask`: requests, each a candidate on a run of prompts
of the decoding order), is told what each measured (`tell`) and hands over the candidates it
has decided (`decided`), which the caller records as trials. A sweep's driver runs any
registered strategy through these three calls without naming one; `bench search` replays
every registered strategy through the same calls on a measured grid (`run`), so a strategy
is in the benchmark once it is registered here.

A new strategy: a module in this package holding its class and its arithmetic, a line in
`registry.STRATEGIES`, and its tests; the contract test every registered strategy passes
(tests/orchestrator/search/test_strategy.py) picks it up from the registry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import optuna

    from orchestrator.spec.sweep import SweepSpec


@dataclass
class Progress:
    """How far a sweep is, as the CLI shows it while it runs: strategies move `target` (a grid
    smaller than the budget, a space exhausted, a multi-fidelity search's candidates) and
    count `rungs`; the recorder counts the trials."""

    target: int
    finished: int = 0
    failed: int = 0
    frontier: int = 0
    stopped: int = 0  # trials racing stopped early
    rungs: int = 0  # rungs after which a racing trial went on
    note: str = ""


@dataclass
class Sweep:
    """What a strategy of a live sweep works from."""

    spec: SweepSpec
    study: optuna.Study
    progress: Progress
    indices: list[int]  # the task's prompt indices, in decoding order
    prompts: dict[str, dict[int, str]]  # pair -> prompt index -> the prompt it decodes


@dataclass(frozen=True)
class Request:
    """Measure candidate `key` (a grid point's params_key) on the prompts start..end-1 of the
    decoding order: timed (at the candidate's batch size, beside its engine's control) or
    untimed in one batch (a profile)."""

    key: tuple
    timed: bool
    start: int
    end: int
    phase: str  # what its engine-seconds count as: trial, profile, calibration or timing
    config: object = None  # what a profile decodes instead of the candidate's own (a served one's proxy)
    trial: object = None  # the optuna.Trial it measures, when the strategy asked one


@dataclass(frozen=True)
class Measured:
    """What a request measured: its per-prompt records (decoding order), the engine-seconds it
    took, its shards' raw results (their controls, warm-ups and engine starts), or the error
    that ended it."""

    records: list[dict]
    seconds: float
    results: list[dict] = field(default_factory=list)
    error: str | None = None


@dataclass
class Decision:
    """A candidate the strategy has decided: recorded as a trial (`trial`, or a new one on
    `key` when None) from its timed shards' `results`, failed with `error`, stopped (dominated
    or infeasible with confidence: never on a frontier), or only profiled (no results: its
    `profile` records and `predicted` objectives are what it has). `attrs` are trial
    attributes the strategy adds (how it was decided)."""

    key: tuple
    trial: object = None
    results: list[dict] = field(default_factory=list)
    error: str | None = None
    stopped: bool = False
    attrs: dict = field(default_factory=dict)
    profile: list[dict] = field(default_factory=list)
    predicted: dict = field(default_factory=dict)
    why: str | None = None  # why it stopped
    start: float = field(default_factory=time.time)  # when it was first asked


class Strategy(Protocol):
    """What a search does; `in_flight`: requests asked and not told yet."""

    def ask(self, in_flight: int) -> list[Request]:
        """The requests to measure next; [] with none in flight: the search is over."""

    def tell(self, request: Request, measured: Measured) -> None:
        """What a request measured (or the error that ended it)."""

    def decided(self) -> list[Decision]:
        """The candidates decided since the last call, each once."""

    def note(self, requests: list[Request]) -> str:
        """What these requests do, for the progress line ("" to say nothing)."""


def run(strategy: Strategy, measure: Callable[[Request], Measured]) -> list[Decision]:
    """Run a strategy to its end with `measure` answering each request in turn (a replay of a
    measured grid); every decision, in the order made."""
    decisions: list[Decision] = []
    while requests := strategy.ask(0):
        for request in requests:
            strategy.tell(request, measure(request))
        decisions += strategy.decided()
    return decisions + strategy.decided()
