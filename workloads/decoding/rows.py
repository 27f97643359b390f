"""The rows of one batch decoding together: each iteration of a schedule runs over all live rows
at once, as tensors, with no thread and no Python loop over rows in its path.

Rows stay ragged: each has its own cache slots and positions (slots.SlotCache, one cache for
the batch), its own emitted tokens and counts, and its own stop; a row that stops leaves the
batch (its slots are dropped) and the others go on. `Rows` holds what the live rows emitted
and counted; a schedule's loop (schedules.py, selfspec.py, anyorder.py, over drafting.py,
drafters.py and verifying.py) asks it to sample, to emit and to run a network's forward over
every live row (`call`).

Randomness stays per row: a row draws from its own generator exactly what it draws decoding
alone (the same count, in the same order), and the draws of the live rows are stacked into
one tensor, so a sampled row's tokens do not depend on its batch-mates. The only per-row
host work of an iteration is that draw at sampling settings (greedy draws nothing) and, under
stop strings, reading each row's text.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from workloads.decoding.config import DecodeConfig
from workloads.decoding.layout import Call
from workloads.decoding.network import Network
from workloads.decoding.output import Output
from workloads.decoding.sampling import sample


class RowMeters:
    """Model work per batch row: each forward counted on every row it served, with the row's
    own token rows and the call's time (CPU seconds, or CUDA events read after the decode's
    final synchronization, as network.Meter). A call only records what it served; the tallies
    per row (`tally`) are summed once, after the decode, so metering costs an iteration
    one append per call at any batch size."""

    def __init__(self, size: int):
        self.size = size
        self.calls: list = []  # (interval, live batch rows, each one's token rows, served or None)
        self.nfe = self.rows = self.model_s = None  # per row, after `tally`

    def add(self, interval, live: np.ndarray, rows: np.ndarray, served: np.ndarray | None = None) -> None:
        """A call over the `live` batch rows, rows[i] of them live[i]'s (0: padding only, not
        served), unless served (L,) bool says a row was not served."""
        self.calls.append((interval, live, rows, served))

    def tally(self) -> None:
        """nfe, rows (token rows) and model_s per batch row: Σ over the calls that served it."""
        self.nfe, self.rows, self.model_s = (np.zeros(self.size, dtype=np.int64),
                                             np.zeros(self.size, dtype=np.int64), np.zeros(self.size))
        if not self.calls:
            return
        live = np.concatenate([c[1] for c in self.calls])
        rows = np.concatenate([c[2] if c[3] is None else c[2] * c[3] for c in self.calls])
        seconds = np.repeat([c[0] if not isinstance(c[0], tuple) else c[0][0].elapsed_time(c[0][1]) / 1000
                             for c in self.calls], [len(c[1]) for c in self.calls])
        served = rows > 0
        np.add.at(self.nfe, live[served], 1)
        np.add.at(self.rows, live[served], rows[served])
        np.add.at(self.model_s, live[served], seconds[served])


class RowSteps:
    """Iterations per batch row, and per verification its drafted and accepted counts: each
    iteration records only the live rows and their counts; the tallies per row (`tally`)
    come once, after the decode."""

    def __init__(self, size: int):
        self.size = size
        self.steps: list = []  # (live batch rows, widths or None, accepted or None)
        self.iterations = self.drafted = self.accepted = None  # per row, after `tally`
        self.accept_lengths: list[list[int]] = []

    def tally(self) -> None:
        """iterations, drafted and accepted per batch row; its accepted counts, in order."""
        empty = np.zeros(0, dtype=np.int64)
        self.iterations = _per_row(np.concatenate([s[0] for s in self.steps] or [empty]), None, self.size)
        verified = [s for s in self.steps if s[1] is not None]
        live, widths, accepted = (np.concatenate([s[k] for s in verified] or [empty]) for k in range(3))
        self.drafted, self.accepted = _per_row(live, widths, self.size), _per_row(live, accepted, self.size)
        ends = np.cumsum(np.bincount(live, minlength=self.size))[:-1]
        in_order = accepted[np.argsort(live, kind="stable")]  # each row's verifications, in order
        self.accept_lengths = [part.tolist() for part in np.split(in_order, ends)]


def _per_row(rows: np.ndarray, weights: np.ndarray | None, size: int) -> np.ndarray:
    """(size,) Σ weights (1 each if None) of the entries of each batch row in `rows`."""
    return np.bincount(rows, weights, minlength=size).astype(np.int64)


class Rows:
    """The rows of one batch decoding together: `live` (the batch rows still decoding, in
    the order of every network's cache), what each emitted (`out`, `count`) and counted.
    The bookkeeping is numpy on the host; the schedules see torch tensors over the live rows."""

    def __init__(self, config: DecodeConfig, tokenizer, generators: list[torch.Generator],
                 device: torch.device):
        size = len(generators)
        self.config, self.tokenizer, self.generators, self.device = config, tokenizer, generators, device
        self.live = np.arange(size)
        # room past max_new_tokens for a row's whole emit (`emit`): a draft of at most a
        # block and its bonus
        self.out = np.zeros((size, config.max_new_tokens + config.block + 1), dtype=np.int64)
        self.count = np.zeros(size, dtype=np.int64)
        self.steps = RowSteps(size)
        self.stop_reason: list[str | None] = [None] * size
        self.finished_s = [0.0] * size
        self.start = time.perf_counter()
        self.meter = RowMeters(size)
        self.eos = tokenizer.eos_token_id

    @property
    def done(self) -> bool:
        return self.live.size == 0

    def remaining(self) -> torch.Tensor:
        """(L,) tokens each live row may still emit."""
        return torch.from_numpy(self.config.max_new_tokens - self.count[self.live])

    def iterated(self) -> None:
        """Every live row has run one more iteration."""
        self.steps.steps.append((self.live, None, None))

    def verified(self, widths: torch.Tensor, accepted: torch.Tensor) -> None:
        """Every live row verified a draft of widths[i] tokens and accepted accepted[i]: one
        more iteration, counted."""
        self.steps.steps.append((self.live, widths.numpy(), accepted.numpy()))

    def call(self, network: Network, call: Call) -> torch.Tensor:
        """One forward of `network` over every live row (`call`); logits (L, Q, V)."""
        forward, commit = network.prepare(call)
        return self.timed(network, forward, call.real, call.ids.numel(), commit, call.served)

    def timed(self, network, forward, real: torch.Tensor, evaluated: int, commit,
              served: torch.Tensor | None = None) -> object:
        """Run `forward`, meter it on the rows it served (real > 0) and on `network` (its
        `evaluated` token rows), then `commit` apart from its time."""
        began = network.work.start(network.device)
        out = forward()
        interval = network.work.mark(network.device, began)
        self.meter.add(interval, self.live, real.numpy(), None if served is None else served.numpy())
        network.work.add(interval, evaluated)
        commit()
        return out

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        """One token per live row from the verifier's sampling distribution of logits (L, V)
        (sampling.sample), each row's noise from its own generator, as it draws alone."""
        c = self.config
        return sample(logits, c.temperature, c.top_k, c.top_p, lambda p: self.exponential(
            torch.ones(self.live.size, dtype=torch.long), 1, p.shape[-1], p.device)[:, 0])

    def exponential(self, counts: torch.Tensor, pad: int, width: int, device: torch.device) -> torch.Tensor:
        """Exp(1) noise (L, pad, width): live row i's first counts[i] rows drawn from its own
        generator, (counts[i], width) as it draws alone; the rest ones."""
        out = torch.ones(self.live.size, pad, width, device=device)
        for j, (i, n) in enumerate(zip(self.live.tolist(), counts.tolist())):
            if n:
                out[j, :n] = torch.empty(n, width, device=device).exponential_(generator=self.generators[i])
        return out

    def uniform(self, counts: torch.Tensor, pad: int, device: torch.device) -> torch.Tensor:
        """U(0, 1) draws (L, pad): live row i's first counts[i] from its own generator; the rest 0."""
        out = torch.zeros(self.live.size, pad, device=device)
        for j, (i, n) in enumerate(zip(self.live.tolist(), counts.tolist())):
            if n:
                out[j, :n] = torch.rand(n, generator=self.generators[i], device=device)
        return out

    def emit(self, tokens: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Append each live row's first counts[i] of tokens (L, W), cut after EOS and at
        max_new_tokens (and, under stop strings, at the fewest tokens whose text holds one);
        returns which rows are now done (L,) bool, their stop reasons recorded."""
        tokens, counts = tokens.cpu().numpy(), counts.cpu().numpy()
        live = self.live
        have = self.count[live]
        take = np.minimum(counts, self.config.max_new_tokens - have)  # tokens each row keeps
        ended = np.zeros(live.size, dtype=bool)
        if self.eos is not None:
            is_eos = tokens == self.eos
            if is_eos.any():
                is_eos &= np.arange(tokens.shape[1]) < take[:, None]
                ended = is_eos.any(1)
                take = np.where(ended, is_eos.argmax(1) + 1, take)  # nothing after the first EOS
        # every row's W tokens (W ≤ block + 1, the room `out` has past max_new_tokens), one
        # write: those past a row's count are never read (`output`) and its next tokens
        # overwrite them
        self.out[live[:, None], have[:, None] + np.arange(tokens.shape[1])] = tokens
        count = have + take
        self.count[live] = count
        done = ended | (count >= self.config.max_new_tokens)
        stopped = self._stop_strings(~done) if self.config.stop else np.zeros(0, dtype=bool)
        if stopped.size:
            done |= stopped
        if done.any():  # the reasons of the rows that leave: the first that holds, in this order
            for j in np.flatnonzero(done).tolist():
                stop = stopped.size and stopped[j]
                self.stop_reason[live[j]] = "eos" if ended[j] else "stop" if stop else "length"
        return torch.from_numpy(done)

    def _stop_strings(self, going: np.ndarray) -> np.ndarray:
        """Rows (L,) bool whose text now holds a stop string, cut at the fewest tokens that do."""
        found = np.zeros_like(going)
        for j, i in enumerate(self.live.tolist()):
            if going[j]:
                output = self.output(i)
                if output.cut_at_stop_string():
                    self.count[i] = len(output.ids)
                    found[j] = True
        return found

    def leave(self, done: torch.Tensor, networks: list) -> torch.Tensor | None:
        """Rows done (L,) bool leave the batch and every network's cache (the next call
        gathers the rows that stay into its own copy of the cache, slots.RowsLayer);
        returns the index (L',) of the rows that stay, in order, to take every per-row
        tensor of the schedule with (`staying`), or None when every row stays."""
        done = done.numpy()
        if not done.any():
            return None
        now = time.perf_counter() - self.start
        left = self.live[done].tolist()
        for i in left:
            self.finished_s[i] = now
        stay = np.flatnonzero(~done)
        index = torch.from_numpy(stay)
        for network in {id(n): n for n in networks}.values():  # each cache holds the live rows, in order
            network.slots.keep(stay, index)
        self.live = self.live[stay]
        return index

    def output(self, i: int) -> Output:
        output = Output(self.tokenizer, self.config.max_new_tokens, self.config.stop)
        output.ids, output.stop_reason = self.out[i, :self.count[i]].tolist(), self.stop_reason[i]
        return output


def staying(stay: torch.Tensor | None, *tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """Per-row tensors (L, ...) (or None) at the rows that stay (`Rows.leave`'s index; None:
    all of them, untouched: most iterations no row leaves)."""
    if stay is None:
        return tensors
    return tuple(None if t is None else t[stay.to(t.device)] for t in tensors)
