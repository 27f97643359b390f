"""`specsweep bench`: speed figures measured in one run, relative to the `ar` baseline."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.errors import user_errors

app = typer.Typer(help="Benchmarks that print ratios measured in one process.", no_args_is_help=True)
# Sweep workers decode single-threaded: Ray gives a 1-CPU actor OMP_NUM_THREADS=1.
THREADS = typer.Option(1, min=1, help="torch threads (1: as sweep workers decode).")


def _load(pair: str, threads: int):
    """The pair, loaded once torch runs `threads` threads."""
    import torch

    from workloads.models import load_pair

    torch.set_num_threads(threads)
    return load_pair(pair)


def _progress(n: int, configurations: int, quiet: bool, run):
    """`run(progress)` under a progress bar over `n` prompts (none when `quiet`); what it returns."""
    from rich.progress import Progress

    with Progress(transient=True, disable=quiet) as progress:
        bar = progress.add_task(f"{configurations} configurations x {n} prompts", total=n)
        return run(lambda done: progress.update(bar, completed=done))


def _json(rows: list[dict]) -> list[str]:
    return [json.dumps(row) for row in rows]


def _show(out, width: int = 80) -> None:
    """Print what a benchmark formats: its lines, or its rich table `width` wide."""
    from rich.console import Console

    if isinstance(out, list):
        for line in out:
            typer.echo(line)
    else:
        Console(width=width).print(out)


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
    from orchestrator.bench import decode

    loaded = _load(pair, threads)
    grid = decode.default_grid(loaded.kind, block, max_new_tokens)
    prompts, score = decode.arith(n)
    rows = _progress(n, len(grid), as_json, lambda progress: decode.run_benchmark(
        loaded, prompts, grid, score=score, progress=progress))
    _show(_json(rows) if as_json else decode.table(rows, pair, n, block), width=160)


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
    from orchestrator.analysis.throughput import parse_numbers
    from orchestrator.bench import selfspec
    from orchestrator.bench.decode import arith

    try:
        sizes = [int(b) for b in parse_numbers(blocks, "--blocks")]
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--blocks") from None
    loaded = _load(pair, threads)
    if not loaded.kind.runs("quadratic"):
        raise typer.BadParameter(f"{pair} is a {loaded.kind.name} pair; this benchmark compares quadratic "
                                 "with linear and packed, so it needs a dual-mode one", param_hint="--pair")
    prompts, score = arith(n)
    rows = _progress(n, 1 + 3 * len(sizes), as_json, lambda progress: selfspec.compare_schedules(
        loaded, prompts, sizes, max_new_tokens, score=score, progress=progress))
    _show(_json(rows) if as_json else selfspec.table(rows, pair, n), width=180)


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
    from orchestrator.bench.sandbox import sandbox_overhead, table

    _show(table(sandbox_overhead(n)))


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
    from orchestrator.bench.overhead import heading, orchestration_overhead, table

    typer.echo(heading(trials, prompts))
    _show(table(orchestration_overhead(trials, prompts, max_slots)))


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
    serving: bool = typer.Option(False, "--serving", help="Replay a vLLM grid: per concurrency, the "
                                 "pick of each strategy and of the multi-fidelity search, cost in "
                                 "engine-seconds."),
    tolerance: float = typer.Option(0.05, "--tolerance", min=0.0, help="--serving: the multi-fidelity "
                                    "search times a setting only while it could beat the pick by more."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Search strategies over the same space, replayed from a measured grid: hypervolume
    reached (fraction of the grid's) after 10%, 25% and 50% of the grid's trial count; with
    --racing, from its per-prompt records, after those shares of its prompt-decodes, with
    and without racing, with the recall of the grid's frontier; with --serving, a vLLM grid's
    picks per concurrency at 25% and 50% of its engine-seconds, and the multi-fidelity
    search's."""
    from orchestrator.bench import search
    from orchestrator.search.racing import Racing

    if serving:
        from orchestrator.bench.servingsearch import serving_strategies, serving_table

        rows, predictions, checked = serving_strategies(Path(root), sweep, seeds, tolerance)
        _show(_json(rows) if as_json else serving_table(rows, predictions, checked, sweep, seeds))
    elif racing:
        race = Racing(start=start, factor=factor)
        rows = search.race_strategies(Path(root), sweep, seeds, race)
        _show(_json(rows) if as_json else search.race_table(rows, sweep, race, seeds))
    else:
        points, runs = search.compare_strategies(Path(root), sweep, seeds, calibration)
        _show(_json(search.mean_rows(runs)) if as_json else search.fraction_table(points, runs, sweep, seeds))


