"""Which records an export is verified on, and what it cannot be verified for."""

import pytest

from orchestrator.analysis.verify import ExportError, _by_load, first_records, read_export, serving_config
from workloads.serving.config import ServingError
from workloads.serving.conformance import Decoded

DFLASH = {"pair": "toy-dflash", "config": {"schedule": "linear", "block": 8, "steps": 1, "temperature": 0.0,
                                           "max_new_tokens": 48, "stop": ["\n"]},
          "serving": {"vllm": {"speculative_config": {"method": "dflash", "model": "d",
                                                      "num_speculative_tokens": 7}}}}


def test_the_records_verified_are_the_first_n_and_the_rest_of_the_last_ones_load():
    records = [{"index": i, "batch": i - i % 4} for i in (5, 0, 3, 1, 2, 4, 6, 7)]
    assert [r["index"] for r in first_records(records, 2)] == [0, 1]
    assert [r["index"] for r in first_records(records, 2, whole_loads=True)] == [0, 1, 2, 3]
    assert [r["index"] for r in first_records(records, 5, whole_loads=True)] == [0, 1, 2, 3, 4, 5, 6, 7]


def test_a_load_counted_as_one_is_compared_as_one():
    records = [{"index": i, "batch": i - i % 2} for i in range(4)]
    decoded = [Decoded((i,), 1, 7, i) for i in range(4)]
    loads, labels = _by_load(decoded, records)
    assert labels == ["prompts 0-1", "prompts 2-3"]
    assert loads == [Decoded((0, 1), 2, 14, 1), Decoded((2, 3), 2, 14, 5)]


def test_an_export_is_verified_as_it_was_measured():
    config = serving_config(DFLASH)
    assert (config.method, config.num_speculative_tokens, config.max_new_tokens, config.stop) == (
        "dflash", 7, 48, ("\n",))


def test_an_export_without_a_vllm_setting_or_sampled_says_why_in_one_line():
    only = {**DFLASH, "serving": {"specsweep_only": ["steps 2"]}}
    with pytest.raises(ServingError, match=r"^verify: this export has no vLLM speculative_config \(steps 2"):
        serving_config(only)
    sampled = {**DFLASH, "config": {**DFLASH["config"], "temperature": 0.7}}
    with pytest.raises(ServingError, match="measured at temperature 0.7"):
        serving_config(sampled)


@pytest.mark.parametrize("drafts", [0, -3, "seven", None])
def test_an_export_edited_to_a_malformed_vllm_setting_is_bad_input_naming_the_field(drafts):
    speculative = {**DFLASH["serving"]["vllm"]["speculative_config"], "num_speculative_tokens": drafts}
    edited = {**DFLASH, "serving": {"vllm": {"speculative_config": speculative}}}
    with pytest.raises(ExportError, match=r"^export: serving.vllm.speculative_config: num_speculative"):
        serving_config(edited)


def test_an_export_holding_a_python_object_is_refused_by_the_safe_loader_in_one_line(tmp_path):
    path = tmp_path / "trial0.yaml"
    path.write_text("pair: !!python/object/apply:os.system ['echo owned']\n")
    with pytest.raises(ValueError) as err:
        read_export(path)
    assert str(err.value).startswith(f"export: {path} is not valid YAML (could not determine a constructor")
    assert "\n" not in str(err.value)
