"""vLLM for real (the CPU build `make vllm` installs), on the shared toy DFlash server: the
only test file that starts it (a file of its own in each test process that takes one)."""

import dataclasses

import pytest

from tests.needs_vllm import needs_vllm
from tests.workloads.serving.engines import DFLASH
from tests.workloads.serving.faults import engine_cores
from workloads.serving.conformance import check
from workloads.serving.load import serve
from workloads.serving.procs import wait_quiet

pytestmark = needs_vllm


def test_the_cpu_rms_norm_defect_is_found_and_worked_around(dflash_server):
    """vLLM CPU's rms_norm normalises every row of a 2-D weight with row 0; the plugin finds it
    on the installed kernel and patches the DFlash drafter's context-K norm."""
    assert dflash_server.report["rms_norm_row_zero_defect"] is True
    assert "qwen3_dflash.DFlashQwen3Model" in dflash_server.report["patched"]


def test_the_tests_servers_fork_their_engine_core_only_with_one_openmp_thread(dflash_server):
    """The plugin forks the engine core from the API server where asked (tests/conftest.py) and
    it can (one OpenMP thread, the model in the engine core); the engine core is still a process
    of its own, which the fault tests kill."""
    import os

    asked = os.environ.get("SPECSWEEP_VLLM_FORK_ENGINE") == "1" and os.environ.get("OMP_NUM_THREADS") == "1"
    assert dflash_server.report["forked_engine"] is asked
    assert engine_cores(dflash_server.process.pid)


def test_requests_in_flight_keep_each_ones_tokens(dflash_server, arith):
    _, _, ids = arith
    alone, _ = serve(dflash_server, ids, DFLASH)
    together, wall = serve(dflash_server, ids, dataclasses.replace(DFLASH, concurrency=4))
    assert [s.token_ids for s in together] == [s.token_ids for s in alone]
    assert all(s.counters is None and 0 < s.ttft_s <= s.wall_s <= wall for s in together)
    # the model in the engine core (the tests' servers): nothing polls after the load
    assert wait_quiet(dflash_server.process.pid) < 0.5


def test_a_rate_load_sends_requests_at_their_arrival_times_within_the_bound(dflash_server, arith):
    """At 4 requests/s with at most 2 in flight, 8 requests take at least their last arrival
    (seeded) and keep the tokens of the load served one by one; each request's ITL gaps sum to
    its latency after the first token. A request may stream no gaps: under load vLLM sends the
    steps a slow reader has not taken yet as one chunk, and one whose whole completion came in
    its first chunk has none (its latency after the first token is then ~0, which the sum
    rule checks); the load as a whole streamed gaps."""
    from workloads.serving.load import arrivals

    _, _, ids = arith
    alone, _ = serve(dflash_server, ids, DFLASH)
    rate = dataclasses.replace(DFLASH, concurrency=2, request_rate=4.0)
    served, wall = serve(dflash_server, ids, rate)
    assert [s.token_ids for s in served] == [s.token_ids for s in alone]
    assert wall >= arrivals(len(ids), 4.0, 1.0, DFLASH.seed)[-1]
    assert any(s.itl_s for s in served)
    for s in served:
        assert s.counters is None and all(g >= 0 for g in s.itl_s)
        assert sum(s.itl_s) == pytest.approx(s.wall_s - s.ttft_s, abs=0.05)


def test_vllm_with_the_workaround_decodes_as_specsweep_does(dflash_server, arith):
    """Greedy: the same tokens and, per prompt, the same drafts, drafted and accepted tokens as
    specsweep's linear B = 8 K = 1; the drafts were checked and some rejected."""
    pair, texts, _ = arith
    result = check(pair, dflash_server, texts, DFLASH)
    assert result.passed, "\n".join(result.lines())
    assert all(p.vllm.drafted > p.vllm.accepted > 0 for p in result.prompts)
    assert "worked around in qwen3_dflash.DFlashQwen3Model" in result.kernel_check
