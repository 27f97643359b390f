"""The jobs of a sweep: its baselines, and for each request of its search strategy the shards
its prompts are split into. The planner runs nothing (`execute`), decides nothing (the
strategy, orchestrator/search) and scores nothing (`record`).

Prompts are decoded in one order for the whole sweep: the task's, or under racing the
race's (`search.racing.race_order`), since a rung is a prefix of that order and must sample
the prompts uniformly. A trial's shards also carry its engine's control (the `ar` baseline's
config for specsweep), timed beside the trial so its speed ratio compares like with like;
a served trial's also carry what its server starts, so the queue measures the trials on one
start and control together (Shard.together).
"""

from __future__ import annotations

from orchestrator.engines import engine_of
from orchestrator.engines.shard import Shard
from orchestrator.search.racing import race_order
from orchestrator.search.strategy import Request
from orchestrator.spec.space import Candidate, baseline_config, batch_sizes, candidate_of
from orchestrator.spec.sweep import SweepSpec
from orchestrator.stored import baseline_key
from orchestrator.sweep.shards import Job, split
from workloads.tasks import Example


def decoding_order(spec: SweepSpec, examples: list[Example]) -> list[Example]:
    """The task's examples in the order a sweep decodes them: the race's order when the
    sweep races (rungs are prefixes, and each must sample the prompts uniformly)."""
    if not spec.search.race():
        return examples
    by_index = {e.index: e for e in examples}
    return [by_index[i] for i in race_order(list(by_index), spec.search.seed)]


class Planner:
    """The jobs a sweep runs: its baselines, then its strategy's requests."""

    def __init__(self, spec: SweepSpec, indices: list[int], serves: dict[int, list[str]]):
        self.spec = spec
        self.indices = indices  # prompt indices in decoding order
        self.serves = serves  # worker -> the pairs it serves: a job's shards go one per eligible worker
        # built once, here: every trial shard carries this same config to its worker
        self.control = baseline_config(spec, "ar") if "ar" in spec.baselines else None

    def shards(self, candidate: Candidate, number: int | None, start: int, end: int) -> list[Shard]:
        """Shards of the prompts start..end-1 (decoding order), one per eligible worker, each
        of whole batches; a trial's (`number` not None) carry its engine's control
        (Engine.control)."""
        eligible = [w for w, names in self.serves.items() if candidate.pair in names]
        indices = self.indices[start:end]
        engine = engine_of(candidate.config)
        control = engine.control(candidate.config, self.control) if number is not None else None
        # a timed trial's server start: trials on one start and control are measured together
        start = engine.start_key(candidate.pair, candidate.config) if control is not None else None
        number = -1 if number is None else number
        size = candidate.batch_size
        repeats = engine.repeats(self.spec.serving.repeats)
        spans = split(len(indices), len(eligible), size)
        return [Shard(number, candidate.pair, candidate.config, tuple(indices[a:b]), control, size, repeats,
                      self.draft_ceiling(candidate), start) for a, b in spans]

    def draft_ceiling(self, candidate: Candidate) -> int | None:
        """The draft length the candidate's server starts at (Engine.draft_ceiling)."""
        return engine_of(candidate.config).draft_ceiling(self.spec.dimension_values())

    def baselines(self) -> list[Job]:
        """One job per pair, baseline schedule the pair runs, and batch size."""
        jobs = []
        for pair in self.spec.pairs:
            kind = self.spec.pair_kinds[pair.name]
            for schedule in [s for s in self.spec.baselines if kind.runs(s)]:
                for size in batch_sizes(self.spec):
                    at = f" at batch size {size}" if size > 1 else ""
                    label = f"{pair.name} {schedule} baseline{at}"
                    candidate = Candidate(pair.name, baseline_config(self.spec, schedule), size)
                    shards = self.shards(candidate, None, 0, len(self.indices))
                    jobs.append(Job(baseline_key(pair.name, schedule, size), label, candidate, shards))
        return jobs

    def request_job(self, request: Request) -> Job:
        """A strategy's request as a job: timed, split as a trial's with its control; a
        profile's prompts in one shard of one batch, with no control."""
        candidate = candidate_of(self.spec, dict(request.key))
        trial = request.trial
        if request.timed:
            shards = self.shards(candidate, -1 if trial is None else trial.number, request.start, request.end)
        else:
            indices = tuple(self.indices[request.start:request.end])
            config = request.config or candidate.config
            shards = [Shard(-1, candidate.pair, config, indices, None, len(indices),
                            draft_ceiling=self.draft_ceiling(candidate))]
        if trial is not None:
            key = f"trial:{trial.number}:{request.start}"
            return Job(key, f"trial {trial.number}", candidate, shards, trial)
        label = (f"{request.phase} {candidate.pair} {params_label(request.key)}, "
                 f"prompts {request.start}-{request.end}")
        return Job(f"{request.phase}:{request.key}:{request.start}", label, candidate, shards)


def params_label(key: tuple) -> str:
    """A grid point's params in one short line: `name=value, ...`."""
    return ", ".join(f"{name}={value}" for name, value in key)
