"""Serving-engine settings of exported DFlash configurations."""

from orchestrator.analysis.serving import dflash_serving
from workloads.decoding.kinds import DFLASH

BASE = {"schedule": "linear", "block": 16, "steps": 1, "threshold": None, "rule": "lossless", "leniency": 0.0}


def test_a_one_pass_lossless_linear_config_maps_onto_vllm_and_sglang():
    serving = dflash_serving(DFLASH, "z-lab/Qwen3-8B-DFlash-b16", BASE)
    expected = {"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 15}
    assert serving["vllm"] == {"speculative_config": expected}
    assert serving["sglang"][:2] == ["--speculative-algorithm", "DFLASH"]
    assert "z-lab/Qwen3-8B-DFlash-b16" in serving["sglang"]


def test_settings_no_engine_has_are_named_instead_of_mapped():
    config = {**BASE, "schedule": "packed", "steps": 2, "rule": "linear", "leniency": 0.5}
    serving = dflash_serving(DFLASH, "d", config)
    assert "vllm" not in serving and "sglang" not in serving
    assert serving["specsweep_only"] == ["schedule packed", "steps 2", "rule linear (leniency 0.5)"]
    tau = dflash_serving(DFLASH, "d", {**BASE, "steps": None, "threshold": 0.9})
    assert tau["specsweep_only"] == ["threshold 0.9"]
