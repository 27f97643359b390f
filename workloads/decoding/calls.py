"""Model calls over a KV cache that holds the verified prefix minus its last token.

Keeping the last verified token out of the cache means every call starts with it, so a
verifier call over [last, y_1 .. y_B] returns the B + 1 distributions p_1 .. p_{B+1}, and a
drafting call over [last, canvas] sees exactly the verified prefix. Rows that are not part
of the verified prefix (rejected drafts, drafting rows) are cropped after the call.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel

from workloads.models.masks import additive, causal, rows_after_cache


@dataclass
class Meter:
    """Model work of one decode: calls, token rows evaluated and device time.

    On a CPU a call is timed by the wall clock around it. On a GPU each call records a pair
    of CUDA events on its stream and nothing waits for them until `model_s` is read after
    the decode's final synchronization, so timing adds no host syncs to the accept loop.
    Calls overlapped on two streams (two-model packed) are each counted in full.
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

    def stop(self, device: torch.device, began) -> None:
        if device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.events.append((began, end))
        else:
            self.cpu_s += time.perf_counter() - began

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


class CachedModel:
    """A transformers causal LM with its KV cache; `length` tokens are cached."""

    def __init__(self, model: PreTrainedModel, meter: Meter, prefix_cache: bool = True,
                 own_attention: bool = False):
        self.model, self.meter = model, meter
        self.prefix_cache = prefix_cache  # False: full-attention drafting, nothing cached
        self.own_attention = own_attention  # without a cache: input ids only (profiles.py)
        self.history: list[int] = []  # the verified tokens seen, when nothing is cached
        self.cache = DynamicCache()
        self.length = 0
        self.device = model.device
        self.dtype = model.dtype
        self._causal: torch.Tensor | None = None

    def call(self, ids: list[int] | torch.Tensor, visible: torch.Tensor | None, positions: torch.Tensor,
             keep: int, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Evaluate rows `ids` at `positions` (visible: (q, q) bool among rows, None =
        causal; or a ready additive `mask` (1, 1, q, cached + q)); every row sees the whole
        cache. Keeps the first `keep` rows in the cache. Returns logits (q, V)."""
        ids = torch.as_tensor(ids, device=self.device).view(1, -1)
        q = ids.shape[1]
        if mask is None and visible is not None:
            mask = additive(rows_after_cache(self.length, visible)[None], self.dtype).to(self.device)
        elif mask is None and q > 1:  # a single row attends to the whole cache: no mask needed
            mask = self._causal_mask(self.length, q)
        began = self.meter.start(self.device)
        if self.prefix_cache:
            logits = self.model(input_ids=ids, position_ids=positions.view(1, -1).to(self.device),
                                attention_mask=mask, cache=self.cache, use_cache=True).logits[0]
        elif self.own_attention:  # bidirectional over positions 0.. by the model's own code
            logits = self.model(input_ids=ids).logits[0]
        else:
            logits = self.model(input_ids=ids, position_ids=positions.view(1, -1).to(self.device),
                                attention_mask=mask).logits[0]
        self.meter.stop(self.device, began)
        self.meter.nfe += 1
        self.meter.rows += q
        if keep < q:
            self.cache.crop(keep - q)
        self.length += keep
        return logits

    def _causal_mask(self, past: int, q: int) -> torch.Tensor:
        """Additive mask (1, 1, q, past + q) of causal rows after the cache: a view into one
        cached lower-triangular matrix, regrown when a call needs more positions."""
        total = past + q
        if self._causal is None or self._causal.shape[-1] < total:
            size = max(total, 2 * (0 if self._causal is None else self._causal.shape[-1]), 256)
            self._causal = additive(causal(size)[None], self.dtype).to(self.device)
        return self._causal[:, :, past:total, :total]

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
        mask = self._causal_mask(self.length, q).clone()  # pending rows causal, then
        mask[..., n:, self.length + n:] = 0  # block rows see each other
        ids = torch.cat([torch.tensor(pending + [last], device=self.device), canvas])
        logits = self.call(ids, None, torch.arange(self.length, self.length + q), keep=n, mask=mask)
        return logits[n:]

    def crop(self, n: int) -> None:
        """Drop the last n cached tokens (rejected draft rows)."""
        if n > 0:
            self.cache.crop(-n)
            self.length -= n
