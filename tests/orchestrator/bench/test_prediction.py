"""bench predict's tables: each drafting trial against its prediction, then a research
configuration's predicted vLLM speed per concurrency."""

from orchestrator.bench.prediction import predictions, validation_table
from tests.orchestrator.analysis.test_prediction import COSTS, _trials
from workloads.decoding.kinds import DFLASH, TWO_MODEL


def test_the_validation_table_shows_every_trial_left_out_and_the_largest_error():
    lines = validation_table(_trials(), "dflash")
    assert len(lines) == 1 + 8 + 2
    assert lines[1].split()[:2] == ["1", "1"] and lines[1].endswith("+0.0%")
    assert lines[-1].startswith("concurrency 16: largest error 0.0% over 4 trials left out")


def test_a_research_configuration_is_predicted_at_every_calibrated_concurrency():
    config = {"schedule": "linear", "block": 8, "steps": 2, "threshold": None, "rule": "lossless"}
    metrics = {"mean_accept_len": 3.0, "tokens_per_nfe": 1.5}
    rows = [{"trial": 5, "pair": "d", "config": config, "metrics": metrics},
            {"trial": 6, "pair": "t", "config": config, "metrics": metrics}]
    lines = predictions(_trials(), "dflash", rows, {"d": DFLASH, "t": TWO_MODEL})
    assert len(lines) == 1  # the two-model pair's drafter is not vLLM's dflash
    assert lines[0].startswith("trial 5 (steps 2; W=7, ᾱ=3.00, p=2.00): predicted c=1 ")
    assert f"({COSTS[16].ratio(3.0, 7, 2):.2f}x)" in lines[0]
