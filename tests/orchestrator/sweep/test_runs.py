"""What a trial's MLflow run holds, without a tracking server."""

from types import SimpleNamespace

from orchestrator.spec.space import Candidate
from orchestrator.sweep.runs import ACCEPTANCE, engine_tags, trial_log
from orchestrator.sweep.shards import Job
from workloads.decoding import DecodeConfig

SPEC = SimpleNamespace(name="t", task=SimpleNamespace(name="arith", limit=2, seed=0))


def logged(config: DecodeConfig, table: list[dict]):
    job = Job("trial:0", "trial 0", Candidate("toy", config), [], results={0: {"node": "n", "gpu": "cpu"}})
    return trial_log(SPEC, "parent", "two-model", job, {"accuracy": 1.0}, {}, table, "FINISHED")


def test_a_drafting_trial_logs_its_acceptance_by_position():
    table = [{"index": 0, "accept_lengths": [0, 2]}, {"index": 1, "accept_lengths": [2, 1]}]
    entry = logged(DecodeConfig(schedule="linear", block=2), table)
    assert entry.series == {"acceptance_rate_pos": [0.75, 0.5]}
    assert entry.documents == {ACCEPTANCE: {"accept_len_hist": [1, 1, 2],
                                            "acceptance_rate_pos": [0.75, 0.5]}}


def test_a_run_without_drafts_logs_no_acceptance_by_position():
    entry = logged(DecodeConfig(schedule="ar"), [{"index": 0, "accept_lengths": []}])
    assert entry.series == {} and entry.documents == {}


def test_runs_are_tagged_with_the_plugins_work_and_the_measured_servers_arguments():
    args = {"model": "m", "enable_prefix_caching": False}
    results = [{"engine_report": {"patched": ["qwen3_dflash.DFlashQwen3Model"], "drafter": "DSparkProposer",
                                  "engine_args": args}},
               {"engine_report": {"patched": ["qwen3_dflash.DFlashQwen3Model"], "engine_args": None}}, {}]
    assert engine_tags(results) == {
        "specsweep.vllm_workaround": "rms_norm per layer: qwen3_dflash.DFlashQwen3Model",
        "specsweep.vllm_v1_port": "DSparkProposer",
        "specsweep.vllm_args": '{"enable_prefix_caching": false, "model": "m"}'}
    assert engine_tags([{"engine_report": {"patched": []}}]) == {}
