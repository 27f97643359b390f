"""What `specsweep bench` prints is formatted by each benchmark from its rows."""

import io

import pytest
from rich.console import Console

from orchestrator.bench import batch, decode, search


def test_a_figure_a_configuration_lacks_shows_as_a_dash():
    row = {"config": "ar", "accuracy": 1.0, "tokens_per_nfe": 1.0, "acceptance_rate": None,
           "mean_accept_len": None, "throughput_ratio": 1.0, "model_ms_per_iter": 2.0,
           "overhead_ms_per_iter": 0.5,
           "exact": True}
    out = io.StringIO()
    Console(file=out, width=160).print(decode.table([row], "toy", 1, 8))
    assert "│ ar     │     1.00 │       1.00 │           - │          - │" in out.getvalue()


def test_search_json_rows_are_the_means_over_seeds_at_each_share():
    rows = search.mean_rows({"grid": [[0.1, 0.2, 0.3], [0.3, 0.4, 0.5]]})
    assert [r["budget"] for r in rows] == [0.1, 0.25, 0.5]
    assert [r["hypervolume_fraction"] for r in rows] == pytest.approx([0.2, 0.3, 0.4])
    assert all(r["strategy"] == "grid" and r["racing"] is False for r in rows)


@pytest.mark.parametrize(("text", "starts"), [("0,1", "--batch-sizes: every batch size must be >= 1"),
                                              ("1,x", "--batch-sizes: whole numbers separated by commas")])
def test_batch_sizes_are_whole_numbers_of_at_least_one(text, starts):
    assert batch.parse_sizes("1,4,16") == [1, 4, 16]
    with pytest.raises(ValueError, match=f"^{starts}"):
        batch.parse_sizes(text)
