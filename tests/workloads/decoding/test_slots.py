"""The slot cache of a batch: masked slots stay out of every row's view, compaction keeps each
row's valid slots in order, rows that leave are gathered out by the next call."""

import numpy as np
import torch
from transformers.cache_utils import Cache

from workloads.decoding.slots import SlotCache


def call(slots: SlotCache, keys: torch.Tensor, kept: list[int] | None) -> None:
    """Append S new slots (keys: (rows held, S)) as a model call would; row i keeps its first
    kept[i] (None: recorded after, `keep_first`)."""
    cache, _ = slots.view()
    new = keys[:, None, :, None].float()
    cache.update(new, new, 0)
    if kept is not None:
        slots.keep_first(np.array(kept))


def seen(slots: SlotCache, row: int) -> list[int]:
    i = slots.rows.index(row)
    return slots.cache.layers[0].keys[i, 0, :, 0][slots.valid[i]].long().tolist()


def test_each_row_sees_only_the_slots_it_kept():
    slots = SlotCache(3)
    call(slots, torch.tensor([[1, 2, 3], [11, 12, 13], [21, 22, 23]]), [3, 2, 1])
    assert [seen(slots, r) for r in range(3)] == [[1, 2, 3], [11, 12], [21]]
    assert [slots.length(r) for r in range(3)] == [3, 2, 1]


def test_a_verification_keeps_what_it_accepted_after_the_call():
    slots = SlotCache(2)
    call(slots, torch.tensor([[1, 2], [11, 12]]), [2, 2])
    call(slots, torch.tensor([[3, 4, 5], [13, 14, 15]]), None)
    slots.keep_first(np.array([1, 3]))  # row 0 rejected two drafts
    assert [seen(slots, r) for r in range(2)] == [[1, 2, 3], [11, 12, 13, 14, 15]]


def test_a_sparse_cache_is_compacted_in_order():
    slots = SlotCache(2, slack=0.3)
    call(slots, torch.tensor([[1, 2, 3, 4], [11, 12, 13, 14]]), [1, 4])
    call(slots, torch.tensor([[5, 6, 7, 8], [15, 16, 17, 18]]), [1, 0])
    assert slots.valid.shape[1] == 4  # over 30% was masked: gathered to the front
    assert [seen(slots, r) for r in range(2)] == [[1, 5], [11, 12, 13, 14]]


def test_one_row_is_always_exactly_its_prefix():
    slots = SlotCache(1)
    call(slots, torch.tensor([[1, 2, 3, 4]]), [2])
    assert isinstance(slots.cache, Cache) and slots.valid.shape[1] == 2 and seen(slots, 0) == [1, 2]


def test_rows_that_leave_are_gathered_out_by_the_next_call():
    slots = SlotCache(4)
    call(slots, torch.tensor([[1, 2], [11, 12], [21, 22], [31, 32]]), [2, 1, 2, 2])
    stay = np.array([1, 3])
    slots.keep(stay, torch.from_numpy(stay))
    assert slots.rows == [1, 3] and slots.held.tolist() == [1, 2]
    layer = slots.cache.layers[0]
    assert layer.index is not None and layer._keys.shape[0] == 4  # nothing copied yet
    call(slots, torch.tensor([[13], [33]]), [1, 1])  # the call gathers the rows that stay
    assert layer.index is None and layer._keys.shape[0] == 2
    assert [seen(slots, r) for r in (1, 3)] == [[11, 13], [31, 32, 33]]
    none = np.zeros(0, dtype=np.int64)
    slots.keep(none, torch.from_numpy(none))
    assert slots.rows == [] and slots.valid.shape == (0, 0)
