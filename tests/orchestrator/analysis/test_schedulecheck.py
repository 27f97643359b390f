"""A drafts schedule served by vLLM for real (`make vllm`) and measured at its switch."""

import os

from orchestrator.analysis.schedule import refusal_error
from orchestrator.analysis.schedulecheck import check_schedule
from tests.needs_vllm import needs_vllm
from tests.workloads.serving.faults import KillOnce
from workloads.models.pair import load_pair
from workloads.models.pairspec import BUNDLED, refs
from workloads.tasks import get_task

pytestmark = needs_vllm


def test_a_schedule_is_measured_at_both_sides_of_its_switch_and_against_no_speculation(tmp_path):
    """One of its servers' engine core is killed once a load is in flight: the load is served
    again on a restarted server, and the check ends as it would have."""
    pair = load_pair("toy-dflash")
    prompts = [pair.tokenizer(e.prompt).input_ids for e in get_task("arith").examples(n=4)]
    checkpoints = refs(BUNDLED["toy-dflash"])
    schedule = {"method": "dflash", "model": checkpoints["drafter"], "num_speculative_tokens": 3,
                "num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 4, 0]]}
    said = []
    fault = KillOnce(tmp_path, os.getpid())
    written, found = check_schedule(checkpoints["verifier"], schedule, prompts, 8, 1, said.append, tmp_path)
    assert fault.killed and len(list(tmp_path.glob("vllm-*/server.log"))) == 1  # the lost server's log, kept
    (switch,) = found["switches"]
    assert (switch["below"], switch["above"], switch["n_below"], switch["n_above"]) == (1, 2, 3, 0)
    assert [(s["concurrency"], s["other_n"]) for s in switch["sides"]] == [(1, 0), (2, 3)]
    assert all(len(s["schedule_wall_s"]) == len(s["other_wall_s"]) == 1 for s in switch["sides"])
    assert found["refusal_error"] == refusal_error(1) == 1.0
    assert found["smallest_n"]["n"] == 0 and found["smallest_n"]["concurrency"] == 4
    assert found["smallest_n"]["throughput_ratio"] > 0
    lost = [s["concurrency"] for s in switch["sides"] if s["schedule_always_slower"]]
    if lost == [1]:  # moved towards where it lost: no speculation at 1 too, so none at all
        assert written is None
    elif lost == [2]:  # n = 3 at 2 too
        assert written["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 4, 0]]
    else:  # kept where it lost nowhere, or at both sides (no side to move it towards)
        assert written == schedule and not switch["refused"]
    assert len(said) == 3
