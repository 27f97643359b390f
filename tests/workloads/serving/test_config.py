import pytest

from workloads.serving.config import ServingConfig, ServingError
from workloads.serving.counters import Counters

METRICS = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 3.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.79e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 21.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 3.0
"""


def test_counters_read_vllm_metrics_under_specsweep_names():
    counters = Counters.parse(METRICS)
    assert counters == Counters(iterations=3, drafted=21, accepted=9, accepted_per_pos=(3, 2))
    assert counters - Counters(1, 7, 4, (1,)) == Counters(2, 14, 5, (2, 2))


def test_speculative_config_per_method():
    assert ServingConfig().speculative_config("d") is None
    assert ServingConfig(method="dflash", num_speculative_tokens=7).speculative_config("d") == {
        "method": "dflash", "num_speculative_tokens": 7, "model": "d"}
    assert "model" not in ServingConfig(method="ngram", num_speculative_tokens=3).speculative_config(None)
    with pytest.raises(ServingError, match="method: draft_model needs a drafter"):
        ServingConfig(method="draft_model", num_speculative_tokens=3).speculative_config(None)


@pytest.mark.parametrize(("settings", "starts"), [
    ({"method": "medusa"}, "method: must be one of none, ngram"),
    ({"method": "dflash"}, "num_speculative_tokens: an integer >= 1 with a method"),
    ({"num_speculative_tokens": 3}, "num_speculative_tokens: .* 0 under method none"),
    ({"temperature": float("nan")}, "temperature: must be a finite number >= 0"),
    ({"concurrency": 0}, "concurrency: must be an integer >= 1"),
    ({"request_rate": 0}, "request_rate: must be a finite number > 0; got 0"),
    ({"request_rate": float("inf")}, "request_rate: must be a finite number > 0"),
    ({"burstiness": -1.0}, "burstiness: must be a finite number > 0; got -1.0"),
    ({"burstiness": None}, "burstiness: must be a finite number > 0; got None"),
])
def test_bad_settings_name_their_field(settings, starts):
    with pytest.raises(ServingError, match=f"^{starts}"):
        ServingConfig(**settings)


def test_a_rate_load_keeps_its_settings_through_a_record_and_its_control():
    config = ServingConfig(method="dflash", num_speculative_tokens=3, concurrency=8, request_rate=4.0,
                           burstiness=0.5)
    assert ServingConfig.from_dict(config.to_dict()) == config
    assert config.unspeculative().request_rate == 4.0 and config.unspeculative().burstiness == 0.5
    assert ServingConfig().one_at_a_time and not ServingConfig(request_rate=1.0).one_at_a_time
