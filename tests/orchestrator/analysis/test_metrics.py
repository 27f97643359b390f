import itertools
import random

import pytest

from orchestrator.analysis.metrics import (
    PROMPT_SUMS,
    acceptance_by_position,
    controlled_ratios,
    drift,
    paired_bootstrap,
    pareto_front,
    trial_metrics,
)


def record(i, wall, tokens, correct=1.0, **kw):
    base = dict(
        index=i,
        wall_s=wall,
        new_tokens=tokens,
        nfe=tokens,
        overhead_s=0.1 * wall,
        accepted=2,
        drafted=4,
        iterations=2,
        correct=correct,
    )
    return base | kw


def test_per_prompt_sums_give_the_trial_metrics_at_batch_size_one():
    """Racing's per-prompt figures are the trial metrics': a record decoded as its own batch
    (batch_wall_s a little above its completion time) and one without batch columns."""
    from orchestrator.search.racing import value

    rs = [record(0, 1.0, 10, batch=0, batch_wall_s=1.02, batch_nfe=12, nfe=12),
          record(1, 3.0, 30, 0.0, nfe=10), record(2, 0.5, 7, 0.5, batch=2, batch_wall_s=0.51, batch_nfe=7)]
    m = trial_metrics(rs)
    for metric in PROMPT_SUMS:
        assert value(rs, metric) == pytest.approx(m[metric]), metric


def test_trial_metrics_follow_their_formulas():
    rs = [record(0, 1.0, 10, 1.0), record(1, 3.0, 30, 0.0, nfe=10)]
    m = trial_metrics(rs)
    assert m["accuracy"] == 0.5 and m["latency_s"] == 2.0 and m["throughput_tps"] == 10.0
    assert m["tokens_per_nfe"] == 40 / 20 and m["time_per_nfe_s"] == 4 / 20
    assert m["acceptance_rate"] == 0.5 and m["mean_accept_len"] == 1.0
    assert m["overhead_frac"] == pytest.approx(0.1)
    assert "accuracy" not in trial_metrics([record(0, 1, 1, correct=None)])
    assert "acceptance_rate" not in trial_metrics([record(0, 1, 1, drafted=0)])


def brute_force(points, directions):
    def better_eq(a, b, d):
        return a >= b if d == "max" else a <= b

    front = []
    for i, p in enumerate(points):
        dominated = False
        for q in points:
            if all(better_eq(x, y, d) for x, y, d in zip(q, p, directions)) and q != p:
                dominated = True
        if not dominated:
            front.append(i)
    return front


@pytest.mark.parametrize(
    "directions", list(itertools.product(("max", "min"), repeat=3))[:4] + [("max", "min")]
)
def test_pareto_front_matches_brute_force(directions):
    rng = random.Random(len(directions))
    for _ in range(50):
        points = [tuple(rng.choice([0, 1, 2, 3]) for _ in directions) for _ in range(12)]
        assert pareto_front(points, directions) == brute_force(points, directions)


def test_paired_bootstrap_brackets_the_point_ratio():
    base = [record(i, 1.0, 10) for i in range(20)]
    trial = [record(i, 0.5 + 0.05 * (i % 3), 10, correct=float(i % 4 != 0)) for i in range(20)]
    b = paired_bootstrap(trial, base, resamples=500)
    assert b["throughput_ratio_lo"] <= b["throughput_ratio"] <= b["throughput_ratio_hi"]
    assert 1.6 < b["throughput_ratio"] < 2.0 and b["latency_ratio"] == pytest.approx(
        1 / b["throughput_ratio"]
    )
    assert b["accuracy_lo"] <= 0.75 <= b["accuracy_hi"]


def test_bootstrap_intervals_cover_the_truth_at_about_the_nominal_rate():
    """Synthetic trials: correct ~ Bernoulli(0.7), walls ~ lognormal with a known mean ratio
    2 against the baseline. The 95% intervals should cover the truth ~95% of the time."""
    rng = random.Random(11)
    covered_acc = covered_ratio = 0
    runs = 200
    for run in range(runs):
        base, trial = [], []
        for i in range(60):
            wall = rng.lognormvariate(0, 0.3)
            base.append(record(i, wall, 20))
            trial.append(record(i, wall * rng.lognormvariate(-0.693 - 0.02, 0.2), 20,
                                correct=float(rng.random() < 0.7)))
        b = paired_bootstrap(trial, base, resamples=1000, seed=run)
        covered_acc += b["accuracy_lo"] <= 0.7 <= b["accuracy_hi"]
        covered_ratio += b["throughput_ratio_lo"] <= 2.0 <= b["throughput_ratio_hi"]
    assert 0.88 <= covered_acc / runs <= 0.99
    assert 0.85 <= covered_ratio / runs <= 0.99


