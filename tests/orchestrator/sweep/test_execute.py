"""The executor on a real Ray head (the session's, shared): a job's shards measured by a
worker actor and collected, then read back from the shard cache without a decode; a job in
flight dropped; the workers closed."""

import ray

from orchestrator.spec.sweep import parse_spec
from orchestrator.sweep import raycluster
from orchestrator.sweep.execute import Executor
from orchestrator.sweep.plan import Planner
from workloads.tasks import get_task

SPEC = parse_spec({"name": "ex", "pairs": ["toy"], "task": {"name": "arith", "limit": 4},
                   "space": {"schedule": ["linear"], "block": [4], "max_new_tokens": 8},
                   "objectives": {"throughput_tps": "max", "accuracy": "max"}, "cluster": {"slots": 1}})


def test_a_job_is_measured_on_the_workers_then_read_back_from_the_cache(tmp_path, ray_head):
    examples = get_task("arith").examples(n=4, seed=0)
    prompts = {"toy": {e.index: e.prompt for e in examples}}
    serves = {0: ["toy"]}
    (tmp_path / "shards").mkdir()  # the sweep state's, made by study.open_state
    planner = Planner(SPEC, [e.index for e in examples], serves)
    raycluster.start(SPEC.cluster, ray_head)
    try:
        executor = Executor(SPEC, serves, examples, prompts, tmp_path / "shards")
        (info,) = executor.ready()
        assert info["gpu"] == "cpu" and info["hardware"]["cpu_cores"] >= 1
        (job,) = planner.baselines()
        executor.run(job)
        done = []
        while not done:
            done = executor.cached() + executor.step()
        assert done == [job] and job.error is None and job.done
        records = [r for out in job.results.values() for r in out["records"]]
        assert sorted(r["index"] for r in records) == [e.index for e in examples]
        assert all(out["engine_s"] > 0 for out in job.results.values())
        executor.jobs.clear()
        (again,) = planner.baselines()  # the same shards: the cache holds them
        executor.run(again)
        assert executor.cached() == [again] and again.results == job.results
        assert executor.drop() == [again] and executor.jobs == {}
        executor.close()
    finally:
        ray.shutdown()
