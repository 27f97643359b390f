"""`specsweep bench`: speed figures measured in one run, relative to the `ar` baseline."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.errors import user_errors

app = typer.Typer(help="Benchmarks that print ratios measured in one process.", no_args_is_help=True)
# Sweep workers decode single-threaded: Ray gives a 1-CPU actor OMP_NUM_THREADS=1.
THREADS = typer.Option(1, min=1, help="torch threads (1: as sweep workers decode).")


def _on_arith(n: int, configurations: int, as_json: bool, run) -> list[dict] | None:
    """Run a benchmark over the first `n` arith test prompts, scored, with a progress bar:
    `run(prompts, score, progress)` returns its rows. With --json the rows are printed as
    JSON lines and None is returned; otherwise the rows, for a table."""
    from rich.progress import Progress

    from workloads.tasks import get_task

    task = get_task("arith")
    examples = task.examples("test", n=n)
    with Progress(transient=True, disable=as_json) as progress:
        bar = progress.add_task(f"{configurations} configurations x {n} prompts", total=n)
        rows = run([e.prompt for e in examples], lambda i, text: task.score(examples[i], text),
                   lambda done: progress.update(bar, completed=done))
    if not as_json:
        return rows
    for row in rows:
        typer.echo(json.dumps(row))
    return None


@app.command("decode")
@user_errors
def decode_bench(
    pair: str = typer.Option("toy", help="Pair name."),
    n: int = typer.Option(100, "--n", min=1, help="arith test prompts."),
    block: int = typer.Option(8, help="B for the speculative and diffusion configurations."),
    max_new_tokens: int = typer.Option(48),
    threads: int = THREADS,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Per schedule and K (greedy, lossless): accuracy, tokens per NFE, acceptance rate,
    throughput relative to `ar`, and model / non-model time per iteration."""
    import torch

    torch.set_num_threads(threads)
    from rich.console import Console
    from rich.table import Table

    from orchestrator.bench.decode import default_grid, run_benchmark
    from workloads.models import load_pair

    loaded = load_pair(pair)
    grid = default_grid(loaded.kind, block, max_new_tokens)
    rows = _on_arith(n, len(grid), as_json, lambda prompts, score, progress: run_benchmark(
        loaded, prompts, grid, score=score, progress=progress))
    if rows is None:
        return
    table = Table(title=f"decode benchmark: pair {pair}, {n} arith prompts, B={block}, greedy lossless")
    for col in (
        "config",
        "accuracy",
        "tokens/NFE",
        "accept rate",
        "accept len",
        "speedup vs ar",
        "model ms/iter",
        "overhead ms/iter",
        "exact",
    ):
        table.add_column(col, justify="left" if col == "config" else "right")
    for r in rows:
        rate = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
        table.add_row(
            r["config"],
            f"{r['accuracy']:.2f}",
            f"{r['tokens_per_nfe']:.2f}",
            rate,
            "-" if r["mean_accept_len"] is None else f"{r['mean_accept_len']:.2f}",
            f"{r['speedup']:.2f}x",
            f"{r['model_ms_per_iter']:.2f}",
            f"{r['overhead_ms_per_iter']:.2f}",
            str(r["exact"]),
        )
    Console(width=160).print(table)


