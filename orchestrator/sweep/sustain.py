"""The sustained-rate search (`specsweep sustain SWEEP`): for each vLLM setting of a sweep's
space, the highest request rate whose loads all meet the sweep's SLO (`serving.slo`), found by
bisection along the rate (search/bisection.py states the rule and its error rates).

A setting is the space's method, num_speculative_tokens, concurrency (the bound on requests in
flight), burstiness and sampling; its rate is what the search varies. Each load is the sweep's
prompts arriving at the probed rate, repeat i with seed `seed + i`, so repeats differ in their
arrivals as traffic does (and, above temperature 0, in their sampling). It runs in the driver's
process on one server at a time; each setting becomes a run nested under the sweep's MLflow
parent run (its probes as the series `request_rate` and `loads_met`), and every result goes to
`sustained.json` in the sweep's directory, which `frontier` shows."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.analysis.metrics import serving_metrics
from orchestrator.files import write_atomic
from orchestrator.search.bisection import Bracket, overshoot_bound, search
from workloads.serving.config import ServingConfig

RESULTS = "sustained.json"  # in the sweep's directory


@dataclass(frozen=True)
class Range:
    """The rates a search spans and how hard it looks: `low` to `high` requests/s, `steps`
    bisections, `repeats` loads a probed rate."""

    low: float
    high: float
    steps: int
    repeats: int


def settings(spec) -> list[tuple[str, ServingConfig]]:
    """(pair, setting without a rate) of every served grid point, each once, in grid order."""
    from orchestrator.engines import engine_of
    from orchestrator.spec.space import choose_config, grid

    found: dict[tuple[str, ServingConfig], None] = {}
    for point in grid(spec):
        candidate = choose_config(spec, lambda name, values, p=point: p[name])
        if engine_of(candidate.config).served:
            found[candidate.pair, dataclasses.replace(candidate.config, request_rate=None)] = None
    return list(found)


def sustain_setting(pool, pair: str, config: ServingConfig, prompts: list[list[int]], slo: dict,
                    rates: Range, shown: Callable[[str], None], found: Bracket) -> float:
    """Fill `found`, the search's bracket for one setting (as far as it got, where the search
    is cut short); the seconds it took (its server's start, warm-up and every load). Each
    probe's loads are supervised: a server lost under one is started again and the load served
    once more (vllm.supervised)."""
    from workloads.serving.load import records, warm
    from workloads.serving.vllm import ServerLost, supervised

    began = time.perf_counter()
    try:
        server, _ = pool.server(pair, config, prompts)  # started and warmed
    except ServerLost as lost:  # under its warm-up: the pool starts a lost server again
        shown(f"{lost}; starting it again and retrying the load once")
        server, _ = pool.server(pair, config, prompts)

    def meets(rate: float, repeat: int) -> bool:
        load = dataclasses.replace(config, request_rate=rate, seed=config.seed + repeat)

        def timed():
            warm(server, prompts, load)  # once a rate, untimed (and again on a restarted server)
            return pool.serve(server, prompts, load)

        served, wall = supervised(server, timed, shown)
        metrics = serving_metrics(records(served, wall), slo)
        met = metrics["slo_met"] == 1.0
        shown(f"  {rate:.3g} requests/s, load {repeat + 1}: " + ", ".join(
            f"{key} {metrics.get(key, float('nan')):.3g}" for key in slo) + ("" if met else " (SLO missed)"))
        return met

    search(meets, rates.low, rates.high, rates.steps, rates.repeats, found)
    return time.perf_counter() - began


def result(pair: str, config: ServingConfig, label: str, bracket: Bracket, seconds: float, rates: Range,
           slo: dict, error: str | None = None) -> dict:
    """One setting's entry of `sustained.json`; with `error`, a search cut short by it (its
    bracket as far as it got)."""
    return {"pair": pair, "label": label, "config": config.to_dict(), **({"error": error} if error else {}),
            "sustained_rate": bracket.sustained,
            "failed_rate": bracket.failed, "probes": [list(p) for p in bracket.probes],
            **dataclasses.asdict(rates), "slo": slo,
            "overshoot_bound": overshoot_bound(rates.steps, rates.repeats),
            "overshoot_bound_quarter": overshoot_bound(rates.steps, rates.repeats, 0.25), "engine_s": seconds}


def run_log(entry: dict, parent: str, start_ms: int):
    """A setting's result as an MLflow run nested under the sweep's `parent` run: its setting,
    range and SLO as params; sustained_rate, failed_rate and engine_s as metrics (a rate the
    search never found is left out); the probes as the series request_rate and loads_met."""
    from orchestrator.sweep.tracking import TrialLog

    params = {"pair": entry["pair"], **entry["config"],
              **{k: entry[k] for k in ("low", "high", "steps", "repeats")},
              **{f"slo.{k}": v for k, v in entry["slo"].items()}}
    metrics = {k: entry[k] for k in ("sustained_rate", "failed_rate", "engine_s") if entry[k] is not None}
    return TrialLog(name=f"sustain {entry['label']}", status="FINISHED", start_ms=start_ms,
                    end_ms=int(time.time() * 1000), params=params, metrics=metrics, table=[],
                    tags={"mlflow.parentRunId": parent, "specsweep.sustain": "1"},
                    series={"request_rate": [p[0] for p in entry["probes"]],
                            "loads_met": [p[1] for p in entry["probes"]]})


def save(directory: Path, results: list[dict]) -> Path:
    path = directory / RESULTS
    write_atomic(path, json.dumps(results, indent=1))
    return path


def load_results(directory: Path) -> list[dict]:
    """The sweep's sustained-rate results ([] before any search)."""
    path = directory / RESULTS
    return json.loads(path.read_text()) if path.is_file() else []


