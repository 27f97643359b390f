"""`specsweep toy`: train, evaluate and demonstrate the bundled toy pair."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

import typer

from orchestrator.errors import user_errors
from workloads.models.pair import TOY_DIR

app = typer.Typer(help="The bundled toy pair: train it, measure it, watch it decode.",
                  no_args_is_help=True)


def _print_quality(acc: dict[str, float], as_json: bool) -> bool:
    from workloads.models.toy_eval import quality_checks

    checks = quality_checks(acc)
    if as_json:
        typer.echo(json.dumps({"accuracy": acc, "checks": dict(checks)}))
    else:
        typer.echo(f"{'model / mode':<22}accuracy")
        for key, value in acc.items():
            typer.echo(f"{key:<22}{value:.3f}")
        for text, ok in checks:
            typer.echo(f"[{'ok' if ok else 'FAIL'}] {text}")
    return all(ok for _, ok in checks)


@app.command()
@user_errors
def train(
    out: Path = typer.Option(Path("toy-pair"), help="Directory for verifier/, drafter/, self/."),
    seed: int = typer.Option(0, help="Training seed (data order and initialisation)."),
    evaluate: bool = typer.Option(True, "--eval/--no-eval", help="Measure quality afterwards."),
) -> None:
    """Train the three toy models from scratch (about 13 minutes on 2 CPU cores)."""
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
) -> None:
    """Accuracy of every toy model and mode on arith test prompts, with the quality checks.

    Exits 1 when a check fails.
    """
    from workloads.models.toy_eval import quality

    if not (directory / "verifier" / "config.json").is_file():
        raise ValueError(f"--dir: {directory} holds no trained toy pair (run `specsweep toy train`)")
    if not _print_quality(quality(directory, n=n, seed=seed), as_json):
        raise typer.Exit(1)


@app.command()
@user_errors
def demo(n: int = typer.Option(5, "--n", min=1, help="Prompts to decode.")) -> None:
    """Decode a few arith prompts with the verifier (AR) and the drafter (diffusion, K=1 and 8)."""
    from workloads.models.pair import load_pair
    from workloads.models.toy_eval import CANVAS, ar_generate, diffusion_generate
    from workloads.tasks import get_task

    pair = load_pair("toy")
    tok, prof = pair.tokenizer, pair.profile
    task = get_task("arith")
    for ex in task.examples("test", n=n):
        ids = tok.convert_tokens_to_ids(list(ex.prompt))
        rows = [("verifier AR", partial(ar_generate, pair.verifier, ids, CANVAS, tok.eos_token_id))]
        rows += [(f"drafter K={k}", partial(diffusion_generate, pair.drafter, ids, CANVAS, k,
                                            prof.mask_token_id, tok.eos_token_id, prof.shifted))
                 for k in (1, 8)]
        typer.echo(f"{ex.prompt}  (answer {ex.answer})")
        for label, run in rows:
            start = time.perf_counter()
            text = tok.decode(run(), skip_special_tokens=True)
            ms = 1000 * (time.perf_counter() - start)
            mark = "ok" if task.score(ex, text) else "--"
            typer.echo(f"  {label:<13} {mark}  {text:<28} {ms:6.1f} ms")
