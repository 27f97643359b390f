"""The engine axis of the space: specsweep's decode configs and vLLM's serving configs."""

import pytest

from orchestrator.engines import engine_of
from orchestrator.spec.space import choose_config, grid
from orchestrator.spec.sweep import SpecError, parse_spec
from workloads.serving.config import ServingConfig

SERVED = {"engine": ["vllm"], "method": ["none", "ngram", "dflash"], "num_speculative_tokens": [3, 7],
          "concurrency": [1, 4]}


def spec(space, pairs=("toy-dflash",), **extra):
    return parse_spec({"name": "s", "pairs": list(pairs), "task": {"name": "arith", "limit": 2},
                       "space": space, "objectives": {"throughput_tps": "max", "accuracy": "max"}, **extra})


def candidates(s):
    return [choose_config(s, lambda name, values, p=p: p[name]) for p in grid(s)]


def test_vllm_trials_are_serving_configs_at_their_concurrency():
    found = candidates(spec(SERVED))
    # none at each concurrency, then ngram and dflash at each K and concurrency
    assert len(found) == 2 + 2 * 2 * 2 == len({(c.config, c.batch_size) for c in found})
    assert all(isinstance(c.config, ServingConfig) and c.batch_size == c.config.concurrency for c in found)
    assert {c.config.num_speculative_tokens for c in found if c.config.method == "none"} == {0}


def test_a_pair_is_served_only_with_methods_its_kind_has():
    both = spec(SERVED, pairs=("toy", "toy-dflash"))  # toy: a diffusion drafter, vLLM has no method for it
    found = candidates(both)
    assert {c.config.method for c in found if c.pair == "toy"} == {"none", "ngram"}
    assert {c.config.method for c in found if c.pair == "toy-dflash"} == {"none", "ngram", "dflash"}
    assert any("method|two-model" in point for point in grid(both))


def test_both_engines_side_by_side():
    found = candidates(spec({"engine": ["specsweep", "vllm"], "steps": [1, 2], "method": ["none"],
                             "concurrency": [1]}))
    assert sorted(c.config.engine for c in found) == ["specsweep", "specsweep", "vllm"]


@pytest.mark.parametrize(("space", "starts"), [
    ({**SERVED, "steps": [1, 2]}, "spec: space.steps: 2 has no vLLM setting"),
    ({**SERVED, "rule": ["linear"], "leniency": [0.5]}, "spec: space.rule: linear has no vLLM setting"),
    ({**SERVED, "schedule": ["packed"]}, "spec: space.schedule: packed has no vLLM setting"),
    ({**SERVED, "engine": ["tgi"]}, "spec: space.engine: 'tgi' is not an engine"),
    ({**SERVED, "method": ["medusa"]}, "spec: space.method: 'medusa' is not a vLLM method"),
    ({"engine": ["vllm"], "method": ["dflash"]}, "spec: space.num_speculative_tokens: needed"),
    ({"steps": [1], "concurrency": [4]}, "spec: space.concurrency: a vLLM setting; add vllm to space.engine"),
    # a method no pair of the sweep can be served with is refused by name, not served as `none`
    ({**SERVED, "method": ["eagle3"]}, "spec: space.method: no pair of this sweep can be served with eagle3 "
                                       "(toy-dflash serves none, ngram, dflash)"),
    ({**SERVED, "method": ["none", "draft_model"]}, "spec: space.method: no pair of this sweep can be served "
                                                    "with draft_model"),
    ({**SERVED, "request_rate": [2, 0]}, "spec: space.request_rate: must be a finite number > 0; got 0"),
    ({**SERVED, "burstiness": ["bursty"]}, "spec: space.burstiness: must be a finite number > 0"),
    ({"steps": [1], "request_rate": [4]}, "spec: space.request_rate: a vLLM setting; add vllm"),
    ({**SERVED, "burstiness": [0.5]}, "spec: space.burstiness: shapes the arrivals of space.request_rate"),
])
def test_what_vllm_has_no_setting_for_is_refused_in_one_line(space, starts):
    with pytest.raises(SpecError) as err:
        spec(space)
    assert str(err.value).startswith(starts) and "\n" not in str(err.value)


def test_request_rates_are_an_axis_of_serving_trials():
    found = candidates(spec({**SERVED, "method": ["dflash"], "request_rate": [2.0, 8], "burstiness": [0.5]}))
    assert {(c.config.request_rate, c.config.concurrency) for c in found} == {
        (r, c) for r in (2.0, 8) for c in (1, 4)}
    assert {c.config.burstiness for c in found} == {0.5}


@pytest.mark.parametrize(("extra", "starts"), [
    ({"serving": {"slo": {"ttft_p99_s": 0.5, "tpot_p95_s": 0.1}}},
     "spec: serving.slo: 'tpot_p95_s' is not an SLO"),
    ({"serving": {"slo": {"ttft_p99_s": -1}}},
     "spec: serving.slo: ttft_p99_s: -1.0 is not a number of seconds"),
    ({"constraints": ["request_goodput >= 2"]}, "spec: request_goodput: counts requests within serving.slo"),
])
def test_slos_are_named_keys_with_positive_limits(extra, starts):
    with pytest.raises(SpecError) as err:
        spec(SERVED, **extra)
    assert str(err.value).startswith(starts) and "\n" not in str(err.value)


def test_serving_metrics_and_slos_need_a_serving_engine():
    with pytest.raises(SpecError, match="^spec: serving.slo: needs a serving engine"):
        spec({"steps": [1, 2]}, serving={"slo": {"ttft_p99_s": 1}})
    with pytest.raises(SpecError, match="^spec: ttft_p99_s: measured by a serving engine only"):
        spec({"steps": [1, 2]}, constraints=["ttft_p99_s <= 1"])
    with pytest.raises(SpecError, match="^spec: request_goodput: .* space.engine lists specsweep"):
        spec({"engine": ["specsweep", "vllm"], "steps": [1], "method": ["none"]},
             serving={"slo": {"ttft_p99_s": 1}}, objectives={"request_goodput": "max", "accuracy": "max"})
    slo = spec(SERVED, serving={"slo": {"ttft_p99_s": 0.5}}, constraints=["tpot_p99_s <= 0.1"])
    assert slo.serving.slo == {"ttft_p99_s": 0.5}


def test_racing_stays_in_specsweeps_engine():
    with pytest.raises(SpecError, match="search.racing: races run in specsweep's engine only"):
        spec(SERVED, search={"racing": {}})


def test_tables_read_both_engines():
    served = ServingConfig(method="dflash", num_speculative_tokens=7).to_dict()
    assert engine_of(served).columns(served) == {"schedule": "vllm dflash", "block": "-", "effort": "n=7",
                                                 "rule": "lossless", "leniency": 0}
    decoded = {"schedule": "linear", "block": 4, "steps": 2, "rule": "linear", "leniency": 0.5}
    assert engine_of(decoded).columns(decoded) == {
        "schedule": "linear", "block": 4, "effort": "K=2", "rule": "linear", "leniency": 0.5}
