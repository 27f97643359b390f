"""Model calls over a KV cache that holds the verified prefix minus its last token.

Keeping the last verified token out of the cache means every call starts with it, so a
verifier call over [last, y_1 .. y_B] returns the B + 1 distributions p_1 .. p_{B+1}, and a
drafting call over [last, canvas] sees exactly the verified prefix. Rows that are not part
of the verified prefix (rejected drafts, drafting rows) are cropped after the call.

A `CachedModel` is one row's view of a `Network`: the rows of a batch (`batch.py`) queue
their calls on it, and it runs them as one padded forward over the batch's `SlotCache`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch
from transformers import PreTrainedModel

from workloads.decoding.batch import Batch, Call
from workloads.decoding.masks import after_slots, causal
from workloads.decoding.slots import SlotCache

T = TypeVar("T")


@dataclass
class Meter:
    """Model work of one decode: calls, token rows evaluated and device time.

    On a CPU a call is timed by the wall clock around it. On a GPU each call records a pair
    of CUDA events on its stream and nothing waits for them until `model_s` is read after
    the decode's final synchronization, so timing adds no host syncs to the accept loop.
    Calls overlapped on two streams (two-model packed) are each counted in full. In a batch
    each row's meter counts every call it took part in, its own rows and the call's time.
    """

    nfe: int = 0
    rows: int = 0
    cpu_s: float = 0.0
    events: list = field(default_factory=list)

    def start(self, device: torch.device):
        if device.type == "cuda":
            begin = torch.cuda.Event(enable_timing=True)
            begin.record()
            return begin
        return time.perf_counter()

    def mark(self, device: torch.device, began):
        """The interval of a call that began at `began`: a CUDA event pair, or seconds."""
        if device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            return began, end
        return time.perf_counter() - began

    def add(self, interval, rows: int) -> None:
        """Count one call of `rows` token rows that took `interval` (from `mark`)."""
        if isinstance(interval, tuple):
            self.events.append(interval)
        else:
            self.cpu_s += interval
        self.nfe += 1
        self.rows += rows

    @property
    def model_s(self) -> float:
        return self.cpu_s + sum(a.elapsed_time(b) for a, b in self.events) / 1000


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_SIDE: dict[torch.device, torch.cuda.Stream] = {}


@contextmanager
def side_stream(device: torch.device):
    """On a GPU, run the block on a second CUDA stream that starts after the work queued so
    far and that the current stream waits for afterwards; elsewhere, run it in place. Host
    syncs inside the block (a drafting step's `.item()`) wait only for the side stream."""
    if device.type != "cuda":
        yield
        return
    main = torch.cuda.current_stream(device)
    side = _SIDE.setdefault(device, torch.cuda.Stream(device))
    side.wait_stream(main)
    with torch.cuda.stream(side):
        yield
    main.wait_stream(side)


@dataclass
class Rows:
    """What one row asks of a network: `ids` (q,) at `positions` (q,), seeing the row's
    cache and `visible` (q, q) among themselves; the first `keep` stay cached."""

    ids: torch.Tensor
    positions: torch.Tensor
    visible: torch.Tensor
    keep: int
    meter: Meter


class Network:
    """A transformers causal LM serving the rows of one batch, with their KV slots."""

    def __init__(self, model: PreTrainedModel, batch: Batch, prefix_cache: bool = True,
                 own_attention: bool = False):
        self.model, self.batch = model, batch
        self.prefix_cache = prefix_cache  # False: full-attention drafting, nothing cached
        self.own_attention = own_attention  # without a cache: input ids only (profiles.py)
        self.slots = SlotCache(batch.size, batch.slack)
        self.device = model.device
        self.dtype = model.dtype
        self.tap = None  # a FeatureTap on this network: each row's features of its latest call
        self.features: dict[int, torch.Tensor] = {}
        self.work = Meter()  # its forward passes, their token rows (padding included) and time

    def run(self, calls: list[Call]) -> list[torch.Tensor]:
        """One forward over the rows of `calls`, padded to the longest: (R, Q) ids and
        positions, an additive mask (R, 1, Q, L + Q) over each row's valid slots and its own
        new rows. Returns each row's logits (q_r, V)."""
        requests: list[Rows] = [c.request for c in calls]
        rows = [c.row for c in calls]
        if self.own_attention:  # the model's own attention cannot take padding: row by row
            return [timed(self, [r], lambda r=r: self.model(input_ids=r.ids.view(1, -1).to(self.device))
                          .logits, r.ids.shape[0])[0] for r in requests]
        ids, positions, among, kept = _padded(requests)
        forward, commit = self.prepare(rows, ids, positions, among, kept)
        logits = timed(self, requests, forward, ids.shape[1])
        commit()
        if self.tap is not None:
            features = self.tap.features
            for i, r in enumerate(requests):
                self.features[rows[i]] = features[i, :r.ids.shape[0]]
        return [logits[i, :r.ids.shape[0]] for i, r in enumerate(requests)]

    def prepare(self, rows: list[int], ids: torch.Tensor, positions: torch.Tensor, among: torch.Tensor | None,
                kept: np.ndarray | None) -> tuple[Callable[[], torch.Tensor], Callable[[], None]]:
        """The forward over `rows` (ids and positions (R, Q); among (R, Q, Q) bool, None:
        causal) returning logits (R, Q, V), and the commit to run after it, apart from the
        forward's time, of the first kept[r] (R,) new slots of each row (kept None: the
        caller records them once it knows, SlotCache.keep_first)."""
        width = ids.shape[1]
        if self.prefix_cache:
            cache, valid = self.slots.view(rows)
        else:
            cache, valid = None, np.zeros((len(rows), 0), dtype=bool)
        if width == 1 and valid.all() and (among is None or bool(among.all())):
            mask = None  # one row a call that sees every slot: nothing to mask
        else:
            among = _causal(width) if among is None else among.numpy()
            mask = after_slots(valid, among, self.dtype).to(self.device, self.dtype)
        inputs = dict(input_ids=ids.to(self.device), position_ids=positions.to(self.device),
                      attention_mask=mask)
        if cache is not None:
            inputs.update(cache=cache, use_cache=True)

        def commit() -> None:
            if cache is not None and kept is not None:
                self.slots.commit(rows, cache, kept)
        return lambda: self.model(**inputs).logits, commit

    def release(self, row: int) -> None:
        self.slots.release(row)

    def close(self) -> None:
        """Remove the feature tap's hooks from the model, which outlives the batch."""
        if self.tap is not None:
            self.tap.close()


@functools.lru_cache(maxsize=64)
def _causal(width: int) -> np.ndarray:
    """masks.causal, built once per width for the calls that only read it."""
    return causal(width).numpy()


def timed(network, requests: list, forward: Callable[[], T], width: int) -> T:
    """Run `forward` over the requests padded to `width` rows each, counting it on each
    request's meter (its own rows, the call's time) and on the network's (`work`: its rows,
    padding included)."""
    began = requests[0].meter.start(network.device)
    out = forward()
    interval = requests[0].meter.mark(network.device, began)
    for r in requests:
        r.meter.add(interval, r.ids.shape[0])
    network.work.add(interval, len(requests) * width)
    return out


def _padded(requests: list[Rows]) -> tuple[torch.Tensor, ...]:
    """The requests padded to the longest, q: ids and positions (R, Q), visible (R, Q, Q)
    (a padding row sees itself) and kept (R,), the rows each request keeps."""
    if len(requests) == 1:  # nothing to pad: batch-1 decoding pays no copies
        r = requests[0]
        return r.ids.cpu().long()[None], r.positions.cpu().long()[None], r.visible[None], np.array([r.keep])
    width = max(r.ids.shape[0] for r in requests)
    ids = torch.zeros(len(requests), width, dtype=torch.long)
    positions = torch.zeros(len(requests), width, dtype=torch.long)
    among = torch.eye(width, dtype=torch.bool).repeat(len(requests), 1, 1)
    for i, r in enumerate(requests):
        q = r.ids.shape[0]
        ids[i, :q], positions[i, :q] = r.ids.cpu(), r.positions.cpu()
        among[i, :q, :q] = r.visible
    return ids, positions, among, np.array([r.keep for r in requests])


class CachedModel:
    """One row's view of a `Network`; `length` tokens of the row are cached. Built from a
    model alone, it is the only row of its own batch."""

    def __init__(self, model: PreTrainedModel, meter: Meter, prefix_cache: bool = True,
                 own_attention: bool = False, *, network: Network | None = None, row: int = 0):
        self.network = network or Network(model, Batch(1), prefix_cache, own_attention)
        self.model, self.meter, self.row = model, meter, row
        self.prefix_cache = self.network.prefix_cache
        self.history: list[int] = []  # the verified tokens seen, when nothing is cached
        self.device = self.network.device
        self.dtype = self.network.dtype

    @property
    def length(self) -> int:
        return self.network.slots.length(self.row)

    @property
    def features(self) -> torch.Tensor:
        """The tapped features (q, F) of this row's latest call."""
        return self.network.features[self.row]

    def call(self, ids: list[int] | torch.Tensor, visible: torch.Tensor | None, positions: torch.Tensor,
             keep: int) -> torch.Tensor:
        """Evaluate rows `ids` at `positions` (visible: (q, q) bool among rows, None =
        causal); every row sees the whole cache. Keeps the first `keep` rows in the cache.
        Returns logits (q, V)."""
        ids = torch.as_tensor(ids).view(-1)
        q = ids.shape[0]
        visible = causal(q) if visible is None else visible.cpu()
        request = Rows(ids, torch.as_tensor(positions).view(-1), visible, keep if self.prefix_cache else 0,
                       self.meter)
        return self.network.batch.call(self.network, self.row, request)

    def causal(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        """Causal rows appended to the cache: logits (q, V), row i predicting token i + 1."""
        n = len(ids)
        return self.call(ids, None, torch.arange(self.length, self.length + n), keep=n)

    def block(self, pending: list[int], last: int, canvas: torch.Tensor) -> torch.Tensor:
        """One drafting call: `pending` verified tokens as causal rows (kept in the cache),
        then rows [last, canvas] that see the cache, the pending rows and each other
        (dropped afterwards). Returns the logits of the W + 1 block rows (W + 1, V). Without a
        prefix cache (full attention) the whole verified sequence is evaluated with the block,
        all rows seeing each other, and nothing is kept."""
        if not self.prefix_cache:  # every row sees every other: recompute the whole sequence
            self.history += pending
            n, w = len(self.history), canvas.shape[0]
            ids = torch.cat([torch.tensor(self.history + [last], dtype=torch.long), canvas.cpu()])
            visible = torch.ones(n + w + 1, n + w + 1, dtype=torch.bool)
            return self.call(ids, visible, torch.arange(n + w + 1), keep=0)[n:]
        n, q = len(pending), len(pending) + 1 + canvas.shape[0]
        visible = causal(q)
        visible[n:, n:] = True  # block rows see each other
        ids = torch.cat([torch.tensor(pending + [last], dtype=torch.long), canvas.cpu()])
        return self.call(ids, visible, torch.arange(self.length, self.length + q), keep=n)[n:]

    def crop(self, n: int) -> None:
        """Drop the last n cached tokens (rejected draft rows)."""
        if n > 0:
            with self.network.batch.lock:
                self.network.slots.crop(self.row, n)
