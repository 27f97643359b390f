"""`specsweep toy`: train, evaluate and demonstrate the bundled toy pair."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from orchestrator.errors import user_errors
from workloads.models.pairspec import TOY_DIR

app = typer.Typer(help="The bundled toy pair: train it, measure it, watch it decode.",
                  no_args_is_help=True)


def _print_quality(acc: dict[str, float], as_json: bool) -> bool:
    from workloads.models.toy_eval import quality_checks

    checks = quality_checks(acc)
    if as_json:
        typer.echo(json.dumps({"accuracy": acc, "checks": dict(checks)}))
    else:
        width = max(map(len, acc)) + 2
        typer.echo(f"{'model / mode':<{width}}accuracy (mean_accept_len: draft tokens)")
        for key, value in acc.items():
            typer.echo(f"{key:<{width}}{value:.3f}")
        for text, ok in checks:
            typer.echo(f"[{'ok' if ok else 'FAIL'}] {text}")
    return all(ok for _, ok in checks)


@app.command()
@user_errors
def train(
    out: Path = typer.Option(Path("toy-pair"), help="Directory for verifier/, drafter/, self/, dflash/, "
                             "dflash2/, dspark/, eagle3/."),
    seed: int = typer.Option(0, help="Training seed (data order and initialisation)."),
    evaluate: bool = typer.Option(True, "--eval/--no-eval", help="Measure quality afterwards."),
) -> None:
    """Train every toy model from scratch (about 28 minutes on 2 CPU cores)."""
    from workloads.models.toy_train import train_all

    start = time.perf_counter()
    train_all(out, seed=seed, log=typer.echo)
    typer.echo(f"trained in {time.perf_counter() - start:.0f}s -> {out}")
    if evaluate:
        from workloads.models.toy_eval import quality

        if not _print_quality(quality(out), as_json=False):
            raise typer.Exit(1)


@app.command("eval")
@user_errors
def evaluate(
    directory: Path = typer.Option(TOY_DIR, "--dir", help="A trained toy pair directory."),
    n: int = typer.Option(200, "--n", min=1, help="Test prompts."),
    seed: int = typer.Option(0),
    as_json: bool = typer.Option(False, "--json"),
    strict: bool = typer.Option(True, "--strict/--no-strict", help="Exit 1 when a check fails."),
) -> None:
    """Accuracy of every toy model and mode on arith test prompts, with the quality checks.

    The checks are sized for the default 200 prompts; with --strict (default) a failed check
    exits 1.
    """
    from workloads.models.toy_eval import quality

    if not (directory / "verifier" / "config.json").is_file():
        raise ValueError(f"--dir: {directory} holds no trained toy pair (run `specsweep toy train`)")
    if not _print_quality(quality(directory, n=n, seed=seed), as_json) and strict:
        raise typer.Exit(1)


@app.command()
@user_errors
def demo(n: int = typer.Option(5, "--n", min=1, help="Prompts to decode.")) -> None:
    """Decode a few arith prompts with the verifier alone, the drafter alone (K=1 and K=8)
    and speculatively (linear, B=8, K=1), with timings."""
    from workloads.decoding import DecodeConfig, decode
    from workloads.models.pair import load_pair
    from workloads.tasks import get_task

    pair = load_pair("toy")
    task = get_task("arith")
    modes = {
        "verifier AR": DecodeConfig(schedule="ar", max_new_tokens=32),
        "drafter K=1": DecodeConfig(schedule="diffusion", block=32, steps=1, max_new_tokens=32),
        "drafter K=8": DecodeConfig(schedule="diffusion", block=32, steps=8, max_new_tokens=32),
        "speculative": DecodeConfig(schedule="linear", block=8, steps=1, max_new_tokens=32),
    }
    for ex in task.examples("test", n=n):
        typer.echo(f"{ex.prompt}  (answer {ex.answer})")
        for label, config in modes.items():
            r = decode(pair, ex.prompt, config)
            mark = "ok" if task.score(ex, r.text) else "--"
            typer.echo(f"  {label:<12} {mark}  {r.text:<26} {1000 * r.wall_s:6.1f} ms  {r.nfe:>3} calls")
