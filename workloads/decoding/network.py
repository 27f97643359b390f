"""A network serving the rows of one batch: model calls over a KV cache that holds each row's
verified prefix minus its last token.

Keeping the last verified token out of the cache means every call starts with it, so a
verifier call over [last, y_1 .. y_B] returns the B + 1 distributions p_1 .. p_{B+1}, and a
drafting call over [last, canvas] sees exactly the verified prefix. Rows that are not part
of the verified prefix (rejected drafts, drafting rows) are not kept (layout.Call.kept).
"""

from __future__ import annotations

import functools
import inspect
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedModel

from workloads.decoding.layout import Call
from workloads.decoding.masks import after_slots, causal
from workloads.decoding.slots import SlotCache


@dataclass
class Meter:
    """Model work of one network over a batch: calls, token rows evaluated (padding
    included) and device time (rows.RowMeters splits it per row).

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


def cache_keyword(model: PreTrainedModel) -> str:
    """The name `model`'s forward takes its KV cache by: `cache` from transformers 5.2x,
    `past_key_values` before it (and in remote code). Passing the other name is not an error
    there: the cache is silently dropped and a custom mask no longer fits the keys."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class Network:
    """A transformers causal LM serving the rows of one batch, with their KV slots (`rows`:
    the batch's size; `slack`: slots.SlotCache's)."""

    def __init__(self, model: PreTrainedModel, rows: int, slack: float | None = None,
                 prefix_cache: bool = True, own_attention: bool = False):
        self.model = model
        self.prefix_cache = prefix_cache  # False: full-attention drafting, nothing cached
        self.own_attention = own_attention  # without a cache: input ids only (profiles.py)
        self.slots = SlotCache(rows, slack)
        self.device = model.device
        self.dtype = model.dtype
        self.tap = None  # a FeatureTap on this network: the features of its latest call
        self.work = Meter()  # its forward passes, their token rows (padding included) and time
        self.cache_keyword = cache_keyword(model)

    def prepare(self, call: Call):
        """The forward of `call` over every row held, returning logits (L, Q, V), and the
        commit to run after it, apart from the forward's time, of the first call.kept[i] new
        slots of each row (None: the caller records them once it knows, SlotCache.keep_first)."""
        if self.own_attention:  # the model's own attention takes no padding: row by row, nothing kept
            return self._row_by_row(call), lambda: None
        width = call.ids.shape[1]
        if self.prefix_cache:
            cache, valid = self.slots.view()
        else:
            cache, valid = None, np.zeros((call.ids.shape[0], 0), dtype=bool)
        among = call.among
        if width == 1 and valid.all() and (among is None or bool(among.all())):
            mask = None  # one row a call that sees every slot: nothing to mask
        else:
            among = _causal(width) if among is None else among.numpy()
            mask = after_slots(valid, among, self.dtype).to(self.device, self.dtype)
        inputs = dict(input_ids=call.ids.to(self.device), position_ids=call.positions.to(self.device),
                      attention_mask=mask)
        if cache is not None:
            inputs.update({self.cache_keyword: cache, "use_cache": True})

        def commit() -> None:
            if cache is not None and call.kept is not None:
                self.slots.keep_first(call.kept)
        return lambda: self.model(**inputs).logits, commit

    def _row_by_row(self, call: Call):
        """The forward of a model whose own code attends (Dream, LLaDA remote code: input ids
        only): each row's real ids alone, its logits padded to the call's Q rows."""
        def forward() -> torch.Tensor:
            rows = [self.model(input_ids=call.ids[i, :n][None].to(self.device)).logits[0]
                    for i, n in enumerate(call.real.tolist())]
            out = rows[0].new_zeros(len(rows), call.ids.shape[1], rows[0].shape[-1])
            for i, logits in enumerate(rows):
                out[i, :logits.shape[0]] = logits
            return out
        return forward

    def close(self) -> None:
        """Remove the feature tap's hooks from the model, which outlives the batch."""
        if self.tap is not None:
            self.tap.close()


@functools.lru_cache(maxsize=64)
def _causal(width: int) -> np.ndarray:
    """masks.causal, built once per width for the calls that only read it."""
    return causal(width).numpy()