@app.command("picks")
@user_errors
def picks_bench(
    sweeps: list[str] = typer.Argument(..., help="Finished vLLM sweeps of one pair (e.g. serving "
                                       "serving-fidelity)."),
    root: str = typer.Option(".", "--root"),
    repeats: int = typer.Option(5, "--repeats", min=1, help="Loads of each pick per concurrency."),
    by: str = typer.Option(None, "--by", help="Pick by this metric (default: each sweep's first objective)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Each sweep's best configuration per concurrency, served again in one run, their
    loads interleaved on resident servers, on the first sweep's prompts: median tokens/s and
    the gap to the fastest pick there."""
    from orchestrator.bench.picks import pair_and_prompts, serve_picks, sweep_picks, table
    from workloads.serving.venv import vllm_python

    vllm_python()
    chosen = {name: sweep_picks(Path(root), name, by) for name in sweeps}
    checkpoints, ids = pair_and_prompts(Path(root), sweeps, {pair for pair, _ in chosen.values()})
    rows = serve_picks(checkpoints, ids, {n: c for n, (_, c) in chosen.items()}, repeats,
                       progress=None if as_json else lambda msg: typer.echo(msg, err=True))
    _show(_json(rows) if as_json else table(rows))


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
    from orchestrator.bench.racing import error_table, table

    cells = error_table(reps=reps, seed=seed)
    _show(_json([c.to_dict() for c in cells]) if as_json else table(cells))


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
    from orchestrator.bench import dflash
    from orchestrator.bench.decode import arith
    from workloads.decoding.kinds import DFLASH

    loaded = _load(pair, threads)
    if loaded.kind is not DFLASH:  # the dflash package's reference decodes DFlash drafters only
        raise typer.BadParameter(f"{pair} is not a DFlash pair (a {loaded.kind.name} pair)",
                                 param_hint="--pair")
    prompts = arith(n)[0]
    rows = dflash.reference_comparison(loaded, prompts, block, max_new_tokens)
    best = dflash.best_lossless({pair: loaded, versus: _load(versus, threads)}, prompts, max_new_tokens)
    _show(_json(rows + best) if as_json else dflash.table(rows, best, pair, n))


@app.command("batch")
@user_errors
def batch_bench(
    batch_sizes: str = typer.Option("1,4,16", "--batch-sizes", help="Comma-separated batch sizes."),
    pair: str = typer.Option("toy", help="Pair (bundled name)."),
    n: int = typer.Option(32, "--n", min=1, help="arith test prompts."),
    max_new_tokens: int = typer.Option(48),
    threads: int = THREADS,
    vllm: bool = typer.Option(False, "--vllm",
                              help="Also serve the prompts in vLLM (`make vllm`; a DFlash pair)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """For each batch size, in one run on the same prompts: `ar` tokens/s, HF generate's,
    the best lossless configuration's and its ratio to `ar`; the best configuration under
    each cache-compaction slack; with --vllm, vLLM's tokens/s at concurrency = batch size
    without speculation and with DFlash."""
    from orchestrator.bench import batch
    from orchestrator.bench.decode import arith
    from workloads.decoding.kinds import DFLASH
    from workloads.models.families import pair_kind
    from workloads.models.pairspec import BUNDLED
    from workloads.serving.venv import vllm_python

    sizes = batch.parse_sizes(batch_sizes)
    if vllm:  # refused before minutes of decoding, not after
        if (kind := pair_kind(pair)) is not DFLASH:
            raise ValueError(f"--vllm: vLLM serves a DFlash pair's drafter; {pair} is a {kind.name} pair "
                             f"(use toy-dflash)")
        vllm_python()
    loaded = _load(pair, threads)
    prompts, say = arith(n)[0], None if as_json else lambda line: typer.echo(line, err=True)
    rows = batch.batch_comparison(loaded, prompts, sizes, max_new_tokens, say)
    if vllm:
        columns = batch.vllm_columns(loaded, BUNDLED[pair], prompts, sizes, max_new_tokens, say)
        rows = [{**r, **columns[r["batch_size"]]} for r in rows]
    _show(_json(rows) if as_json else batch.table(rows, pair, n, threads))


@app.command("serve")
@user_errors
def serve_bench(
    pair: str = typer.Option("toy-dflash", help="Pair (bundled name)."),
    concurrency: str = typer.Option("1,4,16", "--concurrency", help="Requests in flight (batch sizes)."),
    methods: str = typer.Option("ngram,dflash", "--methods", help="vLLM speculative methods."),
    drafts: str = typer.Option("1,3,5,7", "--num-speculative-tokens", help="num_speculative_tokens values."),
    n: int = typer.Option(32, "--n", min=1, help="arith test prompts."),
    max_new_tokens: int = typer.Option(48),
    threads: int = THREADS,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The pair in vLLM (`make vllm`) and in specsweep's engine, per concurrency, in one run:
    each vLLM setting against vLLM without speculation served right after it at the same
    concurrency; specsweep's linear K = 1 at the same draft widths against `ar`, interleaved."""
    from orchestrator.bench import serving
    from orchestrator.bench.batch import parse_sizes
    from orchestrator.bench.decode import arith
    from workloads.models.pairspec import BUNDLED

    sizes = parse_sizes(concurrency)
    widths = parse_sizes(drafts)
    loaded = _load(pair, threads)
    prompts = arith(n)[0]
    ids = [loaded.tokenizer(p).input_ids for p in prompts]
    say = None if as_json else lambda line: typer.echo(line, err=True)
    rows = serving.vllm_rows(BUNDLED[pair], ids, [(m, w) for m in methods.split(",") for w in widths], sizes,
                             max_new_tokens, say)
    rows += serving.specsweep_rows(loaded, prompts, widths, sizes, max_new_tokens, say)
    _show(_json(rows) if as_json else serving.table(rows))


@app.command("predict")
@user_errors
def predict_bench(
    serving: str = typer.Argument(..., metavar="SERVING_SWEEP", help="A vLLM sweep of the pair."),
    research: str = typer.Option(None, "--research", help="A specsweep sweep whose frontier to predict."),
    method: str = typer.Option("dflash", help="The drafter's vLLM method the model is calibrated on."),
    root: str = typer.Option(".", "--root"),
) -> None:
    """vLLM's speed for configurations it has no setting for: the throughput model calibrated on
    SERVING_SWEEP's trials per concurrency, each drafting trial predicted from the others (the
    model's error), then --research's frontier configurations, predicted."""
    from orchestrator.analysis.prediction import load_predictor
    from orchestrator.analysis.summary import frontier_rows
    from orchestrator.bench.prediction import predictions, validation_table
    from orchestrator.sweep.study import load_sweep

    predictor = load_predictor(load_sweep(Path(root), serving)[1], serving, "SERVING_SWEEP")
    lines = validation_table(predictor.trials, method)
    if research is not None:
        spec, other = load_sweep(Path(root), research)
        lines += predictions(predictor, method, frontier_rows(spec, other, {}), spec.pair_kinds)
    _show(lines)


@app.command("starts")
@user_errors
def starts_bench(
    pair: str = typer.Option("toy-dflash", help="Pair (bundled name)."),
    method: str = typer.Option("dflash", help="vLLM speculative method."),
    drafts: int = typer.Option(7, "--num-speculative-tokens", min=1),
    concurrency: int = typer.Option(4, min=1),
    n: int = typer.Option(16, "--n", min=1, help="arith test prompts."),
    max_new_tokens: int = typer.Option(48),
    blocks: int = typer.Option(6, min=2, help="Timed blocks C1 S1 C0 S0 S0 C0 S1 C1."),
) -> None:
    """A vLLM server start's parts (`make vllm`), with the model in a worker process of its own
    and in the engine core's, and whether the speed ratio a sweep measures is the same both ways."""
    from orchestrator.bench import starts
    from orchestrator.bench.decode import arith
    from workloads.models.pair import load_tokenizer
    from workloads.models.pairspec import refs
    from workloads.serving.config import ServingConfig

    config = ServingConfig(method, drafts, concurrency=concurrency, max_new_tokens=max_new_tokens)
    ids = [load_tokenizer(pair)(p).input_ids for p in arith(n)[0]]
    _show(starts.check(refs(pair), config, ids, blocks, lambda line: typer.echo(line, err=True)).lines())
