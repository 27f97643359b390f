"""What each network of the engine holds for a row when the row leaves its batch, and what a
causal prefill of the row's verified tokens would hold: the engine's caches keep the
verified prefix minus its last token, nothing from drafting or rejected rows."""

from __future__ import annotations

import numpy as np
import torch

from tests.workloads.decoding.reference import Model, State
from tests.workloads.decoding.stubs import TOK
from workloads.decoding.config import DecodeConfig
from workloads.decoding.network import Network
from workloads.decoding.rows import Rows


def caches_when_rows_leave(monkeypatch) -> dict[int, list[tuple]]:
    """Patch Rows.leave to record, per leaving batch row, each network's (model, cached
    length, [(keys, values) (heads, length, dim) per layer]) just before the row leaves."""
    seen: dict[int, list[tuple]] = {}
    leave = Rows.leave

    def recording(rows: Rows, done: torch.Tensor, networks: list):
        for j in np.flatnonzero(done.numpy()).tolist():
            held = []
            for network in {id(n): n for n in networks}.values():
                valid = torch.from_numpy(network.slots.valid[j])
                layers = [(layer.keys[j][:, valid], layer.values[j][:, valid])
                          for layer in network.slots.cache.layers]
                held.append((network.model, int(network.slots.held[j]), layers))
            seen[int(rows.live[j])] = held
        return leave(rows, done, networks)

    monkeypatch.setattr(Rows, "leave", recording)
    return seen


def prefilled(model, ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (keys, values) per layer of a causal prefill of `ids` alone."""
    fresh = Model(Network(model, 1), State(DecodeConfig(schedule="ar"), TOK, 0))
    with torch.inference_mode():
        fresh.causal(ids)
    return [(layer.keys[0], layer.values[0]) for layer in fresh.network.slots.cache.layers]


def holds_prefix(layers: list, length: int, expected: list) -> bool:
    """Whether the cached layers hold `length` slots whose first len(expected[0]) equal the prefill's."""
    n = expected[0][0].shape[1]
    return all(k.shape[1] == length and torch.allclose(k[:, :n], ek, atol=1e-5)
               and torch.allclose(v[:, :n], ev, atol=1e-5)
               for (k, v), (ek, ev) in zip(layers, expected, strict=True))
