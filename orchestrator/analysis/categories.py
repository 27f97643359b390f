"""Metrics per task category, pure: acceptance depends on what is asked (a drafter accepts
more of the arithmetic it was trained on than of prose), so a trial over a task mix reports
each category's figures beside its own (`<metric>.<category>`, e.g. mean_accept_len.code)."""

from __future__ import annotations

import re
from collections import Counter

MAX_CATEGORIES = 12  # categories reported apart; past that the least frequent share OTHER
OTHER = "other"
NAME_CHARS = 40  # of a category's name in metric names


def category_metrics(records: list[dict]) -> dict[str, float]:
    """For each category c of the records that carry one (`category`), over c's prompts:
    mean_accept_len.c = Σaccepted / Σiterations and acceptance_rate.c = Σaccepted / Σdrafted
    (only where every prompt has counters of its own, not a load's shared ones);
    request_tps.c = mean of new_tokens / wall_s (each prompt's speed as its request sees it,
    as serving's request_tps); latency_s.c = mean wall_s; accuracy.c = mean correct over
    scored prompts. A figure without a defined value is left out."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        if r.get("category") is not None:
            groups.setdefault(r["category"], []).append(r)
    own = not any(r.get("shared_counters") for r in records)
    out: dict[str, float] = {}
    for category, rs in groups.items():
        out[f"latency_s.{category}"] = sum(r["wall_s"] for r in rs) / len(rs)
        if all(r["wall_s"] > 0 for r in rs):
            out[f"request_tps.{category}"] = sum(r["new_tokens"] / r["wall_s"] for r in rs) / len(rs)
        iterations = sum(r.get("iterations", 0) for r in rs)
        drafted = sum(r.get("drafted", 0) for r in rs)
        if own and iterations:
            out[f"mean_accept_len.{category}"] = sum(r.get("accepted", 0) for r in rs) / iterations
        if own and drafted:
            out[f"acceptance_rate.{category}"] = sum(r.get("accepted", 0) for r in rs) / drafted
        scored = [r["correct"] for r in rs if r.get("correct") is not None]
        if scored:
            out[f"accuracy.{category}"] = sum(scored) / len(scored)
    return out


def categories(metrics: dict) -> list[str]:
    """The categories a trial's metrics report, in order of first appearance."""
    return list(dict.fromkeys(k.partition(".")[2] for k in metrics if k.startswith("latency_s.")))


def category_names(labels: list[str]) -> dict[str, str]:
    """The name each category label of a task's examples (`labels`, one per example) takes in
    metric names, which MLflow accepts whatever the data said: every character but letters,
    digits, '_' and '-' becomes '_', runs of '_' and leading '_' or '-' are dropped, at most
    NAME_CHARS characters, `category` where nothing is left, and `-2`, `-3`, ... after a name
    another label took first. Past MAX_CATEGORIES distinct labels, the MAX_CATEGORIES − 1 most
    frequent (ties: first seen) keep theirs and the rest share OTHER. A label that is a name
    already keeps it."""
    counts = Counter(labels)
    kept = sorted(counts, key=lambda label: -counts[label])  # stable: ties stay in order of first sight
    if len(kept) > MAX_CATEGORIES:
        kept = kept[:MAX_CATEGORIES - 1]
    names: dict[str, str] = {}
    taken = {OTHER} if len(counts) > MAX_CATEGORIES else set()
    # labels that are names already keep them; the others follow, in order of first sight
    for label in sorted(dict.fromkeys(labels), key=lambda label: _metric_name(label) != label):
        if label not in kept:
            names[label] = OTHER
            continue
        base = _metric_name(label)
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name)
        names[label] = name
    return names


def _metric_name(label: str) -> str:
    """`label` with every character but letters, digits, '_' and '-' as '_', runs of '_' and
    leading '_' or '-' dropped, at most NAME_CHARS characters; `category` where nothing is left."""
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_-]", "_", label)).lstrip("_-")
    return name[:NAME_CHARS] or "category"
