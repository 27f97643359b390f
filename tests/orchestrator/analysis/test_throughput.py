import pytest

from orchestrator.analysis.throughput import (
    Calibration,
    acceptance,
    fit_line,
    parse_numbers,
    predict,
    quality,
    throughput,
)

PAPER_D_K = (0.566, 0.517, 0.424, 0.360)  # Dream-7B / Qwen2.5-32B, Appendix F.4


def test_equation_6_with_the_papers_figures():
    assert [round(acceptance(d, 0.0), 3) for d in PAPER_D_K] == [0.434, 0.483, 0.576, 0.640]
    assert acceptance(0.566, 1.0) == 1.0 and quality(0.566, 0.0) == 1.0
    assert quality(0.424, 0.5) == pytest.approx(1 - 0.212)


def test_equation_7_is_a_geometric_sum_over_the_round_cost():
    alpha, block, cd, cv = 0.6, 512, 0.02, 0.05
    assert throughput(alpha, block, cd, cv) == pytest.approx(
        (1 - alpha ** (block + 1)) / (1 - alpha) / (cd + cv)
    )
    assert throughput(1.0, 4, 1.0, 1.0) == 2.5


def test_predict_rows_for_every_k_and_lambda():
    cal = Calibration(PAPER_D_K, 0.01, 0.005, 0.04)
    rows = predict(cal, 512, [0.0, 0.5, 1.0])
    assert len(rows) == 12 and rows[0] == {
        "steps": 1,
        "leniency": 0.0,
        "acceptance": pytest.approx(0.434),
        "quality": 1.0,
        "throughput": pytest.approx(throughput(0.434, 512, 0.015, 0.04)),
    }
    assert {r["steps"] for r in rows} == {1, 2, 3, 4}


def test_fit_and_parse():
    assert fit_line([1, 2, 3, 4], [3, 5, 7, 9]) == pytest.approx((1.0, 2.0))
    assert parse_numbers("0,0.1,...,1", "--leniency") == [round(0.1 * i, 10) for i in range(11)]
    assert parse_numbers("1,2,4", "--steps") == [1.0, 2.0, 4.0]
    with pytest.raises(ValueError, match="--leniency"):
        parse_numbers("a,b", "--leniency")
