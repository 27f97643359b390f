"""vLLM for real (the CPU build `make vllm` installs): one server over the toy DFlash export,
shared by the module. Its drafts are checked against specsweep's engine prompt by prompt."""


import pytest

from workloads.decoding import DecodeConfig, decode
from workloads.models.pair import BUNDLED, load_pair
from workloads.serving.config import ServingConfig, ServingError
from workloads.serving.load import serve
from workloads.serving.vllm import EngineSettings, VllmServer, vllm_python
from workloads.tasks import get_task

pytestmark = pytest.mark.slow
try:
    vllm_python()
except ServingError as err:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason=str(err))]

DFLASH = ServingConfig(method="dflash", num_speculative_tokens=7, max_new_tokens=48)


@pytest.fixture(scope="module")
def server():
    engine = VllmServer(EngineSettings.of(BUNDLED["toy-dflash"], DFLASH))
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def arith():
    pair = load_pair("toy-dflash")
    examples = get_task("arith").examples("test", n=8)
    return pair, [e.prompt for e in examples], [pair.tokenizer(e.prompt).input_ids for e in examples]


def test_the_cpu_rms_norm_defect_is_found_and_worked_around(server):
    """vLLM CPU's rms_norm normalises every row of a 2-D weight with row 0; the plugin finds it
    on the installed kernel and patches the DFlash drafter's context-K norm."""
    assert server.report["rms_norm_row_zero_defect"] is True
    assert "qwen3_dflash.DFlashQwen3Model" in server.report["patched"]


def test_vllm_drafts_verifies_and_emits_as_specsweep_does(server, arith):
    """Greedy: vLLM's tokens are the verifier's (specsweep `ar`), and its drafts, draft tokens
    and accepted tokens per prompt equal specsweep's linear B = 8 (7 drafts) K = 1."""
    pair, texts, ids = arith
    served, _ = serve(server, ids, DFLASH)
    linear = DecodeConfig(schedule="linear", block=8, steps=1, max_new_tokens=48)
    for text, one in zip(texts, served):
        assert one.token_ids == decode(pair, text, DecodeConfig(schedule="ar", max_new_tokens=48)).token_ids
        ours = decode(pair, text, linear)
        assert (one.counters.iterations, one.counters.drafted, one.counters.accepted) == (
            ours.iterations, ours.drafted, ours.accepted)
        assert one.counters.drafted > one.counters.accepted > 0  # drafts were checked, some rejected


def test_requests_in_flight_keep_each_ones_tokens(server, arith):
    _, _, ids = arith
    alone, _ = serve(server, ids, DFLASH)
    together, wall = serve(server, ids, ServingConfig(method="dflash", num_speculative_tokens=7,
                                                      max_new_tokens=48, concurrency=4))
    assert [s.token_ids for s in together] == [s.token_ids for s in alone]
    assert all(s.counters is None and 0 < s.ttft_s <= s.wall_s <= wall for s in together)
