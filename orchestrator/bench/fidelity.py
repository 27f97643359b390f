"""The multi-fidelity searches replayed on a measured grid: their profiles decoded for real,
here, in one process, since their engine-seconds are what they claim to save; their timings
answered from the grid's measurements (bench/search.py, bench/servingsearch.py)."""

from __future__ import annotations

import time

from orchestrator.spec.space import candidate_of
from orchestrator.spec.sweep import SweepSpec


class Profiler:
    """A profile request's untimed decode (its candidate's config, or the one it names: a
    served configuration's proxy) on a slice of the decoding order in one batch, as a sweep's
    worker would run it (the sweep's prompts and per-prompt seeds); memoised, so replays with
    other seeds reuse what one decoded (and the seconds it took)."""

    def __init__(self, spec: SweepSpec, order: list[int]):
        from orchestrator.sweep.prompts import spec_prompts
        from workloads.models import load_pair

        self.spec, self.order = spec, order
        self.task, examples, self.prompts = spec_prompts(spec)
        self.examples = {e.index: e for e in examples}
        self.pairs = {p.name: load_pair(p.load_spec()) for p in spec.pairs}
        self.done: dict[tuple, tuple[list[dict], float]] = {}

    def __call__(self, request) -> tuple[list[dict], float]:
        """(records in decoding order, seconds) of a profile `Request`."""
        candidate = candidate_of(self.spec, dict(request.key))
        config = request.config or candidate.config
        memo = (candidate.pair, config, request.start, request.end)
        if memo not in self.done:
            from orchestrator.engines.shard import prompt_seed, scored
            from workloads.decoding import decode_batch

            indices = self.order[request.start:request.end]
            prompts = [self.prompts[candidate.pair][i] for i in indices]
            seeds = [prompt_seed(self.spec.search.seed, i) for i in indices]
            begin = time.perf_counter()
            out = decode_batch(self.pairs[candidate.pair], prompts, config, seeds=seeds)
            seconds = time.perf_counter() - begin
            records = [scored(self.task, self.examples[i], result) for i, result in zip(indices, out.results)]
            self.done[memo] = records, seconds
        return self.done[memo]
