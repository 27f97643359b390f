"""The batch as the unit of work: each iteration of a schedule runs over all live rows at once,
as tensors, with no thread and no Python loop over rows in its path.

Rows stay ragged: each has its own cache slots and positions (slots.SlotCache, one cache for
the batch), its own emitted tokens and counts, and its own stop; a row that stops leaves the
batch (its slots are dropped) and the others go on. `Rows` holds what the live rows emitted
and counted; a schedule's loop asks it to sample, to emit and to run a network's forward over
every live row (`call`). The loops are lockstep_schedules.py (`ar`, `diffusion`, `linear`,
`packed`) and lockstep_selfspec.py (self `packed`, `quadratic`), over lockstep_drafting.py and
lockstep_verifying.py, as schedules.py and selfspec.py are over drafting.py and verifying.py.

Randomness stays per row: a row draws from its own generator exactly what it draws decoding
alone (the same count, in the same order), and the draws of the live rows are stacked into
one tensor, so a sampled row's tokens do not depend on its batch-mates. The only per-row
host work of an iteration is that draw at sampling settings (greedy draws nothing) and, under
stop strings, reading each row's text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from workloads.decoding.calls import Network
from workloads.decoding.config import DecodeConfig
from workloads.decoding.output import Output
from workloads.decoding.sampling import sample
from workloads.decoding.slots import swap_remove


class RowMeters:
    """Model work per batch row: each forward counted on every row it served, with the row's
    own token rows and the call's time (CPU seconds, or CUDA events read after the decode's
    final synchronization, as calls.Meter). Host-side numpy: a handful of rows costs
    microseconds."""

    def __init__(self, size: int):
        self.nfe = np.zeros(size, dtype=np.int64)
        self.rows = np.zeros(size, dtype=np.int64)
        self.cpu_s = np.zeros(size)
        self.events: list = []  # (begin, end, batch rows served)

    def add(self, interval, served: np.ndarray, rows: np.ndarray) -> None:
        self.nfe[served] += 1
        self.rows[served] += rows
        if isinstance(interval, tuple):
            self.events.append((*interval, served))
        else:
            self.cpu_s[served] += interval

    def model_s(self) -> list[float]:
        total = self.cpu_s.copy()
        for begin, end, served in self.events:
            total[served] += begin.elapsed_time(end) / 1000
        return total.tolist()


class Rows:
    """The rows of one batch decoding in lockstep: `live` (the batch rows still decoding, in
    the order of every network's cache), what each emitted (`out`, `count`) and counted.
    The bookkeeping is numpy on the host; the schedules see torch tensors over the live rows."""

    def __init__(self, config: DecodeConfig, tokenizer, generators: list[torch.Generator],
                 device: torch.device):
        size = len(generators)
        self.config, self.tokenizer, self.generators, self.device = config, tokenizer, generators, device
        self.live = np.arange(size)
        self.out = np.zeros((size, config.max_new_tokens), dtype=np.int64)
        self.count = np.zeros(size, dtype=np.int64)
        self.iterations = np.zeros(size, dtype=np.int64)
        self.drafted = np.zeros(size, dtype=np.int64)
        self.accepted = np.zeros(size, dtype=np.int64)
        self.accept_lengths = np.zeros((size, config.max_new_tokens), dtype=np.int64)  # by iteration
        self.stop_reason: list[str | None] = [None] * size
        self.finished_s = [0.0] * size
        self.start = time.perf_counter()
        self.meter = RowMeters(size)
        self.eos = tokenizer.eos_token_id
        self._all = torch.arange(size)  # `leave`'s index when every row stays

    @property
    def done(self) -> bool:
        return self.live.size == 0

    def remaining(self) -> torch.Tensor:
        """(L,) tokens each live row may still emit."""
        return torch.from_numpy(self.config.max_new_tokens - self.count[self.live])

    def iterated(self) -> None:
        """Every live row has run one more iteration."""
        self.iterations[self.live] += 1

    def verified(self, widths: torch.Tensor, accepted: torch.Tensor) -> None:
        """Every live row verified a draft of widths[i] tokens and accepted accepted[i]: one
        more iteration, counted."""
        live, accepted = self.live, accepted.numpy()
        self.accept_lengths[live, self.iterations[live]] = accepted
        self.iterations[live] += 1
        self.drafted[live] += widths.numpy()
        self.accepted[live] += accepted

    def call(self, network: Network, ids: torch.Tensor, positions: torch.Tensor, among: torch.Tensor | None,
             kept: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """One forward of `network` over every live row: ids, positions (L, Q), among (L, Q, Q)
        or None (causal), kept (L, Q); real (L,): each row's own rows of the Q (the rest is
        padding; a row with none is not counted as served). Returns logits (L, Q, V)."""
        forward, commit = network.prepare(network.slots.rows, ids, positions, among, kept)
        return self.timed(network, forward, real, ids.numel(), commit)

    def timed(self, network, forward, real: torch.Tensor, evaluated: int, commit) -> object:
        """Run `forward`, meter it on the rows it served (real > 0) and on `network` (its
        `evaluated` token rows), then `commit` apart from its time."""
        began = network.work.start(network.device)
        out = forward()
        interval = network.work.mark(network.device, began)
        real = real.numpy()
        if real.all():
            self.meter.add(interval, self.live, real)
        else:
            served = real > 0
            self.meter.add(interval, self.live[served], real[served])
        network.work.add(interval, evaluated)
        commit()
        return out

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        """One token per live row from the verifier's sampling distribution of logits (L, V)
        (sampling.sample), each row's noise from its own generator, as it draws alone."""
        c = self.config
        one = torch.ones(self.live.size, dtype=torch.long)
        return sample(logits, c.temperature, c.top_k, c.top_p,
                      lambda p: self.exponential(one, 1, p.shape[-1], p.device)[:, 0])

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
        live, width = self.live, tokens.shape[1]
        at = np.arange(width)
        have = self.count[live]
        take = (at < counts[:, None]) & (at < (self.config.max_new_tokens - have)[:, None])
        ended = np.zeros(live.size, dtype=bool)
        if self.eos is not None:
            is_eos = take & (tokens == self.eos)
            take &= np.cumsum(is_eos, 1) - is_eos == 0  # nothing after the first EOS
            ended = is_eos.any(1)
        rows, columns = np.nonzero(take)
        self.out[live[rows], have[rows] + columns] = tokens[rows, columns]
        self.count[live] = have + take.sum(1)
        full = self.count[live] >= self.config.max_new_tokens
        stopped = self._stop_strings(~(ended | full)) if self.config.stop else np.zeros_like(ended)
        done = ended | full | stopped
        if done.any():  # the reasons of the rows that leave: the first that holds, in this order
            reasons = np.where(ended, "eos", np.where(stopped, "stop", "length"))
            for i, reason in zip(live[done], reasons[done]):
                self.stop_reason[i] = str(reason)
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

    def leave(self, done: torch.Tensor, networks: list) -> torch.Tensor:
        """Rows done (L,) bool leave the batch and every network's cache, where the last rows
        take their places (slots.swap_remove: a copy of the rows that move, not of the
        cache); returns the index (L',) of the rows that stay, in their new order, to take
        every per-row tensor of the schedule with."""
        done = done.numpy()
        if not done.any():
            return self._all
        now = time.perf_counter() - self.start
        left = self.live[done].tolist()
        for i in left:
            self.finished_s[i] = now
        for network in {id(n): n for n in networks}.values():
            network.slots.remove(left)
        order = swap_remove(self.live.size, np.nonzero(done)[0].tolist())
        self.live = self.live[order]
        self._all = torch.arange(self.live.size)
        return torch.tensor(order, dtype=torch.long)

    def output(self, i: int) -> Output:
        output = Output(self.tokenizer, self.config.max_new_tokens, self.config.stop)
        output.ids, output.stop_reason = self.out[i, :self.count[i]].tolist(), self.stop_reason[i]
        return output


