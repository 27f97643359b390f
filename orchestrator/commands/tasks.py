"""`specsweep tasks`: list tasks and print examples."""

from __future__ import annotations

import json

import typer

from orchestrator.errors import user_errors
from workloads.tasks import TASKS, get_task

app = typer.Typer(help="Inspect the tasks sweeps measure quality on.", no_args_is_help=True)


@app.command("list")
def list_tasks() -> None:
    """Names of the known tasks."""
    for name in sorted(TASKS):
        typer.echo(name)


@app.command()
@user_errors
def sample(
    name: str,
    n: int = typer.Option(5, "--n", min=0, help="How many examples."),
    seed: int = typer.Option(0, help="Selects which examples, reproducibly."),
    split: str = typer.Option("test", help="train, validation or test."),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines: prompt, reference, answer."),
) -> None:
    """Print N examples of task NAME."""
    for ex in get_task(name).examples(split=split, n=n, seed=seed):
        if as_json:
            typer.echo(json.dumps({"prompt": ex.prompt, "reference": ex.reference, "answer": ex.answer}))
        else:
            typer.echo(f"{ex.index:>4}  {ex.prompt}  ->  {ex.reference}")
