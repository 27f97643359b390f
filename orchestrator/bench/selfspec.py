"""Schedules side by side on one pair: every schedule at every B decoded over the same prompts
in one process (interleaved), each compared with Linear at the same B."""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table

from orchestrator.analysis.metrics import paired_bootstrap
from orchestrator.bench.decode import cell, config_table, decode_all
from workloads.decoding import DecodeConfig


def compare_schedules(
    pair,
    prompts: list[str],
    blocks: list[int] | tuple[int, ...],
    max_new_tokens: int,
    score: Callable[[int, str], float] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[dict]:
    """One row per configuration (`ar`, then each schedule per B; greedy, lossless): accuracy
    (when scored), tokens/NFE, ms/NFE, rows and accepted tokens per iteration, non-model share
    of wall time, throughput vs `ar`, throughput vs Linear at the same B with a 95% paired
    bootstrap interval over prompts (`vs_linear`: ratio, low, high) and, for packed, the share
    of prompts on which it needed no more NFE than Linear."""
    configs = {"ar": DecodeConfig(schedule="ar", max_new_tokens=max_new_tokens)}
    for block in blocks:
        for schedule in pair.kind.speculative:
            configs[f"{schedule} B={block}"] = DecodeConfig(
                schedule=schedule, block=block, max_new_tokens=max_new_tokens
            )
    totals = decode_all(pair, prompts, configs, score=score, progress=progress)

    def records(label: str) -> list[dict]:
        return [
            {"index": i, "new_tokens": r.new_tokens, "wall_s": r.wall_s}
            for i, r in enumerate(totals[label].results)
        ]

    rows = []
    for label, t in totals.items():
        schedule, _, block = label.partition(" B=")
        row = {
            "config": label,
            "accuracy": t.correct / len(prompts) if score else None,
            "tokens_per_nfe": t.metrics()["tokens_per_nfe"],
            "model_ms_per_nfe": 1000 * t.sum("model_s") / t.sum("nfe"),
            "rows_per_iteration": t.sum("rows") / t.sum("iterations"),
            "mean_accept_len": t.metrics().get("mean_accept_len"),
            "overhead_frac": t.metrics()["overhead_frac"],
            "throughput_ratio": t.throughput / totals["ar"].throughput,
        }
        if block:
            ci = paired_bootstrap(records(label), records(f"linear B={block}"), resamples=20_000)
            row["vs_linear"] = (ci["throughput_ratio"], ci["throughput_ratio_lo"], ci["throughput_ratio_hi"])
        if schedule == "packed":
            linear = totals[f"linear B={block}"].results
            row["packed_nfe_le_linear"] = sum(p.nfe <= q.nfe for p, q in zip(t.results, linear)) / len(
                prompts
            )
        rows.append(row)
    return rows


COLUMNS = ("config", "accuracy", "tokens/NFE", "ms/NFE", "rows/iter", "accept len", "vs linear [95% CI]",
           "vs ar", "overhead share", "packed NFE <= linear")


def table(rows: list[dict], pair: str, n: int) -> Table:
    """The table `specsweep bench self` prints: one row per configuration."""
    out = config_table(f"self-speculative benchmark: pair {pair}, {n} arith prompts, greedy lossless",
                       COLUMNS)
    for r in rows:
        ci = "{:.2f}x [{:.2f}, {:.2f}]".format(*r["vs_linear"]) if "vs_linear" in r else "-"
        share = r.get("packed_nfe_le_linear")
        out.add_row(r["config"], f"{r['accuracy']:.2f}", f"{r['tokens_per_nfe']:.2f}",
                    f"{r['model_ms_per_nfe']:.2f}", f"{r['rows_per_iteration']:.1f}",
                    cell(r["mean_accept_len"]), ci, f"{r['throughput_ratio']:.2f}x",
                    f"{r['overhead_frac']:.0%}", "-" if share is None else f"{share:.0%} of prompts")
    return out
