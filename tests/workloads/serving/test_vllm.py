"""vLLM for real (the CPU build `make vllm` installs), on the shared toy DFlash server."""

import dataclasses

from tests.needs_vllm import needs_vllm
from tests.workloads.serving.engines import DFLASH
from workloads.serving.load import serve

pytestmark = needs_vllm


def test_the_cpu_rms_norm_defect_is_found_and_worked_around(dflash_server):
    """vLLM CPU's rms_norm normalises every row of a 2-D weight with row 0; the plugin finds it
    on the installed kernel and patches the DFlash drafter's context-K norm."""
    assert dflash_server.report["rms_norm_row_zero_defect"] is True
    assert "qwen3_dflash.DFlashQwen3Model" in dflash_server.report["patched"]


def test_requests_in_flight_keep_each_ones_tokens(dflash_server, arith):
    _, _, ids = arith
    alone, _ = serve(dflash_server, ids, DFLASH)
    together, wall = serve(dflash_server, ids, dataclasses.replace(DFLASH, concurrency=4))
    assert [s.token_ids for s in together] == [s.token_ids for s in alone]
    assert all(s.counters is None and 0 < s.ttft_s <= s.wall_s <= wall for s in together)
