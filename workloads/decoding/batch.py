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

import torch


class Aborted(RuntimeError):
    """Another row of the batch failed."""


@dataclass
class Call:
    """One row's model call, queued on `network` (anything with `run(calls) -> results`)."""

    network: object
    row: int
    request: object
    result: object = None
    done: bool = False


@dataclass
class Batch:
    """The rows of one batch and the calls they wait on."""

    size: int
    live: int = -1
    waiting: list[Call] = field(default_factory=list)
    failed: BaseException | None = None
    lock: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self):
        if self.live < 0:
            self.live = self.size

    def call(self, network, row: int, request) -> object:
        """Queue `request` on `network` for `row` and wait for its result."""
        call = Call(network, row, request)
        with self.lock:
            self.waiting.append(call)
            while not call.done:
                if self.failed is not None:
                    raise Aborted("another row of the batch failed") from self.failed
                if len(self.waiting) == self.live:
                    self._run()
                else:
                    self.lock.wait()
        return call.result

    def _run(self) -> None:
        """Run the calls of the network most rows wait on (the earliest queued among ties)."""
        counts: dict[int, int] = {}
        for c in self.waiting:
            counts[id(c.network)] = counts.get(id(c.network), 0) + 1
        chosen = max(self.waiting, key=lambda c: counts[id(c.network)]).network
        # in row order, the order of the network's cache: a call over every row needs no copy
        group = sorted((c for c in self.waiting if c.network is chosen), key=lambda c: c.row)
        try:
            results = chosen.run(group)
        except BaseException as error:
            self.failed = error
            self.lock.notify_all()
            raise
        for c, result in zip(group, results):
            c.result, c.done = result, True
        self.waiting = [c for c in self.waiting if not c.done]
        self.lock.notify_all()

    def leave(self, row: int, networks: list) -> None:
        """`row` has finished (or failed): release its slots; a waiting row may now be the last."""
        with self.lock:
            self.live -= 1
            for network in networks:
                network.release(row)
            self.lock.notify_all()

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.failed is None:
                self.failed = error
            self.lock.notify_all()


def run_rows(batch: Batch, rows: list[Callable[[], None]], networks: list) -> None:
    """Run the row loops `rows` together; re-raises the first row's error."""
    errors: list[BaseException] = []

    def run(row: int) -> None:
        try:
            with torch.inference_mode():
                rows[row]()
        except Aborted:
            pass
        except BaseException as error:  # the batch stops; the caller gets this row's error
            errors.append(error)
            batch.fail(error)
        finally:
            batch.leave(row, networks)

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
