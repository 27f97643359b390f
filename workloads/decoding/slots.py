"""The KV slots of a batch of rows in one cache.

One cache holds every row of the batch, shape (rows, heads, L, dim) per layer,
and `valid` (rows, L), a host numpy array (each call updates it: numpy's small-array ops
cost a fraction of torch's), says which slots each row's later calls see. A call appends
the same number of slots S to every row it covers; a row keeps the first `keep` of its own
and the rest (padding to S, rows it drops such as drafting canvases, rejected drafts) are
masked out. Slot order never matters: every call passes explicit positions and an
additive mask, so a row's attention is a softmax over the set of its valid slots.

Masked slots cost attention work, so they are reclaimed: slots invalid for every row are
trimmed from the end (a view, no copy: with one row this is exactly `DynamicCache.crop`),
and when more than `slack` of the cache is masked the valid slots of each row are gathered
to the front (one copy of the cache). Rows that leave cost no copy of their own: the rows
that stay are gathered by the next call's own copy of the cache (`RowsLayer`).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicLayer

# Masked share of the cache that triggers compaction, unless a batch says otherwise
# (`specsweep bench batch` measures 0, this and 1: never compact).
SLACK = 0.5


class RowsLayer(DynamicLayer):
    """A DynamicLayer whose rows are selected lazily: `select` records which rows stay, in
    which order, and the next `update` gathers them into the copy of the cache it makes
    anyway (a DynamicLayer concatenates its whole cache each call), so rows leaving a
    batch cost no copy of their own. Reading `keys` or `values` before then gathers them."""

    def __init__(self):
        self.index: torch.Tensor | None = None  # the rows to gather, pending
        super().__init__()

    keys = property(lambda self: self._held("_keys"), lambda self, value: setattr(self, "_keys", value))
    values = property(lambda self: self._held("_values"), lambda self, value: setattr(self, "_values", value))

    def _held(self, name: str) -> torch.Tensor:
        """Keys or values with any pending selection applied."""
        self._gather()
        return getattr(self, name)

    def get_seq_length(self) -> int:
        return self._keys.shape[-2] if self.is_initialized and self._keys.numel() else 0

    def select(self, index: torch.Tensor) -> None:
        """Keep the rows at `index` (on the cache's device), in that order."""
        self.index = index if self.index is None else self.index[index]

    def trim(self, end: int) -> None:
        """Hold the first `end` slots (a view; any pending selection still applies)."""
        self._keys, self._values = self._keys[:, :, :end], self._values[:, :, :end]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.index is None:
            return super().update(key_states, value_states, *args, **kwargs)
        index, self.index = self.index, None
        self._keys = _joined(self._keys, index, key_states)
        self._values = _joined(self._values, index, value_states)
        return self._keys, self._values

    def _gather(self) -> None:
        if self.index is not None:
            index, self.index = self.index, None
            self._keys, self._values = self._keys[index], self._values[index]


def _joined(cached: torch.Tensor, index: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """cached's rows at index, then new along the slots: torch.cat([cached[index], new], 2)
    in one copy of the cache."""
    held = cached.shape[2]
    out = cached.new_empty((index.shape[0], cached.shape[1], held + new.shape[2], cached.shape[3]))
    torch.index_select(cached, 0, index, out=out[:, :, :held])
    out[:, :, held:] = new
    return out


def _cache() -> Cache:
    return Cache(layer_class_to_replicate=RowsLayer)


class SlotCache:
    """KV slots of the rows of one batch on one network; `rows` are the batch rows held,
    in the order of the cache's first dimension."""

    def __init__(self, rows: int, slack: float | None = None):
        self.cache = _cache()
        self.rows = list(range(rows))
        self.valid = np.zeros((rows, 0), dtype=bool)  # on the host: building masks never syncs
        self.held = np.zeros(rows, dtype=np.int64)  # valid slots of each row held, in cache order
        self.slack = SLACK if slack is None else slack

    def length(self, row: int) -> int:
        return int(self.held[self.rows.index(row)])

    def positions(self, offsets: np.ndarray | int) -> torch.Tensor:
        """(len(rows), n) positions of n new rows of each row held: its valid slots (where
        its next token's position starts) + offsets (n,) or (len(rows), n), or an int for
        one new row each."""
        return torch.from_numpy(self.held[:, None] + offsets)

    def view(self) -> tuple[Cache, np.ndarray]:
        """The cache and the valid slots (len(rows), S) of every row held."""
        return self.cache, self.valid

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

    def keep(self, stay: np.ndarray, index: torch.Tensor) -> None:
        """Keep the rows held at positions `stay` (also as `index`, on the host), in order:
        the others have left the batch. Their keys and values are gathered by the next call
        (`RowsLayer`)."""
        if self.cache.layers:
            index = index.to(self.cache.layers[0].device)
            for layer in self.cache.layers:
                layer.select(index)
        self.valid, self.held = self.valid[stay], self.held[stay]
        self.rows = [self.rows[i] for i in stay.tolist()]
        self._tidy()

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
            layer.trim(end)
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
