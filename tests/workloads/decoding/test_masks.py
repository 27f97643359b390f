"""A call's additive mask: each row's new rows see its valid slots, then what `among` lets
them see of the call's own columns; 0 where seen, the dtype's most negative value (exact
after the cast) elsewhere."""

import numpy as np
import torch

from workloads.decoding.masks import after_slots, causal


def test_rows_see_their_valid_slots_then_their_own_columns():
    valid = np.array([[True, False, True], [False, True, True]])
    among = np.stack([causal(2).numpy(), np.eye(2, dtype=bool)])  # row 1's second new row is padding
    mask = after_slots(valid, among, torch.float32)
    assert mask.shape == (2, 1, 2, 5) and mask.dtype == torch.float32
    seen = mask[:, 0] == 0
    assert seen.tolist() == [[[True, False, True, True, False], [True, False, True, True, True]],
                             [[False, True, True, True, False], [False, True, True, False, True]]]
    assert set(mask[~(mask == 0)].tolist()) == {torch.finfo(torch.float32).min}


def test_a_shared_among_and_a_half_precision_model():
    valid = np.array([[True, False], [True, True]])
    mask = after_slots(valid, causal(1).numpy(), torch.bfloat16).to(torch.bfloat16)
    assert mask[:, 0, 0].tolist() == [[0, torch.finfo(torch.bfloat16).min, 0], [0, 0, 0]]
