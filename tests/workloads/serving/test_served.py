"""An export's `vllm serve --config` options held to the arguments a served engine logs."""

from workloads.serving.served import differences, logged_args, option_args
from workloads.serving.vllm import EngineSettings

LOG = """(APIServer pid=1) INFO 12-06 04:02:39 [api_utils.py:286] vLLM API server version 0.32.0
(APIServer pid=1) INFO 12-06 04:02:39 [api_utils.py:286] non-default args: {'host': '127.0.0.1', \
'port': 37111, 'model': '/m/verifier', 'dtype': 'float32', 'enforce_eager': True, \
'speculative_config': {'method': 'dflash', 'num_speculative_tokens': 7, 'model': '/m/dflash'}}
"""


def test_a_false_boolean_is_written_in_the_form_vllm_serve_config_reads():
    options = EngineSettings("/m/verifier", None).options()
    assert options["no-enable-prefix-caching"] is True and "enable-prefix-caching" not in options
    assert "--no-enable-prefix-caching" in EngineSettings("/m/verifier", None).arguments()
    assert option_args(options) == {"model": "/m/verifier", "dtype": "float32", "enforce_eager": True,
                                    "enable_prefix_caching": False}


def test_an_option_the_served_engine_dropped_is_named():
    served = logged_args(LOG)
    speculative = {"method": "dflash", "num_speculative_tokens": 7, "model": "/m/dflash"}
    assert served == {"model": "/m/verifier", "dtype": "float32", "enforce_eager": True,
                      "speculative_config": speculative}
    wanted = option_args({"model": "/m/verifier", "dtype": "float32", "enforce-eager": True,
                          "no-enable-prefix-caching": True, "speculative-config": speculative})
    assert differences(wanted, served) == ["enable_prefix_caching: wanted False, served vLLM's default"]
    assert differences(wanted, {**served, "enable_prefix_caching": False}) == []
    found = differences({"dtype": "float32"}, {"dtype": "bfloat16"})
    assert found == ["dtype: wanted 'float32', served 'bfloat16'"]


def test_a_log_without_arguments_reads_as_unknown():
    assert logged_args("no such line") is None
    assert logged_args("non-default args: {'a': <object at 0x1>}") is None
