"""The GPU check (`infra/gpu-check.sh`, `specsweep bench gpu`): exactness and engine speed on
a device, written up as a short Markdown report.

Checks, on the bundled toy pairs moved to the device (and on `--pair` checkpoints if given):
greedy lossless output equals the verifier's greedy output for every schedule and B; a
sampled joint of the first three tokens matches AR sampling (two-sample chi-square); then
per schedule tokens/NFE, time/NFE, non-model share and throughput against Linear at the same
B with a 95% paired bootstrap interval over prompts.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from orchestrator.bench.selfspec import compare_schedules
from workloads.decoding import DecodeConfig, decode, decode_batch
from workloads.models.pair import load_pair
from workloads.models.pairspec import BUNDLED
from workloads.tasks import get_task

ALPHA = 1e-3


def greedy_exactness(pair, prompts: list[str], blocks: tuple[int, ...], max_new_tokens: int) -> list[dict]:
    ar = [
        decode(pair, p, DecodeConfig(schedule="ar", max_new_tokens=max_new_tokens)).token_ids for p in prompts
    ]
    rows = []
    for schedule in pair.kind.speculative:
        for block in blocks:
            config = DecodeConfig(schedule=schedule, block=block, max_new_tokens=max_new_tokens)
            same = sum(decode(pair, p, config).token_ids == want for p, want in zip(prompts, ar))
            rows.append(
                {
                    "check": f"greedy {schedule} B={block}",
                    "ok": same == len(prompts),
                    "detail": f"{same}/{len(prompts)} prompts equal AR",
                }
            )
    return rows


def sampled_exactness(pair, samples: int, prompt: str = "7") -> list[dict]:
    """Per speculative schedule, the joint of the first three tokens against AR sampling's
    (two-sample chi-square); it passes only where the tokens compared were drafted and verified."""
    from scipy.stats import chi2_contingency

    base = dict(temperature=2.0, top_k=3, max_new_tokens=3)  # hot enough that the toy verifier spreads

    def joint(config: DecodeConfig) -> tuple[Counter, int]:
        # every sample a row of one batch, row s drawing from its own generator seeded s: the
        # same law as `samples` decodes one by one, in one call
        out = decode_batch(pair, [prompt] * samples, config, seeds=list(range(samples)))
        return Counter(tuple(r.token_ids) for r in out.results), sum(r.drafted for r in out.results)

    ar, _ = joint(DecodeConfig(schedule="ar", **base))
    rows = []
    for schedule in pair.kind.speculative:
        ours, drafted = joint(DecodeConfig(schedule=schedule, block=4, **base))
        keys = sorted(set(ar) | set(ours))
        pvalue = (
            1.0
            if len(keys) == 1
            else chi2_contingency([[ar[k] for k in keys], [ours[k] for k in keys]]).pvalue
        )
        rows.append(
            {
                "check": f"sampled {schedule} B=4 (T=2, top-k 3)",
                "ok": pvalue > ALPHA and drafted > 0,
                "detail": f"chi-square p = {pvalue:.3g} over {len(keys)} joints, {samples} samples each, "
                          f"{drafted} tokens drafted",
            }
        )
    return rows


def run_check(device: str, n: int, samples: int, extra: dict | None, progress: Callable[[str], None]) -> str:
    """Every check on `device`; returns the Markdown report."""
    import torch

    specs = {name: {**BUNDLED[name], "name": name, "device": device} for name in BUNDLED}
    if extra:
        specs[extra.get("name", "custom")] = {"device": device, **extra}
    prompts = [e.prompt for e in get_task("arith").examples("test", n=n)]
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else device
    lines = [
        f"# specsweep GPU check — {name}",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}, torch {torch.__version__}, {n} arith prompts",
        "",
    ]
    failed = 0
    for label, spec in specs.items():
        progress(f"{label}: loading")
        pair = load_pair(spec)
        progress(f"{label}: exactness")
        checks = greedy_exactness(pair, prompts, (4, 8), 48) + sampled_exactness(pair, samples)
        failed += sum(not c["ok"] for c in checks)
        lines += [f"## {label}", "", "| check | result | detail |", "|---|---|---|"]
        lines += [f"| {c['check']} | {'ok' if c['ok'] else 'FAILED'} | {c['detail']} |" for c in checks]
        progress(f"{label}: speed")
        lines += [
            "",
            "| config | tokens/NFE | ms/NFE | non-model share | vs ar | vs linear [95% CI] |",
            "|---|---|---|---|---|---|",
        ]
        for r in compare_schedules(pair, prompts, (4, 8, 16) if pair.kind.runs("quadratic") else (4, 8), 48):
            ci = "-" if "vs_linear" not in r else "{:.2f}x [{:.2f}, {:.2f}]".format(*r["vs_linear"])
            lines.append(
                f"| {r['config']} | {r['tokens_per_nfe']:.2f} | {r['model_ms_per_nfe']:.2f} | "
                f"{r['overhead_frac']:.0%} | {r['throughput_ratio']:.2f}x | {ci} |"
            )
        lines.append("")
        del pair
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    lines.insert(3, f"**{'all checks passed' if not failed else f'{failed} checks FAILED'}**\n")
    return "\n".join(lines)
