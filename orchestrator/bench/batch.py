"""Speculation as the batch grows, in one process on the same prompts: for each batch size,
`ar` (the verifier alone), HF `generate` (the peer a user would batch `ar` with: greedy,
left-padded), and each lossless configuration; every decoder runs batch by batch,
interleaved, so machine noise falls on all alike. Speed is Σ new tokens / Σ batch wall time.

With vLLM (`make vllm`), the same prompts served by vLLM in the same run, at concurrency =
batch size: without speculation (`ar`) and, for a DFlash pair, DFlash at the draft widths of
the lossless grid (bench/serving.vllm_rows: each against no speculation served right after).

Also how the batched engine treats masked cache slots (rejected drafts, padding, drafting
rows): compacted as soon as any is masked (slack 0), compacted past half the cache (the
default), or only masked (slack 1, never compacted), on the fastest configuration."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from workloads.decoding import DecodeConfig, decode_batch, slots
from workloads.decoding.network import sync
from workloads.models.pair import Pair

SLACKS = (0.0, slots.SLACK, 1.0)


def lossless_grid(pair: Pair, max_new_tokens: int) -> dict[str, DecodeConfig]:
    """The greedy lossless configurations compared: each schedule the pair runs at B = 4, 8 and K = 1."""
    return {f"{schedule} B={block} K=1": DecodeConfig(schedule=schedule, block=block, steps=1,
                                                      max_new_tokens=max_new_tokens)
            for schedule in pair.kind.speculative
            for block in (4, 8)}


def parse_sizes(text: str) -> list[int]:
    """`--batch-sizes`: whole numbers >= 1, comma-separated."""
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise ValueError(f"--batch-sizes: whole numbers separated by commas; got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--batch-sizes: every batch size must be >= 1; got {text!r}")
    return sizes


def hf_generate(pair: Pair, prompts: list[str], max_new_tokens: int) -> tuple[int, float]:
    """(new tokens up to each row's EOS, wall s) of HF `generate`, greedy, on a left-padded batch."""
    tok, verifier = pair.tokenizer, pair.kind.models(pair)[1]
    ids = [tok(p).input_ids for p in prompts]
    width = max(map(len, ids))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    batch = torch.tensor([[pad] * (width - len(i)) + i for i in ids], device=verifier.device)
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids], device=verifier.device)
    sync(verifier.device)
    start = time.perf_counter()
    out = verifier.generate(input_ids=batch, attention_mask=mask, max_new_tokens=max_new_tokens,
                            do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=pad)
    sync(verifier.device)
    wall = time.perf_counter() - start
    new = 0
    for row in out[:, width:].tolist():
        new += row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
    return new, wall


def _speed(pair: Pair, prompts: list[str], config: DecodeConfig,
           slack: float | None = None) -> tuple[int, float]:
    tokens, wall, _, _ = _measured(pair, prompts, config, slack)
    return tokens, wall


def _measured(pair: Pair, prompts: list[str], config: DecodeConfig,
              slack: float | None = None) -> tuple[int, float, float, int]:
    """(new tokens, wall s, host overhead s = wall − model time, iterations: the most any row took)."""
    done = decode_batch(pair, prompts, config, slack=slack)
    return (sum(r.new_tokens for r in done.results), done.wall_s, done.overhead_s,
            max(r.iterations for r in done.results))


def batch_comparison(pair: Pair, prompts: list[str], sizes: list[int], max_new_tokens: int,
                     progress: Callable[[str], None] | None = None) -> list[dict]:
    """One row per batch size: tokens/s of `ar`, HF generate and every lossless
    configuration, the best configuration and its ratio to `ar`, the engine's host overhead
    per iteration (Σ (wall − model time) / Σ iterations over the batches, in ms) of `ar` and
    of the best, and the best's tokens/s under each cache slack (`slack_tps`)."""
    configs = {"ar": DecodeConfig(schedule="ar", max_new_tokens=max_new_tokens),
               **lossless_grid(pair, max_new_tokens)}
    rows = []
    for size in sizes:
        batches = [prompts[i:i + size] for i in range(0, len(prompts), size)]
        for config in configs.values():  # untimed: first calls at new shapes
            _speed(pair, batches[0], config)
        hf_generate(pair, batches[0], max_new_tokens)
        totals = {label: [0, 0.0, 0.0, 0] for label in [*configs, "hf generate"]}
        with torch.inference_mode():
            for batch in batches:
                for label, config in configs.items():
                    for k, value in enumerate(_measured(pair, batch, config)):
                        totals[label][k] += value
                tokens, wall = hf_generate(pair, batch, max_new_tokens)
                totals["hf generate"][0] += tokens
                totals["hf generate"][1] += wall
        tps = {label: t[0] / t[1] for label, t in totals.items()}
        host = {label: 1000 * t[2] / t[3] for label, t in totals.items() if t[3]}
        best = max((label for label in configs if label != "ar"), key=tps.get)
        rows.append({"batch_size": size, "ar_tps": tps["ar"], "hf_generate_tps": tps["hf generate"],
                     "best": best, "best_tps": tps[best], "ratio": tps[best] / tps["ar"],
                     "ar_host_ms": host["ar"], "best_host_ms": host[best],
                     "slack_tps": _slacks(pair, batches, configs[best]),
                     "tps": {label: tps[label] for label in configs}})
        if progress:
            progress(f"batch size {size}: done")
    return rows


