"""Decoding benchmark: every configuration over the same prompts, interleaved per prompt
so machine noise falls on all of them alike; speed is reported relative to `ar`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rich.table import Table

from orchestrator.analysis.metrics import trial_metrics
from workloads.decoding.config import DecodeConfig
from workloads.decoding.engine import DecodeResult, decode
from workloads.decoding.kinds import PairKind
from workloads.models.pair import Pair


@dataclass
class Totals:
    """Sums over prompts for one configuration."""

    label: str
    config: DecodeConfig
    results: list[DecodeResult] = field(default_factory=list)
    correct: float = 0.0

    def sum(self, name: str) -> float:
        return float(sum(getattr(r, name) for r in self.results))

    @property
    def throughput(self) -> float:
        return self.metrics()["throughput_tps"]

    def metrics(self) -> dict[str, float]:
        """The trial metrics of these decodes (`analysis.metrics.trial_metrics`: one formula
        per figure, the same a sweep logs)."""
        return trial_metrics([{**r.to_dict(), "index": i} for i, r in enumerate(self.results)])

    def row(self, ar_throughput: float) -> dict:
        n = max(1, len(self.results))
        iterations = max(1.0, self.sum("iterations"))
        metrics = self.metrics()
        return {
            "config": self.label,
            "accuracy": self.correct / n,
            "tokens_per_nfe": metrics["tokens_per_nfe"],
            "acceptance_rate": metrics.get("acceptance_rate"),
            "mean_accept_len": metrics.get("mean_accept_len"),
            "throughput_ratio": self.throughput / ar_throughput,
            "throughput_tps": self.throughput,
            "overhead_ms_per_iter": 1000 * self.sum("overhead_s") / iterations,
            "model_ms_per_iter": 1000 * self.sum("model_s") / iterations,
            "exact": all(r.exact for r in self.results),
        }


def arith(n: int) -> tuple[list[str], Callable[[int, str], float]]:
    """The first `n` arith test prompts, and `score(i, text)`: the answer to prompt i scored."""
    from workloads.tasks import get_task

    task = get_task("arith")
    examples = task.examples("test", n=n)
    return [e.prompt for e in examples], lambda i, text: task.score(examples[i], text)


def decode_all(pair: Pair, prompts: list[str], configs: dict[str, DecodeConfig],
               score: Callable[[int, str], float] | None = None, warmup: int = 3,
               progress: Callable[[int], None] | None = None) -> dict[str, Totals]:
    """Decode every prompt with every config, interleaved per prompt, after `warmup`
    untimed prompts; label -> Totals with one result per prompt, in prompt order."""
    for prompt in prompts[:warmup]:
        for config in configs.values():
            decode(pair, prompt, config)
    totals = {label: Totals(label, config) for label, config in configs.items()}
    for i, prompt in enumerate(prompts):
        for t in totals.values():
            result = decode(pair, prompt, t.config)
            t.results.append(result)
            if score is not None:
                t.correct += score(i, result.text)
        if progress:
            progress(i + 1)
    return totals


def run_benchmark(pair: Pair, prompts: list[str], configs: dict[str, DecodeConfig],
                  score: Callable[[int, str], float] | None = None, warmup: int = 3,
                  progress: Callable[[int], None] | None = None) -> list[dict]:
    """`decode_all`, one row per config; `configs` must contain "ar": the baseline the speed
    ratios refer to."""
    if "ar" not in configs:
        raise ValueError("configs: the benchmark needs an 'ar' baseline entry")
    totals = decode_all(pair, prompts, configs, score, warmup, progress)
    ar = totals["ar"].throughput
    return [t.row(ar) for t in totals.values()]


def default_grid(kind: PairKind, block: int = 8, max_new_tokens: int = 48) -> dict[str, DecodeConfig]:
    """Greedy lossless configurations: the baselines, and each schedule at several K (those
    a pair of `kind` runs)."""
    base = dict(max_new_tokens=max_new_tokens, block=block, unmask="ltr")
    grid = {"ar": DecodeConfig(schedule="ar", **base)}
    for k in (1, 2, 4) if kind.runs("diffusion") else ():
        grid[f"diffusion K={k}"] = DecodeConfig(schedule="diffusion", steps=k, **base)
    for schedule in kind.speculative:
        for k in (1,) if kind.one_step(schedule) else (1, 2, 4):
            grid[f"{schedule} K={k}"] = DecodeConfig(schedule=schedule, steps=k, **base)
    return grid


COLUMNS = ("config", "accuracy", "tokens/NFE", "accept rate", "accept len", "speedup vs ar", "model ms/iter",
           "overhead ms/iter", "exact")


def cell(value: float | None, spec: str = ".2f") -> str:
    """A figure as a table shows it; "-" where the configuration has none."""
    return "-" if value is None else format(value, spec)


def config_table(title: str, columns: tuple[str, ...]) -> Table:
    """An empty table of one row per configuration: the config left, its figures right."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col == "config" else "right")
    return table


def table(rows: list[dict], pair: str, n: int, block: int) -> Table:
    """The table `specsweep bench decode` prints: one row per configuration."""
    out = config_table(f"decode benchmark: pair {pair}, {n} arith prompts, B={block}, greedy lossless",
                       COLUMNS)
    for r in rows:
        out.add_row(r["config"], f"{r['accuracy']:.2f}", f"{r['tokens_per_nfe']:.2f}",
                    cell(r["acceptance_rate"]), cell(r["mean_accept_len"]), f"{r['throughput_ratio']:.2f}x",
                    f"{r['model_ms_per_iter']:.2f}", f"{r['overhead_ms_per_iter']:.2f}", str(r["exact"]))
    return out