_LAYOUTS: dict[tuple, Layout] = {}


@dataclass(frozen=True)
class Layout:
    """The rows of one call for every live row, left-aligned and padded to Q: a causal prefix
    of `prefix` (L,) rows (kept in the cache), then a region of `region` (L,) rows that sees
    the prefix and, bidirectionally or causally, itself (kept or dropped). Padding rows see
    themselves only and are never kept."""

    among: torch.Tensor  # (L, Q, Q) bool
    kept: torch.Tensor  # (L, Q) bool
    real: torch.Tensor  # (L,) rows each row evaluates
    starts: torch.Tensor  # (L,) the region's first column

    @classmethod
    def of(cls, prefix: torch.Tensor, region: torch.Tensor, width: int, bidirectional: bool,
           keep_region: bool) -> Layout:
        """The layout, built once per shape: an iteration's calls repeat a few of them."""
        key = (tuple(prefix.tolist()), tuple(region.tolist()), width, bidirectional, keep_region)
        found = _LAYOUTS.get(key)
        if found is None:
            if len(_LAYOUTS) >= 4096:
                _LAYOUTS.clear()
            found = _LAYOUTS[key] = cls._build(prefix, region, width, bidirectional, keep_region)
        return found

    @classmethod
    def _build(cls, prefix: torch.Tensor, region: torch.Tensor, width: int, bidirectional: bool,
               keep_region: bool) -> Layout:
        column = torch.arange(width)
        real = prefix + region
        present = column < real[:, None]  # (L, Q)
        in_region = present & (column >= prefix[:, None])
        sees = column[None, :] <= column[:, None]  # causal (Q, Q)
        if bidirectional:
            sees = sees | (in_region[:, :, None] & in_region[:, None, :])
        among = (present[:, :, None] & present[:, None, :] & sees) | torch.eye(width, dtype=torch.bool)
        kept = present & ~in_region if not keep_region else present
        return cls(among, kept, real, prefix)

    def region_rows(self, values: torch.Tensor, rows: int) -> torch.Tensor:
        """values (L, Q, ...) at each row's region columns start .. start + rows − 1 (clamped
        into Q past a short region's end): (L, rows, ...)."""
        first = int(self.starts.min())
        if first == int(self.starts.max()) and first + rows <= values.shape[1]:  # one start: a view
            return values[:, first:first + rows]
        index = (self.starts[:, None] + torch.arange(rows)).clamp(max=values.shape[1] - 1).to(values.device)
        return values.gather(1, index.view(*index.shape, *[1] * (values.dim() - 2)).expand(
            -1, -1, *values.shape[2:]))
