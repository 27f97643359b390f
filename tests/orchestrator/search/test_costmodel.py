import pytest

from orchestrator.search.costmodel import FLOOR, CostModel, fit, per_token, spread, work

THETA = (0.002, 0.0015, 0.00003, 0.0004)  # per prompt, forward pass, row, iteration


def record(nfe: int, rows: int, iterations: int, tokens: int = 40) -> dict:
    return {"nfe": nfe, "rows": rows, "iterations": iterations, "new_tokens": tokens}


def timed_as_modelled(records: list[dict], scale: float = 1.0) -> list[tuple[dict, float]]:
    return [(r, scale * sum(f * t for f, t in zip(work(r), THETA))) for r in records]


CONFIGS = {  # key -> its prompts' work: configurations of unlike shapes
    ("a",): [record(40 + i, 300 + 7 * i, 40 + i) for i in range(8)],
    ("b",): [record(90 + i, 900 + 11 * i, 20 + i) for i in range(8)],
    ("c",): [record(60 + 2 * i, 2000 + 5 * i, 12 + i) for i in range(8)],
    ("d",): [record(30 + i, 200 + 3 * i, 30) for i in range(8)],
}


def test_the_model_recovers_costs_that_follow_it_and_is_credited_with_the_floor():
    model = fit({k: timed_as_modelled(r) for k, r in CONFIGS.items()})
    assert model.theta == pytest.approx(THETA, rel=1e-6)
    assert model.error == FLOOR
    some = CONFIGS[("b",)][0]
    assert model.wall(some) == pytest.approx(timed_as_modelled([some])[0][1])


def test_a_configuration_the_model_misses_raises_its_error_by_leaving_it_out():
    timed = {k: timed_as_modelled(r, 1.6 if k == ("c",) else 1.0) for k, r in CONFIGS.items()}
    assert fit(timed).error > 0.2


def test_one_timed_configuration_gives_no_model():
    assert fit({("a",): timed_as_modelled(CONFIGS[("a",)])}) is None


def test_predictions_are_biased_by_the_error_and_keep_every_count():
    model = CostModel(THETA, 0.1)
    fast, slow = model.predicted(CONFIGS[("a",)], -1.0), model.predicted(CONFIGS[("a",)], 1.0)
    for r, f, s in zip(CONFIGS[("a",)], fast, slow):
        assert f["wall_s"] == pytest.approx(0.9 * model.wall(r))
        assert s["wall_s"] == pytest.approx(1.1 * model.wall(r))
        assert f["batch_wall_s"] == f["wall_s"] and f["nfe"] == r["nfe"]


def test_calibration_configurations_span_the_work_per_token():
    line = {(i,): [record(40 + 10 * i, 400 + 100 * i, 40)] for i in range(10)}
    chosen = spread(line, 3, seed=0)
    assert len(set(chosen)) == 3
    ends = {(0,), (9,)}
    assert ends & set(chosen), "the farthest point from the first drawn is an end of the line"
    assert spread(line, 20, seed=0) == sorted(line)  # no more than there are
    assert list(per_token(line[(1,)])) == [50 / 40, 500 / 40, 1.0]
