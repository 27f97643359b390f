"""A worker's vLLM servers under faults, on real processes (`make vllm`): an engine core killed
with loads in flight costs one restart (a server that cannot start: test_serving_sweep),
pairs over one verifier share their control server, and draft lengths timed together share
one resident server and their controls."""

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from orchestrator.engines.serverpool import ServerPool as Engines
from orchestrator.engines.serverpool import serve_shards
from tests.needs_vllm import needs_vllm
from tests.workloads.serving.faults import engine_cores
from workloads.models.pair import load_tokenizer
from workloads.serving.config import ServingConfig
from workloads.tasks import get_task

pytestmark = needs_vllm


def _prompts(n: int) -> list[list[int]]:
    tokenizer = load_tokenizer("toy-dflash")
    return [tokenizer(e.prompt).input_ids for e in get_task("arith").examples("test", n=n)]


def test_an_engine_core_killed_with_loads_in_flight_costs_one_restart():
    engines = Engines({"toy-dflash": "toy-dflash", "toy-eagle3": "toy-eagle3"})
    config = ServingConfig(concurrency=4, max_new_tokens=32)
    prompts = _prompts(8)
    try:
        server, started = engines.server("toy-dflash", config, prompts)
        before, _ = engines.serve(server, prompts, config)
        assert started > 0 and engines.restarts == 0
        long = ServingConfig(concurrency=4, max_new_tokens=160)
        with ThreadPoolExecutor(1) as pool:
            load = pool.submit(engines.serve, server, prompts * 8, long)  # 64 requests, 4 in flight
            time.sleep(1.0)
            assert not load.done()
            cores = engine_cores(server.process.pid)
            assert cores
            for pid in cores:
                os.kill(pid, signal.SIGKILL)
            with pytest.raises(Exception):  # noqa: B017 (a refused, cut or failed stream: vLLM's choice)
                load.result(timeout=300)
        assert not server.alive()
        again, started = engines.server("toy-dflash", config, prompts)
        assert again is not server and started > 0 and engines.restarts == 1
        after, _ = engines.serve(again, prompts, config)
        assert [s.token_ids for s in after] == [s.token_ids for s in before]  # greedy: the same tokens
        same, started = engines.server("toy-dflash", config, prompts)
        assert same is again and started == 0 and engines.restarts == 1  # alive: kept
        # another pair over the same verifier is timed against the same control: no start
        shared, started = engines.server("toy-eagle3", config, prompts)
        assert shared is again and started == 0 and engines.starts == 2
        # two draft lengths timed together on one resident DFlash server beside that control,
        # one request at a time: each request's own counters, read on its first load only
        drafts = [ServingConfig(method="dflash", num_speculative_tokens=k, concurrency=1, max_new_tokens=32)
                  for k in (1, 3)]
        served, controls, started, ran = serve_shards(engines, "toy-dflash", drafts,
                                                      drafts[0].unspeculative(), prompts, 0, repeats=2,
                                                      ceiling=3)
        assert started > 0 and engines.starts == 3  # one start for both
        # each logged as what it ran: its own draft length on the server started at 3
        assert [(r["engine_args"]["speculative_config"]["num_speculative_tokens"], r["resident_n"])
                for r in ran] == [(1, 3), (3, 3)]
        tokens = [s.token_ids for s in before]
        for records in served:
            assert [r["token_ids"] for r in records] == tokens  # lossless: the verifier's greedy tokens
            assert all(r["drafted"] > 0 and "shared_counters" not in r for r in records)
        drafted = [sum(r["drafted"] for r in records) for records in served]
        assert drafted[0] < drafted[1]  # each its own draft length's counters
        (control,) = controls
        assert control["shared"] == 2 and control["repeats"] == 2 and control["wall_s"] > 0
    finally:
        engines.close()

