"""DFlash against its peers, in one process on the same prompts: the `dflash` package's
reference decoder (`dflash_generate`, batch 1), specsweep's linear K = 1 lossless decode of
the same pair, and the verifier alone (`ar`); then the best lossless configuration of the
DFlash pair beside the best of a diffusion-drafter pair."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from orchestrator.bench.decode import decode_all
from workloads.decoding import DecodeConfig, decode
from workloads.decoding.kinds import PairKind
from workloads.decoding.network import sync
from workloads.models.families.dflash import DFlashPair
from workloads.models.pair import Pair


def reference_comparison(pair: DFlashPair, prompts: list[str], block: int, max_new_tokens: int,
                         warmup: int = 3, progress: Callable[[int], None] | None = None) -> list[dict]:
    """Rows {decoder, throughput_tps, throughput_ratio (vs ar), vs_reference, same_tokens}: each decoder's new
    tokens over its summed wall time, interleaved per prompt after `warmup` untimed prompts;
    `same_tokens` counts prompts whose tokens equal the reference decoder's."""
    from dflash.model import dflash_generate

    tok, device = pair.tokenizer, pair.verifier.device
    ours = DecodeConfig(schedule="linear", block=block, steps=1, max_new_tokens=max_new_tokens)
    ar = DecodeConfig(schedule="ar", max_new_tokens=max_new_tokens)
    stop = [tok.eos_token_id]

    def reference(prompt: str) -> tuple[list[int], float]:
        ids = tok(prompt, return_tensors="pt").input_ids.to(device)
        sync(device)
        start = time.perf_counter()
        out = dflash_generate(pair.drafter, pair.verifier, ids, max_new_tokens, stop, block_size=block)
        sync(device)
        return out[0, ids.shape[1]:].tolist(), time.perf_counter() - start

    for prompt in prompts[:warmup]:
        reference(prompt)
        decode(pair, prompt, ours)
        decode(pair, prompt, ar)
    totals = {name: [0, 0.0] for name in ("ar", "ours", "reference")}
    same = 0
    with torch.inference_mode():
        for i, prompt in enumerate(prompts):
            tokens, wall = reference(prompt)
            mine = decode(pair, prompt, ours)
            base = decode(pair, prompt, ar)
            same += mine.token_ids == tokens
            runs = {"reference": (len(tokens), wall), "ours": (mine.new_tokens, mine.wall_s),
                    "ar": (base.new_tokens, base.wall_s)}
            for name, (n, s) in runs.items():
                totals[name][0] += n
                totals[name][1] += s
            if progress:
                progress(i + 1)
    speed = {name: n / s for name, (n, s) in totals.items()}
    labels = {"ar": "ar (verifier alone)", "ours": f"specsweep linear B={block} K=1 lossless",
              "reference": f"dflash_generate block_size={block}"}
    return [{"decoder": labels[name], "throughput_tps": speed[name],
             "throughput_ratio": speed[name] / speed["ar"], "vs_reference": speed[name] / speed["reference"],
             "same_tokens": same if name == "ours" else None}
            for name in ("ar", "reference", "ours")]


def lossless_grid(kind: PairKind, max_new_tokens: int) -> dict[str, DecodeConfig]:
    """`ar` and every speculative schedule of `kind` at B 4 and 8, K 1 and 2 (1 where it
    drafts in one step)."""
    grid = {"ar": DecodeConfig(schedule="ar", max_new_tokens=max_new_tokens)}
    for schedule in kind.speculative:
        for block in (4, 8):
            for k in (1,) if kind.one_step(schedule) else (1, 2):
                grid[f"{schedule} B={block} K={k}"] = DecodeConfig(schedule=schedule, block=block, steps=k,
                                                                   max_new_tokens=max_new_tokens)
    return grid


def best_lossless(pairs: dict[str, Pair], prompts: list[str], max_new_tokens: int,
                  progress: Callable[[int], None] | None = None) -> list[dict]:
    """Per pair, the lossless greedy configuration with the highest throughput over `ar`
    (both decoded interleaved per prompt): {pair, config, throughput_tps, throughput_ratio,
    mean_accept_len}."""
    rows = []
    for name, pair in pairs.items():
        totals = decode_all(pair, prompts, lossless_grid(pair.kind, max_new_tokens), progress=progress)
        ar = totals.pop("ar").throughput
        best = max(totals.values(), key=lambda t: t.throughput)
        rows.append({"pair": name, "config": best.label, "throughput_tps": best.throughput,
                     "throughput_ratio": best.throughput / ar,
                     "mean_accept_len": best.metrics()["mean_accept_len"]})
    return rows


def table(rows: list[dict], best: list[dict], pair: str, n: int) -> list[str]:
    """The lines `specsweep bench dflash` prints: `reference_comparison`'s rows, then `best_lossless`'s."""
    lines = [f"{pair}, {n} arith prompts, greedy, interleaved per prompt"]
    for r in rows:
        same = "" if r["same_tokens"] is None else f"  same tokens as the reference on {r['same_tokens']}/{n}"
        lines.append(f"  {r['decoder']:<40} {r['throughput_tps']:8.1f} tok/s  "
                     f"{r['throughput_ratio']:5.2f}x ar  {r['vs_reference']:5.2f}x reference{same}")
    return lines + ["best lossless configuration per pair:"] + [
        f"  {r['pair']:<12} {r['config']:<18} {r['throughput_tps']:8.1f} tok/s  "
        f"{r['throughput_ratio']:5.2f}x ar  mean_accept_len {r['mean_accept_len']:.2f}" for r in best]
