"""Speculation where users serve it: a pair in vLLM and in specsweep's engine, per concurrency.

vLLM: one server per engine setting (method, num_speculative_tokens) and one without
speculation, resident beside it for the whole run; at each concurrency the setting serves
every prompt, then the unspeculative server serves them at the same concurrency, so each
ratio compares two loads timed back to back. specsweep: at each batch size, `ar` and the
pair's `linear` K = 1 at each draft width, batch by batch, interleaved. Speed is Σ output
tokens / wall time of the load; latencies are per request (TTFT, TPOT, end to end).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from orchestrator.analysis.metrics import serving_metrics
from orchestrator.engines import ENGINES, SPECSWEEP, VLLM
from workloads.decoding import DecodeConfig, decode_batch
from workloads.models.pair import Pair
from workloads.serving.config import ServingConfig
from workloads.serving.load import Served, measured, switch
from workloads.serving.load import records as load_records
from workloads.serving.vllm import EngineSettings, VllmServer


def load_metrics(served: list[Served], wall: float) -> dict:
    """throughput_tps = Σ tokens / wall of the load, latency_s = mean latency, and the
    serving metrics (`analysis.metrics.serving_metrics`)."""
    records = load_records(served, wall)
    return {"throughput_tps": sum(r["new_tokens"] for r in records) / wall,
            "latency_s": sum(r["wall_s"] for r in records) / len(records), **serving_metrics(records)}


def _server(checkpoints: dict, config: ServingConfig) -> VllmServer:
    server = VllmServer(EngineSettings.of(checkpoints, config))
    server.start()
    return server


def vllm_rows(refs: dict, ids: list[list[int]], settings: list[tuple[str, int]], concurrencies: list[int],
              max_new_tokens: int, progress: Callable[[str], None] | None = None) -> list[dict]:
    """One row per (method, num_speculative_tokens, concurrency) of vLLM (`settings`: (method,
    num_speculative_tokens) pairs): load_metrics, the start time of its
    server, and `throughput_ratio` against no speculation served right after it (whose
    tokens/s is `control_tps`)."""
    rows = []
    base = _server(refs, ServingConfig(max_new_tokens=max_new_tokens))
    try:
        for method, drafts in settings:
            config = ServingConfig(method=method, num_speculative_tokens=drafts,
                                   max_new_tokens=max_new_tokens)
            server = _server(refs, config)
            try:
                for c in concurrencies:
                    load, control = (dataclasses.replace(config, concurrency=c),
                                     ServingConfig(max_new_tokens=max_new_tokens, concurrency=c))
                    switch(base, server)
                    served, wall = measured(server, ids, load)
                    switch(server, base)
                    plain, plain_wall = measured(base, ids, control)
                    metrics = load_metrics(served, wall)
                    control_tps = load_metrics(plain, plain_wall)["throughput_tps"]
                    rows.append({"engine": VLLM.name, "method": method, "num_speculative_tokens": drafts,
                                 "concurrency": c,
                                 "start_s": server.start_s, **metrics, "control_tps": control_tps,
                                 "throughput_ratio": metrics["throughput_tps"] / control_tps,
                                 "workaround": bool(server.report.get("patched"))})
                    if progress:
                        progress(f"vllm {method} n={drafts} concurrency {c}: "
                                 f"{metrics['throughput_tps']:.0f} tok/s")
            finally:
                server.stop()
    finally:
        base.stop()
    return rows


def specsweep_rows(pair: Pair, prompts: list[str], widths: list[int], sizes: list[int], max_new_tokens: int,
                   progress: Callable[[str], None] | None = None) -> list[dict]:
    """One row per (draft width W, batch size) of specsweep's engine: `linear` K = 1 at the
    block that drafts W tokens (vLLM's num_speculative_tokens W), its tokens/s and
    `throughput_ratio` against `ar`, batch by batch, interleaved."""
    configs = {0: DecodeConfig(schedule="ar", max_new_tokens=max_new_tokens)}
    for width in widths:
        configs[width] = DecodeConfig(schedule="linear", block=pair.kind.block_for(width), steps=1,
                                      max_new_tokens=max_new_tokens)
    rows = []
    for size in sizes:
        totals = {width: [0, 0.0] for width in configs}
        for start in range(0, len(prompts), size):
            for width, config in configs.items():
                done = decode_batch(pair, prompts[start:start + size], config)
                totals[width][0] += sum(r.new_tokens for r in done.results)
                totals[width][1] += done.wall_s
        ar = totals[0][0] / totals[0][1]
        for width in widths:
            tps = totals[width][0] / totals[width][1]
            rows.append({"engine": SPECSWEEP.name, "method": pair.kind.name, "num_speculative_tokens": width,
                         "concurrency": size, "throughput_tps": tps, "throughput_ratio": tps / ar})
        if progress:
            progress(f"specsweep batch {size}: done")
    return rows


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f}"


def table(rows: list[dict]) -> list[str]:
    """Per engine (in the rows' order) and concurrency: the best method and
    num_speculative_tokens (n) by tokens/s, its ratio against its engine's controls (vLLM
    without speculation, or `ar`), and its latencies; then every served (vLLM) row."""
    lines = [f"{'engine':<9} {'conc':>4} {'best':>12} {'tok/s':>8} {'vs none':>7} {'TTFT ms':>8} "
             f"{'TPOT ms':>8} {'p50 ms':>7} {'p99 ms':>7}"]
    by_engine: dict[str, list[dict]] = {}
    for r in rows:
        by_engine.setdefault(r["engine"], []).append(r)
    for engine, rows_of in by_engine.items():
        for c in sorted({r["concurrency"] for r in rows_of}):
            best = max((r for r in rows_of if r["concurrency"] == c), key=lambda r: r["throughput_tps"])
            ttft, tpot, p50, p99 = (_ms(best.get(key)) for key in ("ttft_s", "tpot_s", "latency_p50_s",
                                                                   "latency_p99_s"))
            setting = f"{best['method']} n={best['num_speculative_tokens']}"
            lines.append(f"{engine:<9} {c:>4} {setting:>12} "
                         f"{best['throughput_tps']:8.1f} {best['throughput_ratio']:6.2f}x {ttft:>8} "
                         f"{tpot:>8} {p50:>7} {p99:>7}")
    lines.append("vllm, every setting (tok/s, ratio against no speculation at the same concurrency):")
    for r in (r for r in rows if ENGINES[r["engine"]].served):
        lines.append(f"  {r['method']:<7} n={r['num_speculative_tokens']:<2} "
                     f"concurrency {r['concurrency']:>3}: "
                     f"{r['throughput_tps']:8.1f} tok/s {r['throughput_ratio']:5.2f}x  "
                     f"TTFT {1000 * r['ttft_s']:6.1f} ms  start {r['start_s']:.0f} s")
    return lines
