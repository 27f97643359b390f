import pytest

from orchestrator.analysis.metrics import percentile
from orchestrator.bench.serving import load_metrics, table
from workloads.serving.load import Served


def test_percentile_interpolates_between_order_statistics():
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert percentile([1.0, 2.0], 0.99) == pytest.approx(1.99)
    assert percentile([7.0], 0.9) == 7.0


def test_load_metrics_follow_their_formulas():
    served = [Served([1, 2, 3, 4, 5], "", ttft_s=0.1, wall_s=0.5, finish_reason="stop"),
              Served([1], "", ttft_s=0.2, wall_s=0.2, finish_reason="length")]
    m = load_metrics(served, wall=0.6)
    assert m["throughput_tps"] == pytest.approx(6 / 0.6)
    assert m["request_tps"] == pytest.approx((5 / 0.5 + 1 / 0.2) / 2)
    assert m["ttft_s"] == pytest.approx(0.15) and m["tpot_s"] == pytest.approx(0.4 / 4)
    assert m["latency_p50_s"] == pytest.approx(0.35) and m["latency_s"] == pytest.approx(0.35)


def test_table_shows_the_best_setting_per_concurrency():
    rows = [{"engine": "vllm", "method": "dflash", "num_speculative_tokens": n, "concurrency": 4,
             "throughput_tps": tps, "throughput_ratio": tps / 100, "ttft_s": 0.01, "tpot_s": 0.002,
             "latency_p50_s": 0.1, "latency_p99_s": 0.2, "start_s": 30.0}
            for n, tps in ((3, 150.0), (7, 120.0))]
    rows.append({"engine": "specsweep", "method": "dflash", "num_speculative_tokens": 7, "concurrency": 4,
                 "throughput_tps": 500.0, "throughput_ratio": 1.8})
    lines = table(rows)
    assert "dflash n=3" in lines[1] and "1.50x" in lines[1]
    assert lines[2].startswith("specsweep") and "1.80x" in lines[2] and lines[2].rstrip().endswith("-")
