"""The planner without Ray: a sweep's baseline jobs, and a strategy's requests turned into
jobs (a trial's shards split over its eligible workers with its engine's control; a profile
in one untimed batch with none)."""

import optuna

from orchestrator.search.strategy import Request
from orchestrator.spec.space import grid, params_key
from orchestrator.spec.sweep import parse_spec
from orchestrator.sweep.plan import Planner, decoding_order, params_label
from workloads.decoding import DecodeConfig
from workloads.serving.config import ServingConfig
from workloads.tasks import get_task

SPEC = {"name": "p", "pairs": ["toy"], "task": {"name": "arith", "limit": 16},
        "space": {"schedule": ["linear"], "block": [4], "steps": [1, 2], "max_new_tokens": 12},
        "objectives": {"throughput_tps": "max", "accuracy": "max"},
        "search": {"sampler": "grid", "trials": 2}, "baselines": ["ar", "diffusion"]}
INDICES = list(range(16))


def planner(spec=SPEC, serves=None):
    return Planner(parse_spec(spec), INDICES, serves or {0: ["toy"], 1: ["toy"]})


def test_one_baseline_job_per_schedule_over_every_prompt_without_a_control():
    jobs = planner().baselines()
    assert [j.key for j in jobs] == ["baseline:toy:ar", "baseline:toy:diffusion"]
    for job in jobs:
        assert job.trial is None and all(s.control is None and s.trial == -1 for s in job.shards)
        assert sorted(i for s in job.shards for i in s.indices) == INDICES
    assert jobs[0].candidate.config == DecodeConfig(schedule="ar", max_new_tokens=12)


def test_a_trials_request_is_split_over_its_workers_each_shard_beside_the_ar_control():
    plan = planner()
    key = params_key(grid(plan.spec)[0])
    study = optuna.create_study(directions=["maximize", "maximize"])
    trial = study.ask()
    job = plan.request_job(Request(key, True, 0, 16, "trial", trial=trial))
    assert job.trial is trial and job.key == f"trial:{trial.number}:0"
    assert job.label == f"trial {trial.number}"
    assert len(job.shards) == 2 and [s.indices for s in job.shards] == [tuple(range(8)), tuple(range(8, 16))]
    assert all(s.control == DecodeConfig(schedule="ar", max_new_tokens=12) for s in job.shards)
    assert all(s.trial == trial.number and s.config == job.candidate.config for s in job.shards)
    # a later rung: only its new prompts, keyed apart from the first
    later = plan.request_job(Request(key, True, 8, 16, "trial", trial=trial))
    assert later.key != job.key and sorted(i for s in later.shards for i in s.indices) == INDICES[8:]


def test_a_profile_is_one_untimed_batch_of_its_prompts_with_its_proxy_config():
    plan = planner()
    key = params_key(grid(plan.spec)[1])
    proxy = DecodeConfig(schedule="linear", block=4, steps=1, max_new_tokens=12)
    job = plan.request_job(Request(key, False, 4, 12, "profile", config=proxy))
    (shard,) = job.shards
    assert shard.indices == tuple(range(4, 12)) and shard.batch_size == 8 and shard.control is None
    assert shard.config == proxy and job.trial is None
    assert job.label == f"profile toy {params_label(key)}, prompts 4-12"


def test_only_workers_serving_the_pair_get_its_shards():
    plan = planner(serves={0: ["other"], 1: ["toy"]})
    job = plan.request_job(Request(params_key(grid(plan.spec)[0]), True, 0, 16, "timing"))
    assert len(job.shards) == 1 and job.trial is None and job.shards[0].trial == -1
    assert job.shards[0].together is None  # specsweep's controls sit beside each trial's batches


def test_a_served_request_carries_vllms_own_control_and_its_repeats():
    spec = {**SPEC, "pairs": ["toy-dflash"], "baselines": [],
            "space": {"engine": ["vllm"], "method": ["dflash"], "num_speculative_tokens": [3],
                      "concurrency": [2]},
            "serving": {"repeats": 3}}
    plan = planner(spec, {0: ["toy-dflash"]})
    job = plan.request_job(Request(params_key(grid(plan.spec)[0]), True, 0, 16, "timing"))
    (shard,) = job.shards
    assert shard.control == ServingConfig(concurrency=2) and shard.repeats == 3 and shard.batch_size == 2


def test_served_trials_on_one_server_start_and_control_are_measured_together_and_no_profile_is():
    spec = {**SPEC, "pairs": ["toy-dflash"], "baselines": [],
            "space": {"engine": ["vllm"], "method": ["dflash"], "num_speculative_tokens": [3, 5],
                      "concurrency": [1, 2]}}
    plan = planner(spec, {0: ["toy-dflash"]})
    keys = {(p["num_speculative_tokens"], p["concurrency"]): params_key(p) for p in grid(plan.spec)}
    together = {point: plan.request_job(Request(key, True, 0, 16, "timing")).shards[0].together
                for point, key in keys.items()}
    assert together[3, 1] == together[5, 1] is not None and together[3, 2] == together[5, 2]
    assert together[3, 1] != together[3, 2]  # another concurrency: another control
    profile = plan.request_job(Request(keys[3, 1], False, 0, 16, "profile")).shards[0]
    assert profile.together is None


def test_racing_decodes_in_the_races_order_and_a_plain_sweep_in_the_tasks():
    examples = get_task("arith").examples(n=16, seed=0)
    assert decoding_order(parse_spec(SPEC), examples) == examples
    raced = parse_spec({**SPEC, "search": {"sampler": "tpe", "racing": {"start": 4}}})
    order = decoding_order(raced, examples)
    assert sorted(e.index for e in order) == sorted(e.index for e in examples) and order != examples


def test_the_grid_and_the_queue_put_the_same_trials_together():
    """The grid asks together what the shard queue then measures together: for every two points
    of a served grid (methods, draft lengths, no speculation, concurrencies), spec.space's key
    and the planned shards' keys agree under shard.measured_together."""
    from itertools import combinations

    from orchestrator.engines.shard import measured_together
    from orchestrator.spec.space import together_key

    spec = {**SPEC, "pairs": ["toy-dflash"], "baselines": [],
            "space": {"engine": ["vllm"], "method": ["none", "ngram", "dflash"],
                      "num_speculative_tokens": [1, 3], "concurrency": [1, 4]},
            "serving": {"repeats": 2}}
    plan = planner(spec, {0: ["toy-dflash"]})
    points = grid(plan.spec)
    asked = [together_key(plan.spec, p) for p in points]
    queued = [plan.request_job(Request(params_key(p), True, 0, 16, "timing")).shards[0].together
              for p in points]
    pairs = list(combinations(range(len(points)), 2))
    agree = [measured_together(asked[a], asked[b]) == measured_together(queued[a], queued[b])
             for a, b in pairs]
    assert all(agree), [(points[a], points[b]) for (a, b), ok in zip(pairs, agree) if not ok]
    # at each concurrency: a drafter's two draft lengths, and no speculation with any of the four
    assert sum(measured_together(asked[a], asked[b]) for a, b in pairs) == 2 * (1 + 1 + 4)