# -- speed ratios against controls timed beside the trial ------------------------------------

def timed(indices, tokens, walls):
    return [{"index": i, "new_tokens": t, "wall_s": w} for i, t, w in zip(indices, tokens, walls)]


def test_controlled_ratio_ignores_a_baseline_timed_under_other_conditions():
    """The full baseline ran 3x slower than `ar` runs beside the trial; the ratio compares the
    trial with its controls, timed beside it, and only reports the baseline's slowdown."""
    ids = list(range(6))
    ar_now = [1.0, 2.0, 1.5, 1.0, 2.5, 2.0]  # ar beside the trial, 10 tokens per prompt
    trial = timed(ids, [10] * 6, [w / 1.7 for w in ar_now])
    baseline = timed(ids, [10] * 6, [3 * w for w in ar_now])
    controls = timed([0, 3, 5], [10] * 3, [ar_now[i] for i in (0, 3, 5)])
    out = controlled_ratios([(trial, controls)], baseline, resamples=200)
    # trial: 60 tokens in 10/1.7 s; controls: 30 tokens in 4 s
    assert out["throughput_ratio"] == pytest.approx((60 / (10 / 1.7)) / (30 / 4))
    assert out["latency_ratio"] == pytest.approx(((10 / 1.7) / 6) / (4 / 3))
    assert out["baseline_slowdown"] == pytest.approx(3.0)
    assert out["throughput_ratio_lo"] <= out["throughput_ratio"] <= out["throughput_ratio_hi"]
    assert paired_bootstrap(trial, baseline)["throughput_ratio"] == pytest.approx(5.1)  # the naive ratio


def test_each_shard_compares_with_controls_from_its_own_worker():
    """Shard 2 ran on a worker twice as slow as shard 1's, trial and controls alike; both run
    at 2x `ar`, and so does the pooled ratio."""
    baseline = timed(range(4), [8] * 4, [1.0] * 4)
    shard1 = (timed([0, 1], [8, 8], [0.5, 0.5]), timed([0], [8], [1.0]))
    shard2 = (timed([2, 3], [8, 8], [1.0, 1.0]), timed([3], [8], [2.0]))
    out = controlled_ratios([shard1, shard2], baseline, resamples=200)
    assert out["throughput_ratio"] == pytest.approx((32 / 3.0) / (16 / 3.0))  # 2
    assert out["baseline_slowdown"] == pytest.approx(1 / 1.5)  # the baseline ran at shard 1's speed


def test_interval_covers_the_variation_between_shards():
    baseline = timed(range(8), [8] * 8, [1.0] * 8)
    fast = (timed(range(4), [8] * 4, [0.5] * 4), timed([0], [8], [1.0]))  # 2x here
    slow = (timed(range(4, 8), [8] * 4, [0.8] * 4), timed([4], [8], [1.0]))  # 1.25x there
    out = controlled_ratios([fast, slow], baseline, resamples=2000)
    assert out["throughput_ratio"] == pytest.approx(64 / 5.2 / 8)
    assert out["throughput_ratio_lo"] == pytest.approx(1.25)  # both shards drawn from the slow one
    assert out["throughput_ratio_hi"] == pytest.approx(2.0)


def test_no_controls_no_controlled_ratio():
    rows = timed(range(3), [5] * 3, [1.0] * 3)
    assert controlled_ratios([(rows, [])], rows) == {}


def test_drift_reports_first_last_spread_and_outliers():
    points = [(3.0, 2, 1.2), (1.0, 0, 1.0), (2.0, 1, 1.1), (4.0, 3, 5.0), (5.0, 4, 1.0)]
    report = drift(points, baseline_ms=3.3)
    assert report["first_ms_per_token"] == 1.0 and report["last_ms_per_token"] == 1.0
    assert report["drift"] == 1.0 and report["median_ms_per_token"] == pytest.approx(1.1)
    assert report["spread"] == pytest.approx([1.0 / 1.1, 5.0 / 1.1])
    assert report["outliers"] == [3]
    assert report["baseline_vs_controls"] == pytest.approx(3.0)
    assert drift([]) == {}


