"""Ctrl-C and SIGTERM during a sweep: each raises KeyboardInterrupt in the driver's main
thread, except while that thread appends to the sweep's Optuna journal, where the interrupt is
held until the append is over.

Why: Optuna's journal takes a file lock around each append. An interrupt inside it leaves the
journal locked or fails as something else: inside the lock's release, before its rename, the
release unlinks a file that was never made and raises FileNotFoundError; inside its acquire,
it releases a lock it may not hold. A sweep so interrupted ended as failed (exit 2), not
interrupted (exit 130), and a journal left locked stalls the next write to it for 30 s, Optuna's
grace period before it takes a lock by force."""

from __future__ import annotations

import contextlib
import signal
import threading

from optuna.storages.journal import JournalFileBackend

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Held:
    depth = 0  # appends in progress in the main thread (the only one a handler interrupts)
    pending = False  # an interrupt came during one


def on_interrupt(signum, frame) -> None:
    """The handler for SIGNALS during a sweep: KeyboardInterrupt now, or once the journal
    append in progress is over."""
    if _Held.depth:
        _Held.pending = True
        return
    raise KeyboardInterrupt


def install() -> dict:
    """Put `on_interrupt` in for SIGNALS; returns the handlers it replaced (for `restore`)."""
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, on_interrupt)
    return previous


def restore(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@contextlib.contextmanager
def held():
    """Interrupts of the main thread wait until the block is over (a block in another thread
    cannot be interrupted by a handler, so it holds nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        if not _Held.depth and _Held.pending:
            _Held.pending = False
            raise KeyboardInterrupt


class HeldJournal(JournalFileBackend):
    """Optuna's journal file, each append (lock, write, release) held against interrupts."""

    def append_logs(self, logs: list[dict]) -> None:
        with held():
            super().append_logs(logs)
