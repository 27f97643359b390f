"""Additive 4D attention masks and the row layouts of the two attention modes.

transformers passes a custom 4D float mask through untouched; a boolean one is silently
wrong under eager attention. Masks here are shaped (batch, 1, q, k) with 0 where a query
may attend and the dtype's most negative value where it may not. Every query row must see
at least one key, or attention returns NaN.
"""

from __future__ import annotations

import numpy as np
import torch

_FILLS: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}


def additive(allowed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """allowed: (batch, q, k) bool -> (batch, 1, q, k) additive float mask."""
    if dtype not in _FILLS:  # built once: every model call of a decode builds a mask
        _FILLS[dtype] = torch.zeros((), dtype=dtype), torch.tensor(torch.finfo(dtype).min, dtype=dtype)
    zero, blocked = _FILLS[dtype]
    return torch.where(allowed, zero, blocked).unsqueeze(1)


def after_slots(valid: np.ndarray, among: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """(R, 1, Q, L + K) additive mask (float32, holding `dtype`'s most negative value, so a
    cast to dtype is exact): the Q new rows of batch row r see its valid cache slots
    valid[r] (L,) (slots.SlotCache's host array), then among (R, Q, K) or (Q, K) of the
    call's own columns. Built in numpy: a call pays two small-array steps, a fraction of
    torch's (where, cat, expand)."""
    rows, slots = valid.shape
    q, k = among.shape[-2:]
    blocked = np.float32(torch.finfo(dtype).min)
    mask = np.empty((rows, 1, q, slots + k), dtype=np.float32)
    np.multiply(~valid[:, None, :], blocked, out=mask[:, 0, :, :slots])
    np.multiply(~among, blocked, out=mask[:, 0, :, slots:])
    return torch.from_numpy(mask)


def causal(n: int) -> torch.Tensor:
    """(n, n) bool: row i sees columns 0..i."""
    return torch.ones(n, n, dtype=torch.bool).tril()


def packed(verify: int, regions: list[tuple[int, int]]) -> torch.Tensor:
    """(q, q) bool visibility of a self-speculative call (paper 2610.33379, Appendix D.1):
    `verify` causal rows, then one proposal region per (h, size): `size` rows that see the
    first h verify rows and, bidirectionally, each other (never the other regions).
    q = verify + Σ size."""
    q = verify + sum(size for _, size in regions)
    among = torch.zeros(q, q, dtype=torch.bool)
    among[:verify, :verify] = causal(verify)
    start = verify
    for h, size in regions:
        among[start:start + size, :h] = True
        among[start:start + size, start:start + size] = True
        start += size
    return among
