"""Rows of a batch decoding together: each row runs its own schedule loop, and their model
calls meet in one forward pass.

A row's loop is the single-prompt code, unchanged: it samples from its own generator,
accepts its own count and keeps its own cache slots. Only its model calls are shared. A call
waits until every row still in the batch is waiting on a call or has finished; then the
calls queued on one network (the one most rows wait on) run as one forward and those rows
go on. A row that stops leaves at once, so the others never wait for it. With one row the
call runs on the spot, in the caller's thread: a single-prompt decode is the batch of one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch


class Aborted(RuntimeError):
    """Another row of the batch failed."""


class Shared(Protocol):
    """A network the rows of a batch share (`calls.Network`, `dflash.DFlashNetwork`): it runs
    their queued calls as one forward, frees a row's slots when it leaves, drops what it holds
    on the model when the batch ends, and meters its forward passes (`work`: calls, token
    rows, time)."""

    work: object  # calls.Meter

    def run(self, calls: list[Call]) -> list: ...

    def release(self, row: int) -> None: ...

    def close(self) -> None: ...


@dataclass
class Call:
    """One row's model call, queued on `network`."""

    network: Shared
    row: int
    request: object
    result: object = None
    ready: threading.Event = field(default_factory=threading.Event)


@dataclass
class Batch:
    """The rows of one batch and the calls they wait on. The thread whose call (or whose
    leaving) completes the set of waiting rows runs the forward itself and wakes only the
    rows it served, so a call costs no thread switch beyond those rows' own."""

    size: int
    slack: float | None = None  # the masked share of a KV slot cache that compacts it (None: slots.SLACK)
    live: int = -1
    waiting: list[Call] = field(default_factory=list)
    failed: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        if self.live < 0:
            self.live = self.size

    def call(self, network, row: int, request) -> object:
        """Queue `request` on `network` for `row` and wait for its result."""
        call = Call(network, row, request)
        with self.lock:
            if self.failed is not None:
                raise Aborted("another row of the batch failed") from self.failed
            self.waiting.append(call)
            self._run_ready()
        call.ready.wait()
        if call.result is None:  # woken by `_abort`
            raise Aborted("another row of the batch failed") from self.failed
        return call.result

    def _run_ready(self) -> None:
        """While every live row waits, run the calls of the network most rows wait on (the
        earliest queued among ties); the caller holds the lock."""
        while self.waiting and len(self.waiting) == self.live:
            counts: dict[int, int] = {}
            for c in self.waiting:
                counts[id(c.network)] = counts.get(id(c.network), 0) + 1
            chosen = max(self.waiting, key=lambda c: counts[id(c.network)]).network
            # in row order, the order of the network's cache: a call over every row needs no copy
            group = sorted((c for c in self.waiting if c.network is chosen), key=lambda c: c.row)
            self.waiting = [c for c in self.waiting if c.network is not chosen]
            try:
                results = chosen.run(group)
            except BaseException as error:
                self._abort(error, group)
                raise
            for c, result in zip(group, results):
                c.result = result
                c.ready.set()

    def leave(self, row: int, networks: list[Shared]) -> None:
        """`row` has finished (or failed): release its slots; if every other row now waits,
        run their calls here."""
        with self.lock:
            self.live -= 1
            for network in networks:
                network.release(row)
            if self.failed is None:
                self._run_ready()

    def fail(self, error: BaseException) -> None:
        with self.lock:
            self._abort(error, [])

    def _abort(self, error: BaseException, group: list[Call]) -> None:
        """Stop the batch: every waiting row (and `group`, whose forward failed) is woken to
        raise Aborted."""
        if self.failed is None:
            self.failed = error
        for c in self.waiting + group:
            c.ready.set()
        self.waiting = []


def run_rows(batch: Batch, rows: list[Callable[[], None]], networks: list[Shared]) -> None:
    """Run the row loops `rows` together; re-raises the first row's error."""
    errors: list[BaseException] = []

    def guarded(step) -> None:
        try:
            with torch.inference_mode():  # grad mode is per thread; so is a forward run on leaving
                step()
        except Aborted:
            pass
        except BaseException as error:  # the batch stops; the caller gets this row's error
            errors.append(error)
            batch.fail(error)

    def run(row: int) -> None:
        guarded(rows[row])
        guarded(lambda: batch.leave(row, networks))

    if len(rows) == 1:
        run(0)
    else:
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(rows))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
