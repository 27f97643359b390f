"""The `specsweep` command."""

from __future__ import annotations

import os

import typer

from orchestrator.commands import bench, conform, decode, model, sustain, sweep, tasks, toy

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

app = typer.Typer(
    help="Find the speed/quality Pareto frontier of speculative diffusion decoding.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(toy.app, name="toy")
app.add_typer(tasks.app, name="tasks")
app.command("decode")(decode.decode)
app.add_typer(bench.app, name="bench")
app.add_typer(model.app, name="model")
app.command("run")(sweep.run)
app.command("status")(sweep.status)
app.command("frontier")(sweep.frontier_cmd)
app.command("export")(sweep.export)
app.command("conform")(conform.conform)
app.command("sustain")(sustain.sustain)


def main() -> None:
    app()
