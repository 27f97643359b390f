"""Engine: what every measuring engine answers, so the sweep, the analysis and the exports
ask the engine instead of testing its name.

A configuration names its engine (`DecodeConfig.engine`, `ServingConfig.engine`; a stored
config dict's `engine`, absent on specsweep's). The engine says which space dimensions set it
alone and which values it refuses, how a candidate of it is chosen, what its trials are timed
against (their *control*) and how often, how it measures a shard in a worker (its
`measurer`), how its configs read in tables, how its drift report is keyed, and where an
export keeps its serving setting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from workloads.decoding.config import DecodeConfig
from workloads.decoding.kinds import PairKind
from workloads.serving.config import ServingConfig

Config = DecodeConfig | ServingConfig
Pick = Callable[[str], object]  # a dimension's value: its only one, or the sampler's choice
Choose = Callable[[str, list], object]  # the sampler's choice among values, under a label


class Measurer(Protocol):
    """An engine's measuring in one worker process: what it keeps warm between shards (pairs
    decoded once, servers started) is its own."""

    def measure(self, shards: list, items: list) -> list[dict]:
        """Per shard, its per-prompt records (`records`) and its controls (`controls`), with
        what else the shard's result carries (warm-up decodes, engine starts, where it ran),
        for every (example, formatted prompt) of `items`. Shards given together share their
        prompts and control (Shard.together): the engine may time them beside shared controls."""

    def close(self) -> None:
        """Stop what it started (servers); the process may go on."""


class Engine:
    """One measuring engine. Subclasses set the attributes and implement the methods that raise
    here; the others hold what most engines share."""

    name: str  # space.engine's value and a config's `engine`
    title: str  # how one-line errors name it
    served: bool  # measured as loads on a server: batch size is concurrency, drafts counted per load
    settings: tuple[str, ...] = ()  # space dimensions that set this engine and no other
    controls: str  # what a trial's speed ratio is against, in words
    section: str | None = None  # the key of its setting under an export's `serving`
    baseline: str | None = None  # the sweep baseline its controls repeat (its speed scales the drift)

    def prepare(self, dims: dict[str, list]) -> None:
        """Fail here, before any state or trial, when the engine is not set up or cannot run
        the space's values (`dims`) on this machine."""

    def space_error(self, dims: dict[str, list], racing: bool, alone: bool) -> str | None:
        """Why this engine cannot run the space's values (`alone`: the only engine listed), in
        one line naming the dimension, or None."""
        return None

    def pairs_error(self, dims: dict[str, list], kinds: dict[str, PairKind]) -> str | None:
        """Why the sweep's pairs (name -> kind) cannot run the space's values here, or None."""
        return None

    def choose(self, dims: dict[str, list], kind: PairKind, pick: Pick, choose: Choose) -> tuple[Config, int]:
        """(config, batch size) of a candidate on a pair of `kind`: the dimensions that apply
        to this engine, in a fixed order (spec.space.choose_config)."""
        raise NotImplementedError

    def control(self, config: Config, ar: DecodeConfig | None) -> Config | None:
        """The configuration timed beside a trial of `config` (`ar`: the sweep's, if any)."""
        raise NotImplementedError

    def draft_ceiling(self, dims: dict[str, list]) -> int | None:
        """The draft length a served trial's server starts at when it drafts each trial's at
        run time (Shard.draft_ceiling), from the space's values; None: no run-time draft length."""
        return None

    def start_key(self, pair: str, config: Config) -> object | None:
        """What a measurement of `config` on `pair` starts (a server's settings): the grid
        brings configs with one key together, so each such start is made once (spec.space.grid);
        None where a config starts nothing of its own."""
        return None

    def repeats(self, asked: int) -> int:
        """How many times a trial's load and its control's are each timed (`asked`:
        serving.repeats)."""
        return 1

    def measurer(self, worker) -> Measurer:
        """What measures this engine's shards in `worker`'s process (sweep.workers.PairWorker:
        its resident pairs `pair(name)`, `task`, `sweep_seed`, `pair_specs`, `logs`), made once
        per process and kept between shards."""
        raise NotImplementedError

    def columns(self, config: dict) -> dict:
        """How a config reads in tables and run names: schedule, block, effort, rule, leniency."""
        raise NotImplementedError

    def label(self, config: dict) -> str:
        """A config in a few words, as a table row reads it."""
        raise NotImplementedError

    def own_setting(self, config: dict, drafter: str | None) -> dict | None:
        """The setting this engine itself serves a stored `config` with (an export's
        `serving[section]`; `drafter`: the pair's drafter checkpoint, where it has one), or None
        where it serves none itself (specsweep's configs reach a serving engine through their
        drafter's method: analysis.serving)."""
        return None

    def drift_key(self, pair: str) -> str:
        """The name of a pair's drift report for this engine's controls (timing_report)."""
        return f"{pair}:{self.name}"
