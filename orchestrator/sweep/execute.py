"""Running a sweep's jobs: one Ray actor per worker slot holding its pairs (`workers`), and
the shard queue that hands them shards, retries and caches (`shards`). A shard crosses to
its worker as it is, its `DecodeConfig`s included, with the examples and formatted prompts
of its indices; shards measured together (Shard.together) cross in one call.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import ray

from orchestrator.engines.shard import Shard
from orchestrator.spec.sweep import SweepSpec
from orchestrator.sweep import raycluster
from orchestrator.sweep.shards import Job, ShardQueue
from orchestrator.sweep.workers import start_workers
from workloads.tasks import Example

HEAD_CHECK_S = 3.0  # between checks that the Ray head lives (Ray gives a lost head a minute)


class Executor:
    """The workers of one session (started by the constructor, on a Ray already up) and the
    jobs in flight on them."""

    def __init__(self, spec: SweepSpec, serves: dict[int, list[str]], examples: list[Example],
                 prompts: dict[str, dict[int, str]], cache: Path):
        self.examples = {e.index: e for e in examples}  # prompt index -> example, scored by the worker
        self.prompts = prompts  # pair -> prompt index -> the prompt that pair decodes
        envs = {p.name: p.runtime_env for p in spec.pairs}
        pairs = {p.name: p.load_spec() for p in spec.pairs}
        # a pair's runtime_env applies only to a worker that serves that pair alone
        self.workers = start_workers([envs[ns[0]] if len(ns) == 1 else None for ns in serves.values()],
                                     spec.cluster.resource, pairs, spec.task.name, spec.search.seed,
                                     str(cache.parent / "logs"))
        self.loading = [w.load.remote(serves[i]) for i, w in enumerate(self.workers)]  # awaited by `ready`
        self.worker_info: list[dict] = []  # per worker: node, pid, GPU, hardware; filled by `ready`
        # cached shards are keyed by the task too, so another task's never match
        self.queue = ShardQueue(serves, cache, json.dumps(spec.task.model_dump()), submit=self._submit,
                                wait=raycluster.wait, fetch=raycluster.fetch,
                                probe=lambda w: self.workers[w].info.remote())
        self.jobs: dict[str, Job] = {}  # in flight, by key
        self.checked = time.monotonic()  # when `step` last asked whether the Ray head lives

    def ready(self) -> list[dict]:
        """Wait until every worker has loaded its pairs; returns what each runs on."""
        try:
            ray.get(self.loading)
            self.worker_info = ray.get([w.info.remote() for w in self.workers])
        except ray.exceptions.RayTaskError as err:
            if isinstance(err.cause, ValueError):  # a pair found bad as it loads: its one-line error
                raise err.cause from None
            raise
        except ray.exceptions.RayError as err:  # the node or a worker's process lost as they load
            first = (str(err).strip().splitlines() or [""])[0][:160]
            raise raycluster.ClusterError(f"cluster: Ray lost a worker while the workers loaded their pairs "
                               f"({type(err).__name__}: {first}); nothing ran: run the sweep again") from None
        return self.worker_info

    def _submit(self, worker: int, shards: list[Shard]):
        prompts = self.prompts[shards[0].pair]  # shards measured together share pair and prompts
        items = [(self.examples[x], prompts[x]) for x in shards[0].indices]
        return self.workers[worker].run.remote(shards, items)

    def run(self, job: Job) -> None:
        """Put a job (or a racing trial's next rung) in flight; its cached shards are done."""
        self.jobs[job.key] = job
        self.queue.add(job)

    def cached(self) -> list[Job]:
        """Jobs in flight that the cache completed without decoding."""
        return [j for j in self.jobs.values() if j.done]

    def step(self) -> list[Job]:
        """Hand pending shards to free workers and wait up to a second for results; returns
        the jobs that completed or failed. Every few seconds it asks whether the Ray head
        still lives, so a lost node is one line well before Ray ends the driver itself."""
        if time.monotonic() - self.checked > HEAD_CHECK_S:
            self.checked = time.monotonic()
            if why := raycluster.head_lost():
                raise raycluster.ClusterLost(f"cluster: the Ray node was lost mid-sweep ({why}); the trials "
                                             "that finished are recorded: rerun the sweep with --resume")
        self.queue.dispatch()
        return self.queue.collect(timeout=1.0)

    def drop(self) -> list[Job]:
        """Forget every job in flight (a sweep stopping); returns them."""
        jobs = list(self.jobs.values())
        self.jobs.clear()
        return jobs

    def close(self, timeout: float = 60) -> None:
        """Have every worker, idle once the sweep has finished, stop its serving engines (their
        clean log folders go with them) before Ray ends the actors; a worker slow to answer is
        left to Ray."""
        ray.wait([w.close.remote() for w in self.workers], num_returns=len(self.workers), timeout=timeout)
