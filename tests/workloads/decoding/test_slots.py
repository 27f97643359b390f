"""The slot cache of a batch: masked slots stay out of every row's view, compaction keeps each
row's valid slots in order, a row that leaves takes only its own slots."""

import numpy as np
import torch
from transformers.cache_utils import Cache

from workloads.decoding.slots import SlotCache


def call(slots: SlotCache, rows: list[int], keys: torch.Tensor, kept: list[int]) -> None:
    """Append S new slots (keys: (len(rows), S)) as a model call would; row r keeps its first kept[r]."""
    cache, valid = slots.view(rows)
    new = keys[:, None, :, None].float()
    cache.update(new, new, 0)
    slots.commit(rows, cache, np.array(kept))


def seen(slots: SlotCache, row: int) -> list[int]:
    i = slots.rows.index(row)
    return slots.cache.layers[0].keys[i, 0, :, 0][slots.valid[i]].long().tolist()


def test_rows_keep_their_own_slots_through_crops_subsets_compaction_and_leaving():
    slots = SlotCache(3, slack=0.3)
    call(slots, [0, 1, 2], torch.tensor([[1, 2, 3], [11, 12, 13], [21, 22, 23]]),
         [3, 2, 1])
    assert [seen(slots, r) for r in range(3)] == [[1, 2, 3], [11, 12], [21]]
    slots.crop(0, 2)  # rejected drafts
    call(slots, [1], torch.tensor([[14, 15]]), [2])  # a subset call
    assert [seen(slots, r) for r in range(3)] == [[1], [11, 12, 14, 15], [21]]
    assert [slots.length(r) for r in range(3)] == [1, 4, 1]
    assert slots.valid.shape[1] == 4  # compacted: over 30% was masked
    slots.release(1)
    assert slots.rows == [0, 2] and [seen(slots, r) for r in (0, 2)] == [[1], [21]]
    assert slots.valid.shape[1] == 1  # the slots no remaining row sees are trimmed


def test_one_row_is_always_exactly_its_prefix():
    slots = SlotCache(1)
    call(slots, [0], torch.tensor([[1, 2, 3, 4]]), [2])
    slots.crop(0, 1)
    assert isinstance(slots.cache, Cache) and slots.valid.shape[1] == 1 and seen(slots, 0) == [1]


def test_rows_that_leave_are_gathered_out_by_the_next_call():
    slots = SlotCache(4)
    call(slots, [0, 1, 2, 3], torch.tensor([[1, 2], [11, 12], [21, 22], [31, 32]]),
         [2, 1, 2, 2])
    slots.drop([0, 2])
    assert slots.rows == [1, 3] and slots.held.tolist() == [1, 2]
    layer = slots.cache.layers[0]
    assert layer.index is not None and layer._keys.shape[0] == 4  # nothing copied yet
    call(slots, [1, 3], torch.tensor([[13], [33]]), [1, 1])  # the call gathers the rows that stay
    assert layer.index is None and layer._keys.shape[0] == 2
    assert [seen(slots, r) for r in (1, 3)] == [[11, 13], [31, 32, 33]]
    slots.drop([1])
    slots.drop([3])
    assert slots.rows == [] and slots.valid.shape == (0, 0)
