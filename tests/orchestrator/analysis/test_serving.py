"""Serving-engine settings of exported configurations of served drafters."""

from orchestrator.analysis.serving import cpu_port_note, drafter_serving, drafts_schedule
from workloads.decoding.kinds import DFLASH, DRAFT_MODEL, DSPARK, EAGLE3
from workloads.models.pairspec import refs

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


def test_each_family_maps_onto_its_own_vllm_method_and_sglang_algorithm():
    eagle3 = drafter_serving(EAGLE3, "e", {**BASE, "block": 3})
    assert eagle3["vllm"]["speculative_config"] == {"method": "eagle3", "model": "e",
                                                    "num_speculative_tokens": 3}
    assert eagle3["sglang"] == ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "e",
                                "--speculative-num-draft-tokens", "4", "--speculative-num-steps", "3",
                                "--speculative-eagle-topk", "1"]
    assert drafter_serving(DRAFT_MODEL, "m", {**BASE, "block": 5})["sglang"][1] == "STANDALONE"
    dspark = drafter_serving(DSPARK, "s", {**BASE, "block": 7})
    assert dspark["sglang"][-2:] == ["--speculative-dspark-block-size", "7"]
    narrowed = drafter_serving(DSPARK, "s", {**BASE, "block": 7, "draft_top_k": 2})
    # SGLang's DSPARK has no draft top-k: vLLM's setting alone
    assert narrowed == {"vllm": {"speculative_config": {"method": "dspark", "model": "s",
                                                        "num_speculative_tokens": 7, "dspark_draft_topk": 2}},
                        "sglang_note": "SGLang's DSPARK has no draft top-k"}


def test_a_dflash2_slot_narrowed_by_a_draft_top_k_has_no_engine_setting():
    drafter = refs("toy-dflash2")["drafter"]
    narrowed = drafter_serving(DFLASH, drafter, {**BASE, "block": 8, "draft_top_k": 2})
    assert narrowed["specsweep_only"] == ["draft_top_k 2 (DFlash 2's candidates a slot: its checkpoint's "
                                          "selector_top_k in vLLM)"]
    served = drafter_serving(DFLASH, drafter, {**BASE, "block": 8})
    assert served["vllm"]["speculative_config"]["method"] == "dflash" and served["sglang"][1] == "DFLASH"


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


def test_dspark_and_dflash2_exports_say_vllms_cpu_build_needs_the_plugin():
    dflash2 = refs("toy-dflash2")["drafter"]
    assert "DSpark only with the project's vLLM plugin" in cpu_port_note({"method": "dspark", "model": "s"})
    assert "DFlash 2 only with" in cpu_port_note({"method": "dflash", "model": dflash2})
    assert cpu_port_note({"method": "dflash", "model": refs("toy-dflash")["drafter"]}) is None
    assert cpu_port_note(None) is None and cpu_port_note({"method": "eagle3", "model": "e"}) is None