@app.command("self")
@user_errors
def self_bench(
    pair: str = typer.Option("toy-self", help="A dual-mode pair."),
    n: int = typer.Option(100, "--n", min=1, help="arith test prompts."),
    blocks: str = typer.Option("4,8,16", help="Block sizes B (comma-separated)."),
    max_new_tokens: int = typer.Option(64),
    threads: int = THREADS,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Linear-SS, Packed-SS and Quadratic-SS (greedy, lossless) per B: tokens per NFE, time
    per NFE, rows per iteration, throughput relative to Linear-SS at the same B with a 95%
    paired bootstrap interval over prompts, the non-model share of wall time, and how often
    Packed-SS needs no more NFE than Linear-SS on a prompt."""
    import torch

    torch.set_num_threads(threads)
    from rich.console import Console
    from rich.table import Table

    from orchestrator.analysis.throughput import parse_numbers
    from orchestrator.bench.selfspec import compare_schedules
    from workloads.models import load_pair

    try:
        sizes = [int(b) for b in parse_numbers(blocks, "--blocks")]
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--blocks") from None
    loaded = load_pair(pair)
    if not loaded.kind.runs("quadratic"):
        raise typer.BadParameter(f"{pair} is a {loaded.kind.name} pair; this benchmark compares quadratic "
                                 "with linear and packed, so it needs a dual-mode one", param_hint="--pair")
    rows = _on_arith(n, 1 + 3 * len(sizes), as_json, lambda prompts, score, progress: compare_schedules(
        loaded, prompts, sizes, max_new_tokens, score=score, progress=progress))
    if rows is None:
        return
    table = Table(title=f"self-speculative benchmark: pair {pair}, {n} arith prompts, greedy lossless")
    cols = (
        "config",
        "accuracy",
        "tokens/NFE",
        "ms/NFE",
        "rows/iter",
        "accept len",
        "vs linear [95% CI]",
        "vs ar",
        "overhead share",
        "packed NFE <= linear",
    )
    for col in cols:
        table.add_column(col, justify="left" if col == "config" else "right")
    for r in rows:
        ci = "{:.2f}x [{:.2f}, {:.2f}]".format(*r["vs_linear"]) if "vs_linear" in r else "-"
        share = r.get("packed_nfe_le_linear")
        table.add_row(
            r["config"],
            f"{r['accuracy']:.2f}",
            f"{r['tokens_per_nfe']:.2f}",
            f"{r['ms_per_nfe']:.2f}",
            f"{r['rows_per_iteration']:.1f}",
            "-" if r["mean_accept_len"] is None else f"{r['mean_accept_len']:.2f}",
            ci,
            f"{r['vs_ar']:.2f}x",
            f"{r['overhead_share']:.0%}",
            "-" if share is None else f"{share:.0%} of prompts",
        )
    Console(width=180).print(table)


@app.command("gpu")
@user_errors
def gpu_bench(
    out: Path = typer.Option(Path("gpu-check"), help="Directory for report.md."),
    device: str = typer.Option("cuda", help="cuda (or cpu, to rehearse the check)."),
    n: int = typer.Option(50, "--n", min=1, help="arith prompts per check."),
    samples: int = typer.Option(2000, min=100, help="Samples per sampled-exactness check."),
    pair: Path = typer.Option(None, help="Also check this pair spec (JSON/YAML: drafter+verifier or model)."),
) -> None:
    """Exactness and engine speed on a GPU: writes OUT/report.md and prints it; exit 1 if a
    check fails. Run it as `infra/gpu-check.sh`."""
    import torch
    import yaml

    from orchestrator.bench.gpu import run_check

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device: cuda requested but this machine has no CUDA device "
                         "(--device cpu rehearses the check)")
    extra = None
    if pair is not None:
        if not pair.is_file():
            raise ValueError(f"--pair: no such file {pair}")
        extra = yaml.safe_load(pair.read_text())
    report = run_check(device, n, samples, extra, progress=lambda msg: typer.echo(msg, err=True))
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(report)
    typer.echo(report)
    if "FAILED" in report:
        raise typer.Exit(1)


@app.command("sandbox")
@user_errors
def sandbox_bench(
    n: int = typer.Option(164, "--n", min=1, help="HumanEval problems (canonical solutions)."),
) -> None:
    """Per HumanEval problem: the canonical solution run in this process (trusted code) and
    through the sandbox, interleaved; prints the sandbox's overhead per problem."""
    from orchestrator.bench.sandbox import sandbox_overhead

    r = sandbox_overhead(n)
    typer.echo(f"{r['problems']} HumanEval canonical solutions, {r['passed']} passed in the sandbox "
               f"({r['layers']})")
    typer.echo(f"in process   {r['inline_ms']:8.2f} ms/problem")
    typer.echo(f"sandboxed    {r['sandboxed_ms']:8.2f} ms/problem")
    typer.echo(f"overhead     {r['sandboxed_ms'] - r['inline_ms']:8.2f} ms/problem "
               f"({r['sandboxed_ms'] / max(r['inline_ms'], 1e-9):.0f}x)")


@app.command("sweep")
@user_errors
def sweep_bench(
    trials: int = typer.Option(40, "--trials", min=2, help="Trials per run (short ones)."),
    prompts: int = typer.Option(8, "--prompts", min=1, help="arith prompts per trial."),
    max_slots: int = typer.Option(2, "--max-slots", min=1, help="Worker slots go 1 .. this."),
) -> None:
    """Orchestration overhead: the same sweep of many short trials with 1, 2, ... worker
    slots, in this process. Prints the share of worker-slot time spent outside decoding in
    the trial phase, 1 − Σ decode wall / (slots × phase wall), and trials per minute."""
    from orchestrator.bench.overhead import orchestration_overhead

    typer.echo(f"{trials} trials x {prompts} prompts, toy pair, 4 trials in flight")
    rows = orchestration_overhead(trials, prompts, max_slots)
    for r in rows:
        typer.echo(f"slots {r['slots']}: {r['trials_per_min']:6.1f} trials/min "
                   f"({r['trials_per_min'] / rows[0]['trials_per_min']:.2f}x of 1 slot), worker-slot time "
                   f"outside decoding {100 * r['outside_decoding']:.1f}%")


@app.command("search")
@user_errors
def search_bench(
    sweep: str = typer.Argument(..., help="A finished grid sweep (e.g. demo) to replay."),
    root: str = typer.Option(".", "--root"),
    seeds: int = typer.Option(5, "--seeds", min=1),
    calibration: str = typer.Option(None, "--calibration", help="For the model-guided strategy."),
    racing: bool = typer.Option(False, "--racing", help="Replay per-prompt records, with and without "
                                "racing."),
    start: int = typer.Option(16, "--start", min=1, help="Racing: prompts of the first rung."),
    factor: float = typer.Option(2.0, "--factor", min=1.01, help="Racing: growth of the prompts per rung."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Search strategies over the same space, replayed from a measured grid: hypervolume
    reached (fraction of the grid's) after 10%, 25% and 50% of the grid's trial count; with
    --racing, from its per-prompt records, after those shares of its prompt-decodes, with
    and without racing, with the recall of the grid's frontier."""
    import statistics

    if racing:
        from orchestrator.analysis.racing import Racing
        from orchestrator.bench.search import race_strategies

        rows = race_strategies(Path(root), sweep, seeds, Racing(start=start, factor=factor))
        if as_json:
            for row in rows:
                typer.echo(json.dumps(row))
            return
        typer.echo(f"replaying {sweep} from its per-prompt records; budget = share of the grid's "
                   f"prompt-decodes; racing start {start}, factor {factor:g}; means over {seeds} seeds")
        typer.echo(f"{'strategy':<8} {'racing':<6} {'budget':>6} {'hypervolume':>11} {'recall':>7} "
                   f"{'cost':>6}")
        for r in rows:
            typer.echo(f"{r['strategy']:<8} {'yes' if r['racing'] else 'no':<6} {r['budget']:>6.0%} "
                       f"{r['hypervolume_fraction']:>11.3f} {r['recall']:>7.3f} {r['cost_fraction']:>6.3f}")
        return
    from orchestrator.bench.search import compare_strategies

    points, rows = compare_strategies(Path(root), sweep, seeds, calibration)
    if as_json:
        for strategy, runs in rows.items():
            for share, cells in zip((0.1, 0.25, 0.5), zip(*runs)):
                typer.echo(json.dumps({"strategy": strategy, "racing": False, "budget": share,
                                       "hypervolume_fraction": statistics.mean(cells)}))
        return
    typer.echo(f"replaying {points} measured grid points of {sweep}; hypervolume as a fraction of the grid's")
    typer.echo(f"{'strategy':<10} {'10%':>12} {'25%':>12} {'50%':>12}   (mean ± sd over {seeds} seeds)")
    for strategy, runs in rows.items():
        cells = [f"{statistics.mean(c):.3f}±{statistics.pstdev(c):.3f}" for c in zip(*runs)]
        typer.echo(f"{strategy:<10} " + " ".join(f"{c:>12}" for c in cells))


@app.command("racing")
@user_errors
def racing_bench(
    reps: int = typer.Option(2000, "--reps", min=100, help="Simulated comparisons per cell."),
    seed: int = typer.Option(0, "--seed", min=0),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The racing rule's error rate by simulation: how often it stops a candidate that is in
    truth not dominated (one law for both, or a faster rival that is less accurate) or meets
    its constraint exactly, at first-rung sizes 1-16, 24, 32 and 64, two noise shapes, alpha
    0.01 and 0.05. Every rate should be <= alpha within its sampling error (the `margin`
    column: 4 standard errors)."""
    from dataclasses import asdict

    from orchestrator.bench.racing import error_table, table

    rows = error_table(reps=reps, seed=seed)
    for line in ([json.dumps({**asdict(r), "margin": r.margin}) for r in rows] if as_json else table(rows)):
        typer.echo(line)


@app.command("dflash")
@user_errors
def dflash_bench(
    pair: str = typer.Option("toy-dflash", help="A DFlash pair (bundled name)."),
    versus: str = typer.Option("toy", "--versus", help="A diffusion-drafter pair to set beside it."),
    n: int = typer.Option(100, "--n", min=1, help="arith test prompts."),
    block: int = typer.Option(8, help="B for the reference comparison (anchor + B - 1 drafts)."),
    max_new_tokens: int = typer.Option(48),
    threads: int = THREADS,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """In one run on the same prompts: the dflash package's reference decoder, specsweep's
    linear K=1 lossless decode of the same pair and `ar` (tokens/s and ratios); then the best
    lossless configuration of PAIR and of VERSUS, each against `ar`."""
    import torch

    torch.set_num_threads(threads)
    from orchestrator.bench.dflash import best_lossless, reference_comparison
    from workloads.models import load_pair
    from workloads.tasks import get_task

    loaded = load_pair(pair)
    if not loaded.kind.target_conditioned:
        raise typer.BadParameter(f"{pair} is not a DFlash pair (a {loaded.kind.name} pair)",
                                 param_hint="--pair")
    prompts = [e.prompt for e in get_task("arith").examples("test", n=n)]
    rows = reference_comparison(loaded, prompts, block, max_new_tokens)
    best = best_lossless({pair: loaded, versus: load_pair(versus)}, prompts, max_new_tokens)
    if as_json:
        for row in rows + best:
            typer.echo(json.dumps(row))
        return
    typer.echo(f"{pair}, {n} arith prompts, greedy, interleaved per prompt")
    for r in rows:
        same = "" if r["same_tokens"] is None else f"  same tokens as the reference on {r['same_tokens']}/{n}"
        typer.echo(f"  {r['decoder']:<40} {r['tokens_per_s']:8.1f} tok/s  {r['vs_ar']:5.2f}x ar  "
                   f"{r['vs_reference']:5.2f}x reference{same}")
    typer.echo("best lossless configuration per pair:")
    for r in best:
        typer.echo(f"  {r['pair']:<12} {r['config']:<18} {r['tokens_per_s']:8.1f} tok/s  "
                   f"{r['vs_ar']:5.2f}x ar  mean_accept_len {r['mean_accept_len']:.2f}")


@app.command("batch")
@user_errors
def batch_bench(
    batch_sizes: str = typer.Option("1,4,16", "--batch-sizes", help="Comma-separated batch sizes."),
    pair: str = typer.Option("toy", help="Pair (bundled name)."),
    n: int = typer.Option(32, "--n", min=1, help="arith test prompts."),
    max_new_tokens: int = typer.Option(48),
    threads: int = THREADS,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """For each batch size, in one run on the same prompts: `ar` tokens/s, HF generate's,
    the best lossless configuration's and its ratio to `ar`; and the best configuration
    under each cache-compaction slack."""
    import torch

    torch.set_num_threads(threads)
    from orchestrator.bench.batch import batch_comparison
    from workloads.models import load_pair
    from workloads.tasks import get_task

    try:
        sizes = [int(s) for s in batch_sizes.split(",")]
    except ValueError:
        raise ValueError(f"--batch-sizes: whole numbers separated by commas; got {batch_sizes!r}") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--batch-sizes: every batch size must be >= 1; got {batch_sizes!r}")
    loaded = load_pair(pair)
    prompts = [e.prompt for e in get_task("arith").examples("test", n=n)]
    rows = batch_comparison(loaded, prompts, sizes, max_new_tokens,
                            None if as_json else lambda line: typer.echo(line, err=True))
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    base = rows[0]
    typer.echo(f"{pair}, {n} arith prompts, greedy, {threads} thread(s); tokens/s, batches interleaved")
    typer.echo(f"{'batch':>5} {'ar':>8} {'hf gen':>8} {'best lossless':>18} {'best':>8} {'best/ar':>7} "
               f"{'ar vs b1':>8} {'best vs b1':>10}  slack 0 / 0.5 / 1 (best)")
    for r in rows:
        slack = " / ".join(f"{v:.0f}" for v in r["slack_tps"].values())
        typer.echo(f"{r['batch_size']:>5} {r['ar_tps']:8.1f} {r['hf_generate_tps']:8.1f} {r['best']:>18} "
                   f"{r['best_tps']:8.1f} {r['ratio']:6.2f}x {r['ar_tps'] / base['ar_tps']:7.2f}x "
                   f"{r['best_tps'] / base['best_tps']:9.2f}x  {slack}")
