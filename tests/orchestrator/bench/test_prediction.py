"""bench predict's tables: each drafting trial against its prediction, then a research
configuration's predicted vLLM speed per concurrency."""

from orchestrator.analysis.prediction import Predictor
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
    lines = predictions(Predictor(_trials(), "serving"), "dflash", rows, {"d": DFLASH, "t": TWO_MODEL})
    assert len(lines) == 1  # the two-model pair's drafter is not vLLM's dflash
    assert lines[0].startswith("trial 5 (steps 2; W=7, ᾱ=3.00, p=2.00): predicted c=1 ")
    assert f"({COSTS[16].ratio(3.0, 7, 2):.2f}x)" in lines[0]


def test_the_frontier_table_shows_predicted_vllm_cells_with_the_models_error():
    from types import SimpleNamespace

    from rich.console import Console

    from orchestrator.commands.sweep import _table

    config = {"schedule": "linear", "block": 8, "steps": 2, "threshold": None, "rule": "lossless",
              "leniency": 0.0}
    metrics = {"mean_accept_len": 3.0, "tokens_per_nfe": 1.5}
    noisy = _trials()
    noisy[3]["throughput_ratio"] *= 1.2  # c=1 K=5 read 20% fast: the model errs there
    predicted = Predictor(noisy, "serving").of(DFLASH, config, metrics)
    rows = [{"trial": 5, "pair": "d", "config": config, "metrics": metrics, "exact": True,
             "objectives": {"throughput_tps": 100.0, "accuracy": 1.0}, "predicted_vllm": predicted},
            {"trial": 6, "pair": "d", "config": {**config, "schedule": "ar"}, "metrics": {}, "exact": True,
             "objectives": {"throughput_tps": 50.0, "accuracy": 1.0}}]
    console = Console(width=250, record=True)
    console.print(_table("t", SimpleNamespace(objectives={"throughput_tps": "max", "accuracy": "max"}), rows))
    text = console.export_text()
    assert "vLLM c=1" in text and "vLLM c=16" in text  # predicted ratio ± the model's error
    assert predicted[1]["validation_error"] > 0.1 and predicted[16]["validation_error"] == 0
    assert f"{predicted[1]['throughput_ratio']:.2f}x ±{predicted[1]['validation_error']:.0%}" in text
    assert f"{predicted[16]['throughput_ratio']:.2f}x ±0%" in text
    ar_row = next(line for line in text.splitlines() if line.split()[:1] == ["6"])
    assert ar_row.split()[-2:] == ["-", "-"]  # the ar row: nothing predicted
