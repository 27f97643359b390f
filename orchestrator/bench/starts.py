"""What a vLLM server start costs, and whether a cheaper start measures the same ratios.

A start's parts are read from its process group once it serves: when the API server spawned
the engine core (the API server's imports and config), when the engine core spawned a worker
(where the model runs in a worker process of its own, vLLM's default on CPU), and the rest
(model load, KV cache, the first health check). Its model in the engine core's process
(`EngineSettings.worker_process=False`: `VLLM_ENABLE_V1_MULTIPROCESSING=0`) spawns one
interpreter fewer; a sweep may start its servers so only if the speed ratio it measures (a
speculative server's speed over the control's at the same concurrency) is the same. Four
servers: control and speculative, each both ways, timed in blocks of the mirrored order
C1 S1 C0 S0 S0 C0 S1 C1 (1: a worker process, 0: none); per block
r = ln(W_C0 / W_S0) - ln(W_C1 / W_S1), W a server's two walls summed, and the ratio of the two
speed ratios with its interval (resident.log_ratio_interval) must contain 1.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workloads.serving.config import ServingConfig
from workloads.serving.load import serve, switch, warm
from workloads.serving.procs import TICKS_PER_S, group_pids, stat_fields
from workloads.serving.resident import LEVEL, log_ratio_interval
from workloads.serving.vllm import EngineSettings, VllmServer, supervised


@dataclass(frozen=True)
class Start:
    """One server's start: seconds until it served, and when (seconds after the start began)
    its API server spawned the engine core and the engine core a worker (None: no such process)."""

    way: str  # "worker process" or "engine core"
    side: str  # "control" or "speculative"
    seconds: float
    engine_core_at: float | None
    worker_at: float | None


def spawned(server: VllmServer) -> dict[str, float]:
    """Seconds from the server's first process (its guard) to each of its group's vLLM
    processes' spawn: `engine_core`, `worker` (from /proc: each process's start time)."""
    group = server.process.pid
    found = {}
    for pid in group_pids(group):
        try:
            began = int(stat_fields(pid)[19]) / TICKS_PER_S
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except (OSError, ValueError):
            continue
        if pid == group:
            found["guard"] = began
        elif title.startswith("VLLM::EngineCore"):
            found["engine_core"] = began
        elif title.startswith("VLLM::"):
            found["worker"] = min(began, found.get("worker", began))
    base = found.pop("guard")
    return {name: at - base for name, at in found.items()}


@dataclass(frozen=True)
class StartsCheck:
    """Four starts and the ratio (engine core / worker process) of the speed ratios they measured."""

    starts: list[Start]
    ratios: dict[str, float]  # "worker process" / "engine core": the speculative server's speed ratio
    ratio: float
    low: float
    high: float
    blocks: int

    @property
    def holds(self) -> bool:
        return self.low <= 1 <= self.high

    def lines(self) -> list[str]:
        out = ["start            server      serving after   engine core spawned   worker spawned"]
        for s in self.starts:
            out.append(f"{s.way:<16} {s.side:<11} {s.seconds:>11.1f} s   "
                       + (f"{s.engine_core_at:>17.1f} s" if s.engine_core_at is not None else f"{'-':>19}")
                       + (f"   {s.worker_at:>12.1f} s" if s.worker_at is not None else f"   {'-':>14}"))
        out.append("speed ratio, speculative / control: " + ", ".join(
            f"{way} {value:.3f}" for way, value in self.ratios.items()))
        out.append(f"engine core / worker process: {self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] "
                   f"({LEVEL:.0%}, {self.blocks} blocks C1 S1 C0 S0 S0 C0 S1 C1): "
                   + ("contains 1, the ratio is unchanged" if self.holds else "DIFFERS"))
        return out


def check(checkpoints: dict, config: ServingConfig, ids: list[list[int]], blocks: int,
          say: Callable[[str], None]) -> StartsCheck:
    """Start the four servers of `config` (its method and draft length) and its control, each
    with and without a worker process, and time them (module docstring)."""
    control = config.unspeculative()
    ways = {"worker process": True, "engine core": False}
    servers = {(way, side): VllmServer(dataclasses.replace(EngineSettings.of(checkpoints, c),
                                                           worker_process=own))
               for way, own in ways.items() for side, c in (("control", control), ("speculative", config))}
    loads = {server: config if side == "speculative" else control for (_, side), server in servers.items()}
    starts = []
    try:
        for (way, side), server in servers.items():
            say(f"starting vLLM ({way}): {side}")
            seconds = server.start()
            at = spawned(server)
            starts.append(Start(way, side, seconds, at.get("engine_core"), at.get("worker")))
            supervised(server, functools.partial(warm, server, ids, loads[server]))
        c1, s1, c0, s0 = (servers[way, side] for way in ways for side in ("control", "speculative"))
        order = [c1, s1, c0, s0, s0, c0, s1, c1]
        r, sums = [], {s: 0.0 for s in order}
        previous = list(servers.values())[-1]  # warmed last: the first timed load waits for it too
        for block in range(blocks):
            say(f"timing block {block + 1} of {blocks}")
            walls = {s: 0.0 for s in order}
            for server in order:
                switch(previous, server)
                walls[server] += supervised(server, functools.partial(serve, server, ids, loads[server]))[1]
                previous = server
            r.append(math.log(walls[c0] / walls[s0]) - math.log(walls[c1] / walls[s1]))
            sums = {s: sums[s] + walls[s] for s in order}
        ratios = {"worker process": sums[c1] / sums[s1], "engine core": sums[c0] / sums[s0]}
        return StartsCheck(starts, ratios, *log_ratio_interval(r), blocks)
    finally:
        for server in servers.values():
            server.stop()
