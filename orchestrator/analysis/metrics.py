"""Per-trial metrics from per-prompt records (names as docs/sweeps.md lists them), pure functions.

A record is one decoded prompt: the DecodeResult measurements plus `index` and `correct`;
a prompt decoded in a batch also carries `batch` (its batch's first index), `batch_wall_s`
and `batch_nfe`. Speed is a property of batches: a batch's prompts share its wall time.
"""

from __future__ import annotations

import itertools

import numpy as np

from orchestrator.analysis.categories import category_metrics

NUMBER = r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"  # a bound on a metric: a decimal, exponent allowed
TRIAL_METRICS = (
    "accuracy",
    "latency_s",
    "throughput_tps",
    "tokens_per_nfe",
    "time_per_nfe_s",
    "acceptance_rate",
    "mean_accept_len",
    "overhead_frac",
    "throughput_ratio",
    "latency_ratio",
)

# metrics a decode's counts give, however it was timed: an untimed profile has them exactly
UNTIMED = ("accuracy", "tokens_per_nfe", "acceptance_rate", "mean_accept_len", "prompt_decodes")


# metric -> (numerator, denominator) of per-prompt columns (None: count the prompts). At batch
# size 1, where a batch is its prompt, `trial_metrics` gives Σ numerator / Σ denominator over
# the prompts, so racing compares trials prompt by prompt on the same figures.
PROMPT_SUMS = {
    "accuracy": ("correct", None),
    "latency_s": ("wall_s", None),
    "throughput_tps": ("new_tokens", "batch_wall_s"),
    "tokens_per_nfe": ("new_tokens", "nfe"),
    "time_per_nfe_s": ("batch_wall_s", "batch_nfe"),
    "acceptance_rate": ("accepted", "drafted"),
    "mean_accept_len": ("accepted", "iterations"),
    "overhead_frac": ("overhead_s", "wall_s"),
}
_ALONE = {"batch_wall_s": "wall_s", "batch_nfe": "nfe"}  # a record decoded alone: its batch is itself


def prompt_column(record: dict, name: str) -> float:
    """A record's value of the per-prompt column `name` (0 where it has none)."""
    value = record.get(name, record.get(_ALONE.get(name, name)))
    return float(value or 0.0)


