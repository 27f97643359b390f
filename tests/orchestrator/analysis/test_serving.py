"""Serving-engine settings of exported DFlash configurations."""

from orchestrator.analysis.serving import drafter_serving, drafts_schedule
from workloads.decoding.kinds import DFLASH

BASE = {"schedule": "linear", "block": 16, "steps": 1, "threshold": None, "rule": "lossless", "leniency": 0.0}


def test_a_one_pass_lossless_linear_config_maps_onto_vllm_and_sglang():
    serving = drafter_serving(DFLASH, "z-lab/Qwen3-8B-DFlash-b16", BASE)
    expected = {"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 15}
    assert serving["vllm"] == {"speculative_config": expected}
    assert serving["sglang"][:2] == ["--speculative-algorithm", "DFLASH"]
    assert "z-lab/Qwen3-8B-DFlash-b16" in serving["sglang"]


def test_settings_no_engine_has_are_named_instead_of_mapped():
    config = {**BASE, "schedule": "packed", "steps": 2, "rule": "linear", "leniency": 0.5}
    serving = drafter_serving(DFLASH, "d", config)
    assert "vllm" not in serving and "sglang" not in serving
    assert serving["specsweep_only"] == ["schedule packed", "steps 2", "rule linear (leniency 0.5)"]
    tau = drafter_serving(DFLASH, "d", {**BASE, "steps": None, "threshold": 0.9})
    assert tau["specsweep_only"] == ["threshold 0.9"]


def _served(n):
    return {"vllm": {"speculative_config": None if n == 0 else {"method": "dflash", "model": "d",
                                                                  "num_speculative_tokens": n}}}


def test_a_drafts_schedule_covers_every_batch_size_from_one_with_the_n_chosen_at_or_below_it():
    schedule = drafts_schedule({1: _served(7), 4: _served(0), 16: _served(3)})
    assert schedule == {"method": "dflash", "model": "d", "num_speculative_tokens": 7,
                        "num_speculative_tokens_per_batch_size": [[1, 1, 7], [2, 4, 0], [5, 16, 3]]}


def test_no_drafts_schedule_for_one_n_another_method_or_a_size_no_engine_serves():
    assert drafts_schedule({1: _served(7), 4: _served(7)}) is None
    other = {"vllm": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}}
    assert drafts_schedule({1: _served(7), 4: other}) is None
    assert drafts_schedule({1: _served(7), 4: {"specsweep_only": ["steps 2"]}}) is None
    assert drafts_schedule({1: _served(0), 4: _served(0)}) is None
