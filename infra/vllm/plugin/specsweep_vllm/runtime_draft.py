"""The draft length chosen at run time: one server started at n drafts any k <= n.

vLLM's scheduler already picks a step's draft length from `dynamic_sd_lookup` (batch size ->
k, built from `num_speculative_tokens_per_batch_size`) and every proposer drafts the k it is
handed on each call. Where `SPECSWEEP_VLLM_DRAFT_FILE` names a file, each `schedule` call
reads k from it when the file has changed (specsweep writes it between loads, never during
one) and hands that k to every batch size; k = n, or no file, is the stock path (no lookup),
so a server drafting its own n does exactly what a server without this does. A k above n is
capped at n; the k last applied is written to the report (`record`), so the tool can check
that the k it asked for is the one drafted.
"""

from __future__ import annotations

import os

from specsweep_vllm import record


def lookup(k: int | None, n: int, max_batch: int) -> list[int] | None:
    """The scheduler's `dynamic_sd_lookup` for a run-time k on a server started at n: None
    (stock: n every step) for no k or k >= n, else [k] for every batch size 0..max_batch."""
    if k is None or k >= n:
        return None
    return [max(k, 0)] * (max_batch + 1)


def install(path: str) -> None:
    """Make every vLLM scheduler (the sync and the async one share `schedule`) read k from
    `path` before each step."""
    from vllm.v1.core.sched.scheduler import Scheduler

    stock = Scheduler.schedule
    seen: dict[str, object] = {"stamp": None}

    def schedule(self, *args, **kwargs):
        try:
            stamp = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if stamp != seen["stamp"] and self.num_spec_tokens > 0:
            seen["stamp"] = stamp
            k = None
            if stamp is not None:
                with open(path) as f:
                    k = int(f.read().strip() or self.num_spec_tokens)
            self.dynamic_sd_lookup = lookup(k, self.num_spec_tokens, self.scheduler_config.max_num_seqs)
            record(draft_tokens=self.num_spec_tokens if k is None else min(k, self.num_spec_tokens))
        return stock(self, *args, **kwargs)

    Scheduler.schedule = schedule
    record(runtime_draft=True)