def test_batched_records_take_their_speed_from_the_batch():
    """Two batches of two: throughput = Σ new tokens / Σ batch wall; latency the mean
    completion time; cost counts prompts and batch time; the paired bootstrap resamples
    batches, so a baseline at the same batches gives ratio 1."""
    rs = [{**record(i, w, 10, 1.0), "batch": 2 * (i // 2), "batch_wall_s": bw, "batch_nfe": 5}
          for i, (w, bw) in enumerate([(1.0, 2.0), (2.0, 2.0), (1.0, 3.0), (3.0, 3.0)])]
    m = trial_metrics(rs)
    assert m["throughput_tps"] == 40 / 5 and m["latency_s"] == 7 / 4 and m["time_per_nfe_s"] == 5 / 10
    assert m["prompt_decodes"] == 4 and m["decode_s"] == 5
    assert paired_bootstrap(rs, rs)["throughput_ratio"] == pytest.approx(1.0)


def drafting(i, lengths):
    """A prompt's record whose iterations accepted `lengths` draft tokens (block 4)."""
    return record(i, 1.0, 10, accept_lengths=lengths, accepted=sum(lengths), drafted=4 * len(lengths),
                  iterations=len(lengths))


def test_accept_len_hist_counts_the_iterations_of_every_prompt_by_tokens_accepted():
    rs = [drafting(0, [0, 2, 2]), drafting(1, [4, 2])]
    assert acceptance_by_position(rs)["accept_len_hist"] == [1, 0, 3, 0, 1]


def test_acceptance_rate_pos_is_the_share_of_iterations_accepting_each_position():
    rs = [drafting(0, [0, 2, 2]), drafting(1, [4, 2])]  # A >= 1, 2: 4 of 5; A >= 3, 4: 1 of 5
    assert acceptance_by_position(rs)["acceptance_rate_pos"] == [0.8, 0.8, 0.2, 0.2]


def test_acceptance_by_position_agrees_with_the_trial_metrics():
    """Σ_j j·hist[j] = Σaccepted, Σ_j hist[j] = Σiterations, Σ_i P(A ≥ i) = mean_accept_len."""
    rng = random.Random(3)
    rs = [drafting(i, [rng.randint(0, 6) for _ in range(rng.randint(1, 9))]) for i in range(20)]
    found = acceptance_by_position(rs)
    hist, rates = found["accept_len_hist"], found["acceptance_rate_pos"]
    assert sum(j * n for j, n in enumerate(hist)) == sum(r["accepted"] for r in rs)
    assert sum(hist) == sum(r["iterations"] for r in rs)
    assert sum(rates) == pytest.approx(trial_metrics(rs)["mean_accept_len"])


def test_trials_that_verify_no_draft_have_no_acceptance_by_position():
    assert acceptance_by_position([record(0, 1.0, 10, accept_lengths=[])]) == {}  # ar, diffusion
    assert acceptance_by_position([record(0, 1.0, 10)]) == {}  # a record cached before accept_lengths


def served(i, ttft, wall, tokens, gaps=(), load_wall=2.0):
    """A request of one load (batch 0) served in `load_wall` seconds."""
    return dict(index=i, batch=0, batch_wall_s=load_wall, wall_s=wall, ttft_s=ttft, new_tokens=tokens,
                tpot_s=(wall - ttft) / (tokens - 1) if tokens > 1 else None, itl_s=list(gaps))


def test_serving_percentiles_throughput_and_goodput_follow_their_formulas():
    """Four requests in a 2 s load; an SLO of TTFT 0.3 s and TPOT 0.1 s: request 2 is late to its
    first token, request 3 too slow per token, request 4 has one token (no TPOT, so it meets it)."""
    from orchestrator.analysis.metrics import percentile, serving_metrics

    rs = [served(0, 0.1, 1.0, 11, gaps=(0.4, 0.5)), served(1, 0.5, 1.0, 6, gaps=(0.5,)),
          served(2, 0.2, 1.7, 6, gaps=(1.5,)), served(3, 0.25, 0.25, 1)]
    slo = {"ttft_p99_s": 0.3, "tpot_p90_s": 0.1}
    m = serving_metrics(rs, slo)
    assert m["request_throughput"] == pytest.approx(4 / 2.0)
    assert m["ttft_p50_s"] == pytest.approx(percentile([0.1, 0.5, 0.2, 0.25], 0.5))
    assert m["tpot_p99_s"] == pytest.approx(percentile([0.09, 0.1, 0.3], 0.99))
    assert m["itl_p90_s"] == pytest.approx(percentile([0.4, 0.5, 0.5, 1.5], 0.9))
    assert m["latency_p99_s"] == pytest.approx(percentile([1.0, 1.0, 1.7, 0.25], 0.99))
    assert m["slo_attainment"] == pytest.approx(2 / 4) and m["request_goodput"] == pytest.approx(2 / 2.0)
    assert m["slo_met"] == 0.0  # p99 TTFT 0.49 s > 0.3 s
    assert serving_metrics(rs, {"latency_p99_s": 2.0})["slo_met"] == 1.0
    assert "request_goodput" not in serving_metrics(rs) and trial_metrics(rs, slo)["request_goodput"] == 1.0
