"""The vLLM speed model: calibration recovers the costs a load was made of, and a trial left
out is predicted from the others."""

import pytest

from orchestrator.analysis.prediction import IterationCosts, calibrate, drafter_passes, drafting, validate
from workloads.decoding.kinds import DFLASH

COSTS = {1: IterationCosts(1, 0.03, 0.5, 170.0), 16: IterationCosts(16, 0.4, 0.3, 1400.0)}
ALPHA = {1: 0.8, 3: 2.3, 5: 3.9, 7: 4.6}


def _trials():
    trials = []
    for c, cost in COSTS.items():
        trials.append({"method": "none", "num_speculative_tokens": 0, "concurrency": c,
                       "mean_accept_len": 0.0, "throughput_tps": cost.none_tps, "throughput_ratio": 1.0})
        trials += [{"method": "dflash", "num_speculative_tokens": w, "concurrency": c, "mean_accept_len": a,
                    "throughput_tps": cost.throughput(a, w, 1.0), "throughput_ratio": cost.ratio(a, w, 1.0)}
                   for w, a in ALPHA.items()]
    return trials


def test_the_model_follows_its_formulas():
    cost = COSTS[1]
    assert cost.ratio(4.6, 7, 2.0) == pytest.approx(5.6 / (1 + 7 * 0.03 + 2 * 0.5))
    assert cost.throughput(4.6, 7, 2.0) == pytest.approx(170.0 * cost.ratio(4.6, 7, 2.0))
    assert cost.ratio(0.0, 0, 0.0) == pytest.approx(1.0)
    assert drafter_passes(accept_len=3.0, tokens_per_nfe=4 / 3) == pytest.approx(2.0)  # K = 2: 3 passes
    assert drafter_passes(accept_len=3.0, tokens_per_nfe=5.0) == 0.0  # drafts inside the verify call


def test_calibration_recovers_the_costs_per_concurrency():
    for c, cost in calibrate(_trials(), "dflash").items():
        assert (cost.per_draft, cost.draft_pass, cost.none_tps) == pytest.approx(
            (COSTS[c].per_draft, COSTS[c].draft_pass, COSTS[c].none_tps))


def test_a_trial_left_out_is_predicted_from_the_rest():
    rows = validate(_trials(), "dflash")
    assert len(rows) == 8 and all(abs(r["error"]) < 1e-9 for r in rows)
    noisy = _trials()
    noisy[3]["throughput_ratio"] *= 1.2  # one trial measured 20% fast against its control
    errors = {(r["concurrency"], r["width"]): r["error"] for r in validate(noisy, "dflash")}
    assert errors[1, 5] == pytest.approx(1 / 1.2 - 1)


def test_an_export_vllm_cannot_run_carries_its_predicted_vllm_speed_marked_predicted(tmp_path):
    import yaml

    from orchestrator.analysis.prediction import Predictor, predict_exports

    config = {"schedule": "linear", "block": 8, "steps": 2, "threshold": None, "rule": "lossless"}
    metrics = {"mean_accept_len": 3.0, "tokens_per_nfe": 1.5}
    research = {"serve": "specsweep only (steps 2)", "pair": "toy-dflash", "config": config,
                "metrics": metrics, "serving": {"specsweep_only": ["steps 2"]}}
    servable = {**research, "config": {**config, "steps": 1}, "serving": {"vllm": {"speculative_config": {}}}}
    paths = [tmp_path / "trial1.yaml", tmp_path / "trial2.yaml"]
    for path, document in zip(paths, (research, servable)):
        path.write_text(yaml.safe_dump(document, sort_keys=False))
    said = []
    predict_exports(paths, Predictor(_trials(), "serving"), said.append)
    document = yaml.safe_load(paths[0].read_text())
    written = document["serving"]["predicted_vllm"]
    assert written["predicted"] is True and written["calibrated_on"] == "serving"
    for c, cost in COSTS.items():  # W = 7, K = 2 drafter passes
        cell = written["by_concurrency"][c]
        assert cell["throughput_ratio"] == pytest.approx(cost.ratio(3.0, 7, 2), abs=1e-3)
        assert cell["validation_error"] == 0.0
    assert "predicted_vllm" not in yaml.safe_load(paths[1].read_text())["serving"]
    assert len(said) == 1 and said[0].startswith("trial1.yaml: predicted in vLLM c=1")
    first = paths[0].read_text().splitlines()[0]  # one line, however long
    assert first.startswith("serve: 'specsweep only (steps 2); predicted in vLLM: c=1 ")
    assert first.endswith("%)'")


def test_a_trial_measured_in_vllm_is_not_predicted():
    served = {"engine": "vllm", "method": "dflash", "num_speculative_tokens": 3, "concurrency": 4}
    assert drafting(DFLASH, served, {"mean_accept_len": 2.1, "throughput_ratio": 1.4}) is None