def sustain_all(spec, study, directory: Path, artifacts: Path, found: list[tuple[str, ServingConfig]],
                rates: Range, say: Callable[[str], None]) -> list[dict]:
    """Search each setting of `found` in turn, one server at a time: each result printed, logged
    as an MLflow run under the sweep's parent and saved to `sustained.json` in `directory` (a
    setting cut short by a lost server is saved with its probes so far, then the failure
    raised); MLflow runs a store that is down could not take are kept beside it."""
    from orchestrator.engines import VLLM
    from orchestrator.engines.serverpool import ServerPool
    from orchestrator.search.bisection import Bracket
    from orchestrator.sweep.prompts import spec_prompts
    from orchestrator.sweep.tracking import Tracker
    from workloads.models.pair import load_tokenizer
    from workloads.serving.config import EngineFailure

    _, examples, prompts = spec_prompts(spec)
    tracker = Tracker(study.user_attrs["tracking_uri"], spec.tracking.experiment or spec.name, artifacts,
                      directory / "sustain-pending.jsonl")
    pool = ServerPool({p.name: p.load_spec() for p in spec.pairs}, directory / "logs")
    results: list[dict] = []
    try:
        for pair, config in found:
            label = f"{pair} {VLLM.label(config.to_dict())} c={config.concurrency}" + (
                f" b={config.burstiness:g}" if config.burstiness != 1 else "") + (
                f" T={config.temperature:g}" if config.temperature else "")
            say(label)
            tokenizer = load_tokenizer(next(p.load_spec() for p in spec.pairs if p.name == pair))
            ids = [tokenizer(prompts[pair][e.index], verbose=False).input_ids for e in examples]
            start_ms, began = int(time.time() * 1000), time.perf_counter()
            slo, bracket = spec.serving.slo, Bracket()
            try:
                seconds = sustain_setting(pool, pair, config, ids, slo, rates, say, bracket)
            except EngineFailure as err:  # the probes so far are kept, marked cut short
                results.append(result(pair, config, label, bracket, time.perf_counter() - began, rates, slo,
                                      str(err)))
                raise
            results.append(result(pair, config, label, bracket, seconds, rates, slo))
            say(f"  sustained {_rate(bracket.sustained)}, missed at {_rate(bracket.failed)} "
                f"({len(bracket.probes)} rates, {seconds:.0f} s)")
            tracker.log_trial(run_log(results[-1], study.user_attrs["parent_run"], start_ms))
            pool.close()  # one server at a time: an idle one still takes cores from the next
    finally:
        pool.close()
        if results:
            say(f"results: {save(directory, results)}")
        if not tracker.flush():
            say(f"warning: {tracker.save_pending()} MLflow runs not sent (tracking server down)")
    return results


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.3g} requests/s"
