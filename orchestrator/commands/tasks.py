"""`specsweep tasks`: list tasks, print examples, score a completion."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.errors import user_errors
from workloads.tasks import TASKS, get_task

app = typer.Typer(help="Inspect the tasks sweeps measure quality on.", no_args_is_help=True)

DATA = typer.Option(None, "--data", help="Local JSON, JSONL or parquet file (or a dir of them) instead "
                    "of the hub.", show_default=False)


@app.command("list")
def list_tasks() -> None:
    """Names of the known tasks, with where their data comes from."""
    for name in sorted(TASKS):
        task = TASKS[name]
        typer.echo(f"{name:<14} {task.origin}{'' if task.scored else '  (speed only)'}")


@app.command()
@user_errors
def sample(
    name: str,
    data: Path = DATA,
    n: int = typer.Option(5, "--n", min=0, help="How many examples."),
    seed: int = typer.Option(0, help="Selects which examples, reproducibly."),
    split: str = typer.Option("test", help="test (arith also has train and validation)."),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines: index, prompt, reference, answer."),
) -> None:
    """Print N examples of task NAME."""
    for ex in get_task(name, data).examples(split=split, n=n, seed=seed):
        if as_json:
            typer.echo(json.dumps({"index": ex.index, "prompt": ex.prompt, "reference": ex.reference,
                                   "answer": ex.answer}))
        else:
            typer.echo(f"{ex.index:>4}  {ex.prompt}  ->  {ex.reference}")


@app.command()
@user_errors
def score(
    name: str,
    index: int = typer.Option(..., help="Example index (dataset position)."),
    completion_file: Path = typer.Option(..., help="File holding the generated completion."),
    data: Path = DATA,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Score one completion of example INDEX of task NAME (code runs in the sandbox)."""
    if not completion_file.is_file():
        raise ValueError(f"--completion-file: no such file {completion_file}")
    task = get_task(name, data)
    result = task.judge(task.example(index), completion_file.read_text())
    correct = None if result.correct is None else int(result.correct)
    if as_json:
        typer.echo(json.dumps({"correct": correct, "detail": result.detail}))
    else:
        typer.echo(f"correct: {correct}\n{result.detail}")
