"""`specsweep sustain SWEEP`: the highest request rate each vLLM setting of a sweep sustains
within the sweep's SLO, found by bisection along the rate (orchestrator/sweep/sustain.py)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import typer

from orchestrator.analysis.sustain import MAX_REPEATS, MAX_STEPS
from orchestrator.commands.sweep import ROOT
from orchestrator.errors import user_errors
from workloads.serving.config import MIN_REQUEST_RATE, EngineFailure, arrival_error


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
    from orchestrator.analysis.sustain import Bracket, overshoot_bound
    from orchestrator.engines import VLLM
    from orchestrator.sweep.prompts import spec_prompts
    from orchestrator.sweep.serving import Engines
    from orchestrator.sweep.study import load_sweep, state_dir
    from orchestrator.sweep.sustain import Range, result, run_log, save, settings, sustain_setting
    from orchestrator.sweep.tracking import Tracker
    from workloads.models.pair import load_tokenizer

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
    _, examples, prompts = spec_prompts(spec)
    why = arrival_error(len(examples), low, "--low")
    if why:
        raise ValueError(why)
    VLLM.prepare(spec.dimension_values())
    directory = state_dir(root, name)
    tracker = Tracker(study.user_attrs["tracking_uri"], spec.tracking.experiment or spec.name,
                      root / ".specsweep" / "artifacts", directory / "sustain-pending.jsonl")
    typer.echo(f"sustain {name}: {len(found)} settings, {low:g} to {high:g} requests/s, {steps} bisections, "
               f"{repeats} loads a rate; SLO {spec.serving.slo}; the reported rate exceeds the rate whose "
               f"loads meet it half the time with chance <= {overshoot_bound(steps, repeats):.3g}, a "
               f"quarter of the time <= {overshoot_bound(steps, repeats, 0.25):.3g}")
    engines = Engines({p.name: p.load_spec() for p in spec.pairs}, directory / "logs")
    results = []
    try:
        for pair, config in found:
            label = f"{pair} {VLLM.label(config.to_dict())} c={config.concurrency}" + (
                f" b={config.burstiness:g}" if config.burstiness != 1 else "") + (
                f" T={config.temperature:g}" if config.temperature else "")
            typer.echo(label)
            tokenizer = load_tokenizer(next(p.load_spec() for p in spec.pairs if p.name == pair))
            ids = [tokenizer(prompts[pair][e.index], verbose=False).input_ids for e in examples]
            start_ms, began = int(time.time() * 1000), time.perf_counter()
            slo, bracket = spec.serving.slo, Bracket()
            try:
                seconds = sustain_setting(engines, pair, config, ids, slo, rates, typer.echo, bracket)
            except EngineFailure as err:  # the probes so far are kept, marked cut short
                results.append(result(pair, config, label, bracket, time.perf_counter() - began, rates, slo,
                                      str(err)))
                raise
            results.append(result(pair, config, label, bracket, seconds, rates, slo))
            typer.echo(f"  sustained {_rate(bracket.sustained)}, missed at {_rate(bracket.failed)} "
                       f"({len(bracket.probes)} rates, {seconds:.0f} s)")
            tracker.log_trial(run_log(results[-1], study.user_attrs["parent_run"], start_ms))
            engines.close()  # one server at a time: an idle one still takes cores from the next
    finally:
        engines.close()
        if results:
            typer.echo(f"results: {save(directory, results)}")
        if not tracker.flush():
            typer.echo(f"warning: {tracker.save_pending()} MLflow runs not sent (tracking server down)")


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.3g} requests/s"
