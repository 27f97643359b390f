"""`specsweep sustain SWEEP`: the highest request rate each vLLM setting of a sweep sustains
within the sweep's SLO, found by bisection along the rate (orchestrator/sweep/sustain.py)."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from orchestrator.commands.sweep import ROOT
from orchestrator.errors import user_errors
from orchestrator.search.bisection import MAX_REPEATS, MAX_STEPS
from workloads.serving.config import MIN_REQUEST_RATE, arrival_error


@user_errors
def sustain(
    name: str = typer.Argument(..., metavar="SWEEP"),
    root: Path = ROOT,
    low: float = typer.Option(1.0, min=MIN_REQUEST_RATE, help="Lowest rate probed (requests/s)."),
    high: float = typer.Option(64.0, min=MIN_REQUEST_RATE, help="Highest rate probed (requests/s)."),
    steps: int = typer.Option(4, min=0, max=MAX_STEPS, help="Bisections between the two."),
    repeats: int = typer.Option(3, min=1, max=MAX_REPEATS,
                                help="Loads a rate must all meet the SLO in to be sustained; a rate "
                                "whose loads meet it half the time or less passes with chance 2^-R."),
) -> None:
    """For each vLLM setting of SWEEP's space (a sweep run with `specsweep run` whose spec
    states serving.slo): probe HIGH, then LOW, then STEPS geometric midpoints, each with up to
    REPEATS loads of the sweep's prompts arriving at that rate; print the highest rate whose
    loads all met the SLO and the lowest that missed it. Each setting is logged as an MLflow
    run under the sweep's parent run; `specsweep frontier SWEEP` shows the results."""
    from orchestrator.engines import VLLM
    from orchestrator.search.bisection import overshoot_bound
    from orchestrator.sweep.prompts import spec_prompts
    from orchestrator.sweep.study import load_sweep, state_dir
    from orchestrator.sweep.sustain import Range, settings, sustain_all

    for flag, rate in (("--low", low), ("--high", high)):
        if not math.isfinite(rate):
            raise ValueError(f"{flag}: {rate:g} is not a finite rate (requests/s)")
    if high <= low:
        raise ValueError(f"--high: {high:g} must be above --low ({low:g})")
    spec, study = load_sweep(root, name)
    if not spec.serving.slo:
        raise ValueError(f"sweep {name}: its spec states no serving.slo (e.g. slo: {{ttft_p99_s: 0.5}}); "
                         "the search finds the highest rate within it")
    found = settings(spec)
    if not found:
        raise ValueError(f"sweep {name}: no vLLM setting in its space (space.engine: [vllm])")
    rates = Range(low, high, steps, repeats)
    _, examples, _ = spec_prompts(spec)
    why = arrival_error(len(examples), low, "--low")
    if why:
        raise ValueError(why)
    VLLM.prepare(spec.dimension_values())
    typer.echo(f"sustain {name}: {len(found)} settings, {low:g} to {high:g} requests/s, {steps} bisections, "
               f"{repeats} loads a rate; SLO {spec.serving.slo}; the reported rate exceeds the rate whose "
               f"loads meet it half the time with chance <= {overshoot_bound(steps, repeats):.3g}, a "
               f"quarter of the time <= {overshoot_bound(steps, repeats, 0.25):.3g}")
    artifacts = root / ".specsweep" / "artifacts"
    sustain_all(spec, study, state_dir(root, name), artifacts, found, rates, typer.echo)