def vllm_columns(pair: Pair, refs: dict, prompts: list[str], sizes: list[int], max_new_tokens: int,
                 progress: Callable[[str], None] | None = None,
                 blocks: tuple[int, ...] = (4, 8)) -> dict[int, dict]:
    """Per batch size, vLLM serving `prompts` at that concurrency: `vllm_ar_tps` (no
    speculation) and, of the DFlash widths drafting `blocks`, the best one's `vllm_dflash_tps`
    and its num_speculative_tokens `vllm_dflash_n` (bench/serving.vllm_rows; `vllm_ar_tps` is
    the unspeculative load served right after it). One server a width."""
    from orchestrator.bench.serving import vllm_rows

    widths = sorted({pair.kind.draft_width(block) for block in blocks})
    ids = [pair.tokenizer(p).input_ids for p in prompts]
    rows = vllm_rows(refs, ids, [("dflash", width) for width in widths], sizes, max_new_tokens, progress)
    columns = {}
    for size in sizes:
        best = max((r for r in rows if r["concurrency"] == size), key=lambda r: r["throughput_tps"])
        columns[size] = {"vllm_ar_tps": best["control_tps"], "vllm_dflash_tps": best["throughput_tps"],
                         "vllm_dflash_n": best["num_speculative_tokens"]}
    return columns


def _slacks(pair: Pair, batches: list[list[str]], config: DecodeConfig) -> dict[str, float]:
    """Tokens/s of `config` under each cache slack (slots.SlotCache), interleaved per batch."""
    totals = {slack: [0, 0.0] for slack in SLACKS}
    for batch in batches:
        for slack in SLACKS:
            tokens, wall = _speed(pair, batch, config, slack)
            totals[slack][0] += tokens
            totals[slack][1] += wall
    return {f"{slack:g}": n / s for slack, (n, s) in totals.items()}


def table(rows: list[dict], pair: str, n: int, threads: int) -> list[str]:
    """The lines `specsweep bench batch` prints: one per batch size, speeds also relative to
    the first; with vLLM's columns where rows carry them."""
    base = rows[0]
    vllm = "vllm_ar_tps" in base
    lines = [f"{pair}, {n} arith prompts, greedy, {threads} thread(s); tokens/s, batches interleaved",
             f"{'batch':>5} {'ar':>8} {'hf gen':>8} {'ar/hf':>6} {'best lossless':>18} {'best':>8} "
             f"{'best/ar':>7} {'ar vs b1':>8} {'best vs b1':>10} {'host ms/it ar':>13} {'best':>6}  "
             + (f"{'vllm ar':>8} {'ar/vllm':>7} {'vllm dflash':>14} {'best/vllm':>9}  " if vllm else "")
             + "slack 0 / 0.5 / 1 (best)"]
    for r in rows:
        slack = " / ".join(f"{v:.0f}" for v in r["slack_tps"].values())
        served = (f"{r['vllm_ar_tps']:8.1f} {r['ar_tps'] / r['vllm_ar_tps']:6.2f}x "
                  f"{'n=' + str(r['vllm_dflash_n']) + ' ' + format(r['vllm_dflash_tps'], '.1f'):>14} "
                  f"{r['best_tps'] / r['vllm_dflash_tps']:8.2f}x  ") if vllm else ""
        lines.append(f"{r['batch_size']:>5} {r['ar_tps']:8.1f} {r['hf_generate_tps']:8.1f} "
                     f"{r['ar_tps'] / r['hf_generate_tps']:5.2f}x {r['best']:>18} "
                     f"{r['best_tps']:8.1f} {r['ratio']:6.2f}x {r['ar_tps'] / base['ar_tps']:7.2f}x "
                     f"{r['best_tps'] / base['best_tps']:9.2f}x {r['ar_host_ms']:13.2f} "
                     f"{r['best_host_ms']:6.2f}  {served}{slack}")
    lines.append("host ms/it: the engine's host work per iteration of the batch, (wall − model time) / "
                 "iterations")
    if vllm:
        lines.append("vllm: the same prompts served at concurrency = batch size, after specsweep's batches; "
                     "vllm dflash: its best num_speculative_tokens")
    return lines