def _sum(records: list[dict], key: str) -> float | None:
    """Σ key over records; None where a record lacks it (a serving engine's records have no
    forward passes or model time)."""
    return float(sum(r[key] for r in records)) if all(key in r for r in records) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def percentile(values: list[float], q: float) -> float:
    """The q-quantile of `values` by linear interpolation between order statistics."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# per-request measurement of each SLO family: a limit on `ttft_p99_s` bounds every request's ttft_s
SLO_FAMILIES = {"ttft": "ttft_s", "tpot": "tpot_s", "latency": "wall_s"}
PERCENTILES = (50, 90, 99)
# metrics that are fractions, in [0, 1]; every metric is >= 0
FRACTIONS = ("accuracy", "acceptance_rate", "overhead_frac", "slo_attainment", "slo_met")


def unmeetable(metric: str, op: str, bound: float) -> bool:
    """Whether no value of `metric` can meet `metric op bound`: a fraction (FRACTIONS) >= a
    bound above 1, or any metric (all >= 0) <= a bound below 0."""
    return (op == ">=" and bound > 1 and metric in FRACTIONS) or (op == "<=" and bound < 0)


SERVING_METRICS = ("ttft_s", "tpot_s", "request_tps", "request_throughput", "request_goodput",
                   "slo_attainment", "slo_met",
                   *(f"{f}_p{q}_s" for f in ("ttft", "tpot", "itl", "latency") for q in PERCENTILES))


def meets(record: dict, slo: dict[str, float]) -> bool:
    """Whether one request meets every SLO limit: for each `<family>_p<q>_s: limit`, its own
    value of the family (ttft_s, tpot_s, or latency wall_s) <= limit; a request of one token
    has no TPOT and meets a TPOT limit (vLLM's goodput rule)."""
    for key, limit in slo.items():
        value = record.get(SLO_FAMILIES[key.split("_p")[0]])
        if value is not None and value > limit:
            return False
    return True


def serving_metrics(records: list[dict], slo: dict[str, float] | None = None) -> dict[str, float]:
    """Of records served by a serving engine (they carry `ttft_s`): ttft_s = mean time to first
    token; tpot_s = mean time per output token after the first, (latency − TTFT) / (tokens −
    1) over requests of two tokens or more; request_tps = mean of tokens / latency;
    ttft_p<q>_s, tpot_p<q>_s, latency_p<q>_s = the q-th percentiles (50, 90, 99) of the requests'
    TTFT, TPOT and end-to-end latency (`wall_s`); itl_p<q>_s = those of every gap between
    streamed chunks, pooled over requests; request_throughput = n / W, W = Σ the loads' wall
    times. With an `slo` ({`<family>_p<q>_s`: limit}): slo_attainment = g / n and
    request_goodput = g / W, g = the requests that meet every limit (`meets`); slo_met = 1
    when every limited percentile of the load is within its limit, else 0."""
    if not records or not all("ttft_s" in r for r in records):
        return {}
    latency = [r["wall_s"] for r in records]
    tpot = [r["tpot_s"] for r in records if r.get("tpot_s") is not None]
    gaps = [g for r in records for g in r.get("itl_s", [])]
    wall = sum(u["wall_s"] for u in batches(records))
    out = {"ttft_s": sum(r["ttft_s"] for r in records) / len(records),
           "request_tps": sum(r["new_tokens"] / r["wall_s"] for r in records) / len(records),
           "request_throughput": len(records) / wall}
    if tpot:
        out["tpot_s"] = sum(tpot) / len(tpot)
    for family, values in (("ttft", [r["ttft_s"] for r in records]), ("tpot", tpot), ("itl", gaps),
                           ("latency", latency)):
        if values:
            out.update({f"{family}_p{q}_s": percentile(values, q / 100) for q in PERCENTILES})
    if slo:
        good = sum(meets(r, slo) for r in records)
        out.update(slo_attainment=good / len(records), request_goodput=good / wall,
                   slo_met=float(all(out.get(key, 0.0) <= limit for key, limit in slo.items())))
    return out


def batches(records: list[dict]) -> list[dict]:
    """One unit per batch, in order of first appearance: `index` (the batch), `new_tokens`
    (Σ over its prompts), `wall_s` (the batch's wall time), `nfe` (its forward passes),
    `prompts`, `correct` (Σ, None when unscored) and `latency_s` (Σ of its prompts' completion
    times). A prompt without `batch` is a batch of its own."""
    units: dict = {}
    for r in records:
        key = r.get("batch", r["index"])
        unit = units.setdefault(key, {"index": key, "new_tokens": 0, "prompts": 0, "correct": 0.0,
                                      "wall_s": r.get("batch_wall_s", r["wall_s"]),
                                      "nfe": r.get("batch_nfe", r.get("nfe", 0)), "latency_s": 0.0})
        unit["new_tokens"] += r["new_tokens"]
        unit["prompts"] += 1
        unit["latency_s"] += r["wall_s"]
        scored = unit["correct"] is not None and r.get("correct") is not None
        unit["correct"] = unit["correct"] + r["correct"] if scored else None
    return list(units.values())


def trial_metrics(records: list[dict], slo: dict[str, float] | None = None) -> dict[str, float]:
    """accuracy = mean correct; latency_s = mean wall_s (a prompt's completion time);
    throughput_tps = Σnew_tokens/Σ batch wall; tokens_per_nfe = Σnew_tokens/Σnfe;
    time_per_nfe_s = Σ batch wall/Σ batch NFE; acceptance_rate = Σaccepted/Σdrafted;
    mean_accept_len = Σaccepted/Σiterations; overhead_frac = Σoverhead_s/Σwall_s. At batch
    size 1 a batch is its prompt. Cost: prompt_decodes = n, decode_s = Σ batch wall. Served
    records add `serving_metrics` (under `slo`), records of a task mix `category_metrics`. A
    metric without a defined value (no drafts, no score) is left out."""
    n = len(records)
    wall = _sum(records, "wall_s")
    units = batches(records)
    batch_wall = _sum(units, "wall_s")
    values = {
        "latency_s": wall / n,
        "throughput_tps": _ratio(_sum(records, "new_tokens"), batch_wall),
        "tokens_per_nfe": _ratio(_sum(records, "new_tokens"), _sum(records, "nfe")),
        "time_per_nfe_s": _ratio(batch_wall, _sum(units, "nfe")),
        "acceptance_rate": _ratio(_sum(records, "accepted"), _sum(records, "drafted")),
        "mean_accept_len": _ratio(_sum(records, "accepted"), _sum(records, "iterations")),
        "overhead_frac": _ratio(_sum(records, "overhead_s"), wall),
        "prompt_decodes": float(n),
        "decode_s": batch_wall,
    }
    if all(r.get("correct") is not None for r in records):
        values["accuracy"] = sum(r["correct"] for r in records) / n
    values.update(serving_metrics(records, slo))
    values.update(category_metrics(records))
    return {k: v for k, v in values.items() if v is not None}


def acceptance_by_position(records: list[dict]) -> dict[str, list]:
    """The accept-length histogram of a trial and its acceptance rate per draft position,
    over every verifying iteration t of every prompt (A_t: a record's `accept_lengths`, the
    draft tokens iteration t accepted; T: those iterations; m = max_t A_t):

        accept_len_hist[j]         = #{t ∈ T : A_t = j},                     j = 0..m
        acceptance_rate_pos[i − 1] = #{t ∈ T : A_t ≥ i} / |T|                i = 1..m

    a position's rate is the share of iterations that accepted draft position i (and so every
    position before it); an iteration that drafted fewer than i tokens counts as not accepting
    it, and positions past m (accepted by no iteration, rate 0) are left out.
    Σ_j j·accept_len_hist[j] = Σaccepted, and Σ_i acceptance_rate_pos = E[A] =
    mean_accept_len when every iteration verifies a draft. {} when no iteration verified one
    (`ar`, `diffusion`, records without `accept_lengths`)."""
    lengths = [a for r in records for a in r.get("accept_lengths", ())]
    if not lengths:
        return {}
    hist = [0] * (max(lengths) + 1)
    for a in lengths:
        hist[a] += 1
    at_least = list(itertools.accumulate(reversed(hist)))[::-1]  # at_least[i] = #{t : A_t ≥ i}
    return {"accept_len_hist": hist, "acceptance_rate_pos": [n / len(lengths) for n in at_least[1:]]}


def paired_bootstrap(trial: list[dict], baseline: list[dict], resamples: int = 2000,
                     seed: int = 0) -> dict[str, float]:
    """95% percentile intervals over batches (prompts at batch size 1), resampling the same
    batches for both: accuracy, throughput_ratio = throughput(trial)/throughput(baseline)
    and latency_ratio = latency(trial)/latency(baseline). Batches are paired by their first
    `index`, so both sides must have decoded at the same batch size. Also the point ratios."""
    base = {u["index"]: u for u in batches(baseline)}
    pairs = [(u, base[u["index"]]) for u in batches(trial) if u["index"] in base]
    if not pairs:
        return {}
    columns = {name: np.array([[a[name] for a, _ in pairs], [b[name] for _, b in pairs]], dtype=float)
               for name in ("new_tokens", "wall_s", "latency_s", "prompts")}
    scored = all(a["correct"] is not None for a, _ in pairs)
    correct = np.array([a["correct"] if scored else 0.0 for a, _ in pairs])
    n = len(pairs)
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    rows = np.vstack([np.arange(n)[None], draws])  # row 0 is the observed sample

    def total(name: str, side: int) -> np.ndarray:
        return columns[name][side][rows].sum(axis=1)

    stats = {"throughput_ratio": (total("new_tokens", 0) / total("wall_s", 0))
             / (total("new_tokens", 1) / total("wall_s", 1)),
             "latency_ratio": (total("latency_s", 0) / total("prompts", 0))
             / (total("latency_s", 1) / total("prompts", 1))}
    if scored:
        stats["accuracy"] = correct[rows].sum(axis=1) / total("prompts", 0)
    result = {k: float(v[0]) for k, v in stats.items() if k != "accuracy"}
    for key, values in stats.items():
        result[f"{key}_lo"], result[f"{key}_hi"] = (float(x) for x in np.percentile(values[1:], [2.5, 97.5]))
    return result


def served_ratios(shards: list[tuple[list[dict], list[dict]]]) -> dict[str, float]:
    """Speed ratios of a trial served by a serving engine against the same engine without
    speculation, at the same concurrency, serving the same prompts right after it (each
    shard's control load):

        throughput_ratio = (Σ_R new_tokens / Σ_shards load wall) / (Σ_C new_tokens / Σ_C wall)

    shards: (records, controls) per shard; a shard's records share its load's `batch_wall_s`
    (under `serving.repeats`, each side's wall is the median of its repeated loads).
    {} when no shard has a control."""
    shards = [(rs, cs) for rs, cs in shards if rs and cs]
    if not shards:
        return {}
    loads = [r for rs, _ in shards for r in rs]
    controls = [c for _, cs in shards for c in cs]
    trial = sum(r["new_tokens"] for r in loads) / sum(rs[0]["batch_wall_s"] for rs, _ in shards)
    control = sum(c["new_tokens"] for c in controls) / sum(c["wall_s"] for c in controls)
    return {"throughput_ratio": trial / control}


def controlled_ratios(shards: list[tuple[list[dict], list[dict]]], baseline: list[dict],
                      resamples: int = 2000, seed: int = 0) -> dict[str, float]:
    """Speed ratios against `ar` timed under the trial's own conditions.

    Shard s decoded trial records R_s and, beside them on the same worker, `ar` controls C_s
    on some of its prompts. The ratios compare the trial with its controls only, never with
    the full baseline, which ran earlier under conditions (load, warm-up, drift) the trial
    did not share; pooled over shards:

        throughput_ratio = (Σ_R new_tokens / Σ_R wall) / (Σ_C new_tokens / Σ_C wall)
        latency_ratio    = (Σ_R wall / |R|) / (Σ_C wall / |C|)
        baseline_slowdown = (Σ_C wall_base / Σ_C new_tokens_base) / (Σ_C wall / Σ_C new_tokens)

    the last on the control prompts only (> 1: the full baseline ran slower than the
    controls). 95% percentile intervals by a two-level bootstrap: shards resampled, then
    prompts and controls within each shard, so between-shard variation is inside them.
    shards: (records, controls) per shard, each row with `index`, `new_tokens`, `wall_s`;
    baseline: the full baseline's records. {} when no shard has a control.
    """
    base = {r["index"]: r for r in baseline}
    shards = [(rs, cs) for rs, cs in shards if rs and cs and all(c["index"] in base for c in cs)]
    if not shards:
        return {}
    rng = np.random.default_rng(seed)

    def sums(rows: list[dict], columns) -> np.ndarray:  # -> (resamples + 1, columns + 1), last: count
        values = np.array([[get(r) for r in rows] for get in columns] + [[1.0] * len(rows)], dtype=float)
        n = len(rows)
        draws = np.vstack([np.arange(n)[None], rng.integers(0, n, size=(resamples, n))])
        return values[:, draws].sum(axis=2).T

    trial_columns = (lambda r: r["new_tokens"], lambda r: r["wall_s"])
    control_columns = (lambda c: c["new_tokens"], lambda c: c["wall_s"],
                       lambda c: base[c["index"]]["new_tokens"], lambda c: base[c["index"]]["wall_s"])
    stats = np.stack([np.hstack([sums(rs, trial_columns), sums(cs, control_columns)])
                      for rs, cs in shards])  # (S, resamples + 1, 8)
    count = len(shards)
    picks = np.vstack([np.arange(count)[None], rng.integers(0, count, size=(resamples, count))])
    total = stats[picks, np.arange(resamples + 1)[:, None]].sum(axis=1)  # (resamples + 1, 8)
    tokens, wall, prompts, c_tokens, c_wall, b_tokens, b_wall, controls = total.T
    values = {"throughput_ratio": (tokens / wall) / (c_tokens / c_wall),
              "latency_ratio": (wall / prompts) / (c_wall / controls)}
    result = {k: float(v[0]) for k, v in values.items()}
    for key, v in values.items():
        result[f"{key}_lo"], result[f"{key}_hi"] = (float(x) for x in np.percentile(v[1:], [2.5, 97.5]))
    result["baseline_slowdown"] = float((b_wall[0] / b_tokens[0]) / (c_wall[0] / c_tokens[0]))
    return result


def control_speed(controls: list[dict]) -> float:
    """ms per new token of a trial's `ar` controls: 1000·Σwall_s / Σnew_tokens."""
    return 1000 * sum(c["wall_s"] for c in controls) / max(1, sum(c["new_tokens"] for c in controls))


OUTLIER = 2.0  # a trial whose controls ran this many times slower or faster than the median


def drift(points: list[tuple[float, int, float]], baseline_ms: float | None = None) -> dict:
    """How `ar` control speed moved over a sweep. points: (time, trial, ms per token) per
    trial. first/last: the earliest and latest trial's speed; drift = last / first; spread:
    (min, max) / median; outliers: trials whose speed is outside [median / OUTLIER,
    median · OUTLIER] (ranked, but flagged); baseline_vs_controls = the full baseline's ms per
    token / the median (> 1: the baseline ran slower than the trials' controls)."""
    if not points:
        return {}
    ordered = sorted(points)
    speeds = np.array([ms for _, _, ms in ordered])
    median = float(np.median(speeds))
    report = {"trials": len(ordered), "first_ms_per_token": float(speeds[0]),
              "last_ms_per_token": float(speeds[-1]), "median_ms_per_token": median,
              "drift": float(speeds[-1] / speeds[0]),
              "spread": [float(speeds.min() / median), float(speeds.max() / median)],
              "outliers": sorted(t for _, t, ms in ordered if not median / OUTLIER <= ms <= median * OUTLIER)}
    if baseline_ms:
        report["baseline_vs_controls"] = baseline_ms / median
    return report


def pareto_front(points: list[tuple[float, ...]], directions: tuple[str, ...]) -> list[int]:
    """Indices of the non-dominated points. a dominates b when a is at least as good in every
    objective (max: ≥, min: ≤) and strictly better in one."""
    signs = [1 if d == "max" else -1 for d in directions]
    scaled = [[s * v for s, v in zip(signs, p)] for p in points]

    def dominates(a, b):
        return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))

    return [i for i, p in enumerate(scaled) if not any(dominates(q, p) for q in scaled)]


def metric_text(name: str, value: float) -> str:
    """A metric as printed, with its unit: a ratio `2.98x`; tokens/s `508.3 tok/s`; requests/s
    `4.2 req/s`; seconds `0.123 s`; an acceptance length `5.1 tokens`; anything else (accuracy,
    rates, fractions) 3 significant digits."""
    if name.startswith("throughput_ratio"):
        return f"{value:.3g}x"
    if name.endswith("_tps"):
        return f"{value:.4g} tok/s"
    if name.startswith(("request_goodput", "request_throughput", "request_rate", "sustained_rate")):
        return f"{value:.3g} req/s"
    if name.endswith("_s"):
        return f"{value:.3g} s"
    if name.startswith("mean_accept_len"):
        return f"{value:.3g} tokens"
    return f"{value:.3g}"


def unsummed(metrics) -> str | None:
    """Why racing cannot compare on `metrics`: the first that is not a sum over prompts, or None."""
    for metric in metrics:
        if metric not in PROMPT_SUMS:
            return f"objective {metric} is not a sum over prompts; race on one of {', '.join(PROMPT_SUMS)}"
    return None
