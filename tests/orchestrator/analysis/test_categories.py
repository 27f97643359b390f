import pytest

from orchestrator.analysis.categories import categories, category_metrics
from orchestrator.analysis.metrics import trial_metrics


def record(category, accepted, iterations, drafted, tokens, wall, correct=1.0, **kw):
    return dict(index=0, category=category, accepted=accepted, iterations=iterations, drafted=drafted,
                new_tokens=tokens, wall_s=wall, correct=correct, **kw)


def test_each_category_gets_its_own_acceptance_speed_and_accuracy():
    rs = [record("arithmetic", 12, 3, 21, 16, 0.1), record("arithmetic", 6, 2, 14, 9, 0.1, correct=0.0),
          record("prose", 1, 4, 28, 5, 0.2, correct=None)]
    m = category_metrics(rs)
    assert m["mean_accept_len.arithmetic"] == pytest.approx(18 / 5)
    assert m["acceptance_rate.arithmetic"] == pytest.approx(18 / 35)
    assert m["request_tps.arithmetic"] == pytest.approx((16 / 0.1 + 9 / 0.1) / 2)
    assert m["latency_s.prose"] == pytest.approx(0.2) and m["mean_accept_len.prose"] == pytest.approx(1 / 4)
    assert m["accuracy.arithmetic"] == 0.5 and "accuracy.prose" not in m
    assert categories(m) == ["arithmetic", "prose"]


def test_counters_a_load_shares_give_no_acceptance_per_category():
    """Above one request at a time vLLM's counters are the load's, on its first request."""
    rs = [record("arithmetic", 9, 3, 21, 16, 0.1, shared_counters=True),
          record("prose", 0, 0, 0, 5, 0.2, shared_counters=True)]
    m = category_metrics(rs)
    assert "mean_accept_len.arithmetic" not in m and "acceptance_rate.prose" not in m
    assert m["request_tps.prose"] == pytest.approx(25.0)


def test_records_without_categories_add_nothing_to_the_trial_metrics():
    plain = [{k: v for k, v in record("x", 1, 1, 1, 1, 1.0).items() if k != "category"}]
    assert not [k for k in trial_metrics(plain) if "." in k]


def test_category_labels_from_data_become_names_mlflow_accepts():
    from orchestrator.analysis.categories import category_names

    names = category_names(["math", "../../escape", "a\nb", "a_b", "a b", "", "..", "x" * 300])
    assert names == {"math": "math", "a_b": "a_b", "../../escape": "escape", "a\nb": "a_b-2", "a b": "a_b-3",
                     "": "category", "..": "category-2", "x" * 300: "x" * 40}


def test_past_the_cap_the_least_frequent_categories_share_other():
    from orchestrator.analysis.categories import MAX_CATEGORIES, OTHER, category_names

    labels = [f"c{i}" for i in range(300) for _ in range(300 - i)]  # c0 the most frequent
    names = category_names(labels)
    apart = [label for label, name in names.items() if name != OTHER]
    assert apart == [f"c{i}" for i in range(MAX_CATEGORIES - 1)]
    assert len(set(names.values())) == MAX_CATEGORIES
