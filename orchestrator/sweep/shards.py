"""The shard queue: which worker decodes which shard, and what happens when one fails.

Rules, in one place (the executor supplies the Ray calls, so they are testable without Ray):
- a job (a trial or a baseline) is split into shards; a shard already in the cache is done
  without decoding, a finished one is written to the cache (atomically, keyed by pair,
  config, prompts, task and control, so `--resume` never decodes it twice);
- up to DEPTH calls are queued per worker, so the next one waits in the worker while the
  driver scores and logs, and a shard goes to the least loaded worker serving its pair;
- pending shards measured together (`shard.measured_together`: served trials on one server
  start, with one control and prompts) go in one call, which times them beside shared controls; each keeps
  its own job, cache entry, retries and deaths;
- a shard whose worker died is queued again at the front, for another worker if one is
  free; the dead worker gets nothing until a probe says Ray has restarted it; a death
  counts once against each shard it held (up to DEPTH), and MAX_LOST deaths under one
  shard fail its job;
- a shard whose decode raised is retried; MAX_ATTEMPTS failures fail the job (its other
  shards are dropped, none is retried, and it is handed back once none is in flight).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.engines.shard import Shard, measured_together
from orchestrator.files import write_atomic
from orchestrator.spec.space import Candidate

MAX_ATTEMPTS = 2  # per shard, for errors raised by the decode itself
MAX_LOST = 3  # per shard, for workers that died under it
DEPTH = 2  # shards queued per worker
MIN_SHARD = 8  # prompts: smaller trials run whole, several trials side by side instead


def split(n: int, workers: int, batch: int) -> list[tuple[int, int]]:
    """(start, end) spans of n prompts, one per worker but none under MIN_SHARD prompts
    (at least one), each a whole number of batches: size = ⌈n / count / batch⌉ · batch, so
    every config at one batch size decodes the same batches."""
    count = max(1, min(workers, n // MIN_SHARD))
    size = math.ceil(n / count / batch) * batch
    return [(i, min(i + size, n)) for i in range(0, n, size)]


class WorkerLost(Exception):
    """The worker died under a call (raised by `fetch`: `raycluster.fetch` in a sweep)."""


class ShardFailed(Exception):
    """The decode raised; the message is its cause in one line (raised by `fetch`)."""


@dataclass
class Job:
    """One trial (or baseline) in flight."""

    key: str  # "trial:<number>" or a baseline key
    label: str
    candidate: Candidate
    shards: list[Shard]
    trial: object | None = None  # optuna.Trial; None for baselines
    results: dict[int, dict] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)
    lost: dict[int, int] = field(default_factory=dict)
    start: float = field(default_factory=time.time)
    error: str | None = None

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.shards)


class ShardQueue:
    """Shards waiting, in flight and cached. `submit(worker, shard)` starts a decode and
    returns a handle; `wait(handles, timeout)` returns the ready ones; `fetch(handle)` returns
    a result or raises WorkerLost / ShardFailed; `probe(worker)` returns a handle that is
    ready once a dead worker is back (its fetch raises WorkerLost while it is not)."""

    def __init__(self, serves: dict[int, list[str]], cache_dir: Path, cache_salt: str,
                 submit: Callable, wait: Callable, fetch: Callable, probe: Callable):
        self.serves, self.cache_dir, self.cache_salt = serves, cache_dir, cache_salt
        self._submit, self._wait, self._fetch, self._probe_call = submit, wait, fetch, probe
        self.pending: list[tuple[Job, int, int | None]] = []  # (job, shard index, worker to avoid)
        self.inflight: dict = {}  # handle -> ([(job, shard index), ...] measured in the call, worker)
        self.load = dict.fromkeys(serves, 0)  # calls queued or running per worker
        self.restarting: dict[int, object] = {}  # dead worker -> the probe that says it is back

    def cache_path(self, shard: Shard) -> Path:
        # the configs' dict form, as the key has always held them, so earlier caches still match
        key = json.dumps([shard.pair, shard.config.to_dict(), shard.indices, self.cache_salt]
                         + ([shard.control.to_dict()] if shard.control else [])
                         + ([shard.batch_size] if shard.batch_size != 1 else []), sort_keys=True)
        return self.cache_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def add(self, job: Job) -> None:
        """Queue the job's shards that the cache does not hold (an unreadable entry is decoded
        again)."""
        for i, shard in enumerate(job.shards):
            try:
                job.results[i] = json.loads(self.cache_path(shard).read_text())
            except (OSError, ValueError):
                self.pending.append((job, i, None))

    def dispatch(self) -> None:
        """Hand pending shards to workers, up to DEPTH calls each (see the module docstring)."""
        while placed := self._place_one():
            members, worker = placed
            self.inflight[self._submit(worker, [job.shards[i] for job, i in members])] = placed
            self.load[worker] += 1

    def _place_one(self) -> tuple[list[tuple[Job, int]], int] | None:
        """The first pending shard some free worker serves, with every other pending shard
        measured together with it and with each other (shard.measured_together), popped, and
        that worker."""
        for n, (job, _, avoid) in enumerate(self.pending):
            free = [w for w, load in self.load.items() if load < DEPTH and w not in self.restarting
                    and job.candidate.pair in self.serves[w]]
            if free:
                members = [self.pending[n]]
                for other in self.pending:
                    key = other[0].shards[other[1]].together
                    if other is not members[0] and all(
                            measured_together(m[0].shards[m[1]].together, key) for m in members):
                        members.append(other)
                self.pending = [p for p in self.pending if not any(p is m for m in members)]
                others = [w for w in free if w != avoid]
                return [(j, s) for j, s, _ in members], min(others or free, key=lambda w: self.load[w])
        return None

    def collect(self, timeout: float) -> list[Job]:
        """Wait up to `timeout` for results; returns the jobs that became complete or failed."""
        if not self.inflight and not self.restarting:
            return []
        probes = {ref: w for w, ref in self.restarting.items()}
        finished = []
        for ref in self._wait(list(self.inflight) + list(probes), timeout):
            if ref in probes:
                self._restarted(probes[ref], ref)
                continue
            members, worker = self.inflight.pop(ref)
            self.load[worker] -= 1
            try:
                outs = self._fetch(ref)
            except WorkerLost:
                # A death fails every call the worker held (up to DEPTH): each of those shards
                # lost its worker once, and one probe waits for the restart.
                if worker not in self.restarting:
                    self.restarting[worker] = self._probe_call(worker)
                for job, i in members:
                    job.lost[i] = job.lost.get(i, 0) + 1
                    if job.error is None and job.lost[i] < MAX_LOST:
                        self.pending.insert(0, (job, i, worker))
                    else:
                        job.error = job.error or f"shard {i}: its worker died {MAX_LOST} times"
                        finished += self._ended(job)
            except ShardFailed as err:
                for job, i in members:
                    job.attempts[i] = job.attempts.get(i, 0) + 1
                    if job.error is None and job.attempts[i] < MAX_ATTEMPTS:
                        self.pending.insert(0, (job, i, worker))
                    else:
                        job.error = job.error or str(err)
                        finished += self._ended(job)
            else:
                for (job, i), out in zip(members, outs, strict=True):
                    job.results[i] = out
                    write_atomic(self.cache_path(job.shards[i]), json.dumps(out))
                    finished += self._ended(job)
        return finished

    def _ended(self, job: Job) -> list[Job]:
        """[job] when it is complete, or failed with none of its shards in flight (its pending
        ones dropped); else []."""
        if job.error is not None:
            self.pending = [p for p in self.pending if p[0] is not job]
            in_flight = any(j is job for members, _ in self.inflight.values() for j, _ in members)
            return [] if in_flight else [job]
        return [job] if job.done else []

    def _restarted(self, worker: int, ref) -> None:
        try:
            self._fetch(ref)
            del self.restarting[worker]
        except (WorkerLost, ShardFailed):  # not back yet: ask again shortly
            time.sleep(0.2)
            self.restarting[worker] = self._probe_call(worker)
