"""A resident server against one started at its draft length: a vLLM server started at n and
drafting k at run time (VllmServer.draft) must decode, and cost, as a server started at n = k.

Decoding: both serve the same prompts one at a time, greedy; per prompt the tokens, drafts,
drafted and accepted tokens must be identical (conformance.compare). Cost: both serve the
prompts as one load, all at once (so the steps batch them), in blocks A B B A on one clock (A
the resident server), and the speed ratio's interval (`speed_ratio`) must contain 1.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

from workloads.serving import conformance
from workloads.serving.config import ServingConfig
from workloads.serving.conformance import Conformance, compare, served
from workloads.serving.load import serve, switch, warm
from workloads.serving.vllm import EngineSettings, VllmServer, supervised

LEVEL = 0.99  # the speed interval's confidence: a resident server as fast as its twin fails 1 check in 100


@dataclass(frozen=True)
class SpeedRatio:
    """The resident server's speed over its twin's (started at n = k), with its interval."""

    ratio: float
    low: float
    high: float
    blocks: int
    level: float = LEVEL

    @property
    def holds(self) -> bool:
        """The interval contains 1: the resident server's k costs what a start at k costs."""
        return self.low <= 1 <= self.high

    def line(self) -> str:
        return (f"  speed, resident / started at k: {self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] "
                f"({self.level:.0%}, {self.blocks} blocks A B B A): "
                + ("contains 1" if self.holds else "DIFFERS"))


def log_ratio_interval(r: list[float], level: float = LEVEL) -> tuple[float, float, float]:
    """From B >= 2 blocks' log ratios r_i: exp(mean r) and its interval
    exp(mean r +- t_{(1 + level)/2, B - 1} * sd(r) / sqrt(B)) (Student's t; exact when the r_i
    are independent and normal)."""
    if len(r) < 2:
        raise ValueError("a speed interval needs at least 2 blocks")
    mean, sd = statistics.fmean(r), statistics.stdev(r)
    half = stats.t.ppf((1 + level) / 2, len(r) - 1) * sd / math.sqrt(len(r))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def speed_ratio(blocks: list[tuple[float, float, float, float]], level: float = LEVEL) -> SpeedRatio:
    """From B >= 2 blocks of walls (a1, b1, b2, a2), A the resident server, B its twin:
    r_i = ln((b1 + b2) / (a1 + a2)) and its interval (log_ratio_interval; drift linear in time
    cancels within a block)."""
    r = [math.log((b1 + b2) / (a1 + a2)) for a1, b1, b2, a2 in blocks]
    return SpeedRatio(*log_ratio_interval(r, level), len(r), level)


def timed(resident: VllmServer, twin: VllmServer, ids: list[list[int]], config: ServingConfig,
          blocks: int) -> SpeedRatio:
    """The two servers' walls over `blocks` blocks A B B A of one load of `ids`, all at once
    (each server warmed first), each load once the other server is quiet."""
    config = dataclasses.replace(config, concurrency=len(ids))
    for server in (resident, twin):
        supervised(server, functools.partial(warm, server, ids, config))
    order = [s for _ in range(blocks) for s in (resident, twin, twin, resident)]
    walls, previous = [], twin  # warmed last: the first timed load waits for it to be quiet too
    for server in order:
        switch(previous, server)
        walls.append(supervised(server, functools.partial(serve, server, ids, config))[1])
        previous = server
    return speed_ratio([tuple(walls[i:i + 4]) for i in range(0, len(walls), 4)])


@dataclass(frozen=True)
class ResidentCheck:
    """A resident server held to specsweep, to its twin started at k, and timed against it."""

    to_specsweep: Conformance
    to_twin: Conformance
    speed: SpeedRatio

    @property
    def passed(self) -> bool:
        return self.to_specsweep.passed and self.to_twin.passed and self.speed.holds

    def lines(self) -> list[str]:
        return [*self.to_specsweep.lines(), *self.to_twin.lines(), self.speed.line()]


def check(pair, texts: list[str], config: ServingConfig, settings: EngineSettings, n: int, blocks: int,
          logs: Path, say) -> ResidentCheck:
    """`settings` (started at k = config.num_speculative_tokens) served by a resident server
    started at `n` drafting k, and by its twin started at k: the resident server held to
    specsweep (conformance.check), to its twin prompt by prompt, and their speed ratio."""
    resident = VllmServer(dataclasses.replace(settings, speculative=json.dumps(
        {**json.loads(settings.speculative), "num_speculative_tokens": n})), logs, resident=True)
    twin = VllmServer(settings, logs)
    try:
        for server in (resident, twin):
            say(f"starting vLLM: {server.settings.model} with {server.settings.speculative}"
                + (f", drafting {config.num_speculative_tokens} at run time" if server.resident else ""))
            server.start()
        resident.draft(config.num_speculative_tokens)
        ours = conformance.check(pair, resident, texts, config)
        ids = [pair.tokenizer(t, verbose=False).input_ids for t in texts]
        theirs = supervised(twin, lambda: served(twin, ids, config))
        mine = [p.vllm for p in ours.prompts]  # what the resident server served to specsweep's check
        started_at_k = compare(theirs, mine, config, resident.kernel_check(),
                               reference=f"vllm started at n={config.num_speculative_tokens}")
        say(f"timing {blocks} blocks A B B A (resident, started at k)")
        return ResidentCheck(ours, started_at_k, timed(resident, twin, ids, config, blocks))
    finally:
        resident.stop()
        twin.stop()
