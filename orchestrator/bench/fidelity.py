"""The multi-fidelity search (`search.fidelity`) replayed on a measured grid: its profiles
decoded for real, here, in one process, since their engine-seconds are what it claims to
save; its timings read from the grid's per-prompt records, timed at batch size 1 as it would
time them."""

from __future__ import annotations

import time

from orchestrator.spec.space import candidate_of
from orchestrator.spec.sweep import SweepSpec


class Profiler:
    """Untimed decodes of a grid's configurations on slices of the race order, each slice in
    one batch, as a sweep's worker would run them (the sweep's prompts and per-prompt seeds);
    memoised, so replays with other seeds reuse what one decoded (and the seconds it took)."""

    def __init__(self, spec: SweepSpec, order: list[int]):
        from orchestrator.sweep.prompts import spec_prompts
        from workloads.models import load_pair

        self.spec, self.order = spec, order
        self.task, examples, self.prompts = spec_prompts(spec)
        self.examples = {e.index: e for e in examples}
        self.pairs = {p.name: load_pair(p.load_spec()) for p in spec.pairs}
        self.done: dict[tuple, tuple[list[dict], float]] = {}

    def __call__(self, key: tuple, start: int, end: int) -> tuple[list[dict], float]:
        if (key, start, end) not in self.done:
            from orchestrator.engines.shard import prompt_seed, scored
            from workloads.decoding import decode_batch

            candidate = candidate_of(self.spec, dict(key))
            indices = self.order[start:end]
            prompts = [self.prompts[candidate.pair][i] for i in indices]
            seeds = [prompt_seed(self.spec.search.seed, i) for i in indices]
            begin = time.perf_counter()
            out = decode_batch(self.pairs[candidate.pair], prompts, candidate.config, seeds=seeds)
            seconds = time.perf_counter() - begin
            records = [scored(self.task, self.examples[i], result) for i, result in zip(indices, out.results)]
            self.done[key, start, end] = records, seconds
        return self.done[key, start, end]
