"""The KV slots of a batch of rows in one cache.

One `DynamicCache` holds every row of the batch, shape (rows, heads, L, dim) per layer,
and `valid` (rows, L), a host numpy array (each call updates it: numpy's small-array ops
cost a fraction of torch's), says which slots each row's later calls see. A call appends
the same number of slots S to every row it covers; a row keeps the first `keep` of its own
and the rest (padding to S, rows it drops such as drafting canvases, rejected drafts) are
masked out. Slot order never matters: every call passes explicit positions and an
additive mask, so a row's attention is a softmax over the set of its valid slots.

Masked slots cost attention work, so they are reclaimed: slots invalid for every row are
trimmed from the end (a view, no copy: with one row this is exactly `DynamicCache.crop`),
and when more than `slack` of the cache is masked the valid slots of each row are gathered
to the front (one copy of the cache).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import DynamicCache

# Masked share of the cache that triggers compaction, unless a batch says otherwise
# (`specsweep bench batch` measures 0, this and 1: never compact).
SLACK = 0.5


class SlotCache:
    """KV slots of the rows of one batch on one network; `rows` are the batch rows held,
    in the order of the cache's first dimension."""

    def __init__(self, rows: int, slack: float | None = None):
        self.cache = DynamicCache()
        self.rows = list(range(rows))
        self.valid = np.zeros((rows, 0), dtype=bool)  # on the host: building masks never syncs
        self.held = np.zeros(rows, dtype=np.int64)  # valid slots of each row held, in cache order
        self.slack = SLACK if slack is None else slack

    def length(self, row: int) -> int:
        return int(self.held[self.rows.index(row)])

    def positions(self, offsets: np.ndarray) -> torch.Tensor:
        """(len(rows), n) positions of n new rows of each row held: its valid slots (where
        its next token's position starts) + offsets (n,) or (len(rows), n)."""
        return torch.from_numpy(self.held[:, None] + offsets)

    def view(self, rows: list[int]) -> tuple[DynamicCache, np.ndarray]:
        """The cache and valid slots (len(rows), L) of `rows`; a copy unless they are every row held."""
        if rows == self.rows:
            return self.cache, self.valid
        index = self._index(rows)
        if not self.cache.layers:
            return DynamicCache(), self.valid[index.numpy()]
        sub = DynamicCache()
        device_index = index.to(self.cache.layers[0].keys.device)
        for i, layer in enumerate(self.cache.layers):
            sub.update(layer.keys[device_index], layer.values[device_index], i)
        return sub, self.valid[index.numpy()]

    def commit(self, rows: list[int], cache: DynamicCache, kept: np.ndarray) -> None:
        """Record a call over `rows` that appended S slots to `cache` (from `view`); row r
        keeps the first kept[r] (len(rows),) of its new slots (every call's layout puts the
        rows it caches first)."""
        if cache is not self.cache:
            self._merge(rows, cache, cache.layers[0].keys.shape[2] - self.valid.shape[1])
        if rows == self.rows:
            self.keep_first(kept)
            return
        index = self._index(rows).numpy()
        counts = np.zeros(len(self.rows), dtype=np.int64)
        counts[index] = kept
        self.keep_first(counts)

    def keep_first(self, counts: np.ndarray) -> None:
        """Record the call just made over every row held, whose new slots each row keeps the
        first counts[i] of (for a verification, its last token and accepted drafts: known
        only after the call)."""
        self.held += counts
        self._append(np.arange(int(counts.max()) if counts.size else 0) < counts[:, None])

    def _append(self, new: np.ndarray) -> None:
        """The new slots' columns up to the last some row keeps: the last column held a
        valid slot before this call (`_tidy`), so the slots past them are all that is
        trimmed, with no scan of the whole cache."""
        self.valid = np.concatenate([self.valid, new], axis=1)
        if self.cache.layers and self.valid.shape[1] < self.cache.layers[0].keys.shape[2]:
            self._slice(self.valid.shape[1])
        self._compact_if_sparse()

    def crop(self, row: int, n: int) -> None:
        """Mask out the last n valid slots of `row` (rejected drafts)."""
        if n <= 0:
            return
        i = self.rows.index(row)
        from_end = self.valid[i, ::-1].cumsum()[::-1]  # valid slots at or after each slot
        self.valid[i] &= from_end > n
        self.held[i] -= n
        self._tidy()

    def release(self, row: int) -> None:
        """Drop `row` from the cache: it has left the batch."""
        self.drop([row])

    def remove(self, rows: list[int]) -> None:
        """Drop `rows` from the cache by moving the last rows held into their places
        (`swap_remove`): a copy of as many rows as leave, not of the whole cache. The order
        of the rows held changes as `swap_remove` says."""
        order = swap_remove(len(self.rows), [self.rows.index(r) for r in rows])
        holes = [i for i, j in enumerate(order) if i != j]
        if holes:
            moved = [order[i] for i in holes]
            # row by row (once in a row's life): a plain copy of one row costs a fraction of
            # an indexed copy of several
            for layer in self.cache.layers:
                for hole, mover in zip(holes, moved):
                    layer.keys[hole].copy_(layer.keys[mover])
                    layer.values[hole].copy_(layer.values[mover])
            self.valid[holes] = self.valid[moved]
        end = len(order)
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[:end], layer.values[:end]
        self.valid, self.rows, self.held = self.valid[:end], [self.rows[i] for i in order], self.held[order]
        self._tidy()

    def drop(self, rows: list[int]) -> None:
        """Drop `rows` from the cache: they have left the batch."""
        keep = [r for r in self.rows if r not in rows]
        if len(keep) == len(self.rows):
            return
        index = self._index(keep)
        if self.cache.layers:
            device_index = index.to(self.cache.layers[0].keys.device)
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[device_index], layer.values[device_index]
        self.valid, self.rows, self.held = self.valid[index.numpy()], keep, self.held[index.numpy()]
        self._tidy()

    def _index(self, rows: list[int]) -> torch.Tensor:
        return torch.tensor([self.rows.index(r) for r in rows], dtype=torch.long)

    def _merge(self, rows: list[int], sub: DynamicCache, s: int) -> None:
        """Write the S new slots of a call over some rows into the whole cache."""
        index = self._index(rows)
        if not self.cache.layers:  # the first call: the other rows' slots are padding
            for i, layer in enumerate(sub.layers):
                keys = layer.keys.new_zeros((len(self.rows),) + layer.keys.shape[1:])
                values = layer.values.new_zeros((len(self.rows),) + layer.values.shape[1:])
                self.cache.update(keys, values, i)
        device_index = index.to(self.cache.layers[0].keys.device)
        for layer, new in zip(self.cache.layers, sub.layers):
            for name in ("keys", "values"):
                whole, part = getattr(layer, name), getattr(new, name)
                if whole.shape[2] < part.shape[2]:
                    grow = part.shape[2] - whole.shape[2]
                    whole = torch.cat([whole, whole.new_zeros(whole.shape[:2] + (grow,) + whole.shape[3:])],
                                      dim=2)
                whole[device_index, :, -s:] = part[:, :, -s:]
                setattr(layer, name, whole)

    def _tidy(self) -> None:
        """Trim slots no row sees from the end; compact when too much is masked."""
        if self.valid.shape[1] and not self.valid[:, -1].any():
            seen = np.flatnonzero(self.valid.any(0))
            self._slice(int(seen[-1]) + 1 if seen.size else 0)
        self._compact_if_sparse()

    def _compact_if_sparse(self) -> None:
        held = int(self.held.sum())  # = valid.sum(): `held` counts each row's valid slots
        if self.valid.size and 1 - held / self.valid.size > self.slack:
            self._compact()

    def _slice(self, end: int) -> None:
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[:, :, :end], layer.values[:, :, :end]
        self.valid = self.valid[:, :end]

    def _compact(self) -> None:
        """Gather each row's valid slots to the front, in order."""
        counts = self.valid.sum(1)
        width = int(counts.max())
        order = torch.from_numpy(np.argsort(~self.valid, axis=1, kind="stable")[:, :width])
        for layer in self.cache.layers:
            index = order.to(layer.keys.device)[:, None, :, None]
            layer.keys = layer.keys.gather(2, index.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3]))
            layer.values = layer.values.gather(
                2, index.expand(-1, layer.values.shape[1], -1, layer.values.shape[3]))
        self.valid = np.arange(width)[None] < counts[:, None]


def swap_remove(size: int, removed: list[int]) -> list[int]:
    """The positions, in the old order, of the rows that stay when the rows at `removed` leave
    a sequence of `size`: each hole below the new end takes the last staying row beyond it."""
    gone = set(removed)
    end = size - len(gone)
    movers = [i for i in range(end, size) if i not in gone]
    order = list(range(end))
    for hole, mover in zip(sorted(i for i in gone if i < end), movers):
        order[hole] = mover
    return order
