"""What `status`, `frontier` and `export` show of a sweep, read from its study."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import optuna

from orchestrator.analysis.frontier import default_reference, frontier_trials, hypervolume, tied
from orchestrator.analysis.metrics import metric_text
from orchestrator.analysis.timing import describe, flagged, timing_report
from orchestrator.engines import listed
from orchestrator.stored import STOPPED, baseline, baselines, load, load_order, row_load
from orchestrator.stored import batch_size as stored_batch_size

SHORT = {"throughput_tps": "tok/s", "throughput_ratio": "ratio", "accuracy": "acc",  # table headers
         "mean_accept_len": "acc len", "acceptance_rate": "acc rate", "latency_s": "latency",
         "tokens_per_nfe": "tok/NFE"}


def frontier_rows(spec, study, run_ids: dict[int, str], batch_size: int | None = None) -> list[dict]:
    """One row per frontier trial (trial, pair, batch size, exact, config, params,
    objectives, metrics, its MLflow run id from `run_ids`), flagged `tied` when statistically
    indistinguishable from a neighbour at its batch size and `timing_flagged` when its
    controls ran far from the typical speed; every load's frontier, or those at `batch_size`.
    A row served at a request rate carries it (`request_rate`)."""
    rows = []
    for t in frontier_trials(study, spec, batch_size):
        rate = t.user_attrs["config"].get("request_rate")
        rows.append(
            {
                **({"request_rate": rate} if rate is not None else {}),
                "trial": t.number,
                "pair": t.user_attrs["pair"],
                "batch_size": stored_batch_size(t),
                "exact": t.user_attrs["exact"],
                "config": t.user_attrs["config"],
                "params": t.params,
                "objectives": dict(zip(spec.objectives, t.values)),
                "metrics": t.user_attrs.get("metrics", {}),
                "run_id": run_ids.get(t.number),
            }
        )
    noisy = flagged(timing_report(study))
    for key in {row_load(r) for r in rows}:
        group = [r for r in rows if row_load(r) == key]
        flags = tied([tuple(r["objectives"].values()) for r in group], [r["metrics"] for r in group],
                     tuple(spec.objectives.values()))
        for row, flag in zip(group, flags):
            row["tied"] = flag
            row["timing_flagged"] = row["trial"] in noisy
    return rows


def load_text(key: tuple[int, float | None], unit: str = "batch size") -> str:
    """` at batch size 4`, or ` at concurrency 4, 2 requests/s` (`unit`: a serving engine's
    batch size is its concurrency)."""
    return f" at {unit} {key[0]}" + (f", {key[1]:g} requests/s" if key[1] is not None else "")


def hypervolume_against(spec, study, points, reference: str, key: tuple = (1, None)) -> tuple[float, str]:
    """HV of `points` (trials at load `key`: stored.load) against the worst values observed at
    that load, or a pair's `ar` baseline at its batch size (`ar` = the first pair's, `ar:PAIR` =
    that pair's)."""
    directions = tuple(spec.objectives.values())
    batch_size = key[0]
    if reference == "worst":
        every = [tuple(t.values) for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
                 if load(t) == key]
        ref = default_reference(every, directions)
        return hypervolume(points, directions, ref), f"the worst observed, {_point(spec, ref)}"
    if not reference.startswith("ar"):
        raise ValueError(f"--reference: worst, ar or ar:PAIR; got {reference!r}")
    pair = reference.partition(":")[2] or spec.pairs[0].name
    ar = baseline(study, pair, "ar", batch_size)
    if any(m not in ar for m in spec.objectives):
        raise ValueError(
            f"--reference: the ar baseline of pair {pair} lacks some of {', '.join(spec.objectives)}"
        )
    ref = tuple(ar[m] for m in spec.objectives)
    return hypervolume(points, directions, ref), f"{pair}'s ar baseline, {_point(spec, ref)}"


def _point(spec, values: tuple[float, ...]) -> str:
    """A point in objective space with each objective's name and unit."""
    return ", ".join(f"{name} {metric_text(name, v)}" for name, v in zip(spec.objectives, values))


def sweep_cost(study) -> dict[str, float]:
    """What a sweep has decoded so far, trials and baselines: prompt-decodes, decode wall
    time, engine-seconds (all the time workers spent on them, a multi-fidelity search's
    untimed profiles included), and the prompt-decodes of trials racing stopped."""
    trials = study.get_trials(deepcopy=False)
    costs = [t.user_attrs.get("metrics", {}) for t in trials] + list(baselines(study).values())
    profiles = sum(t.user_attrs.get("fidelity", {}).get("profile_engine_s", 0.0) for t in trials)
    return {"prompt_decodes": float(sum(m.get("prompt_decodes", 0) for m in costs)),
            "decode_s": float(sum(m.get("decode_s", 0) for m in costs)),
            "engine_s": float(sum(m.get("engine_s", 0) for m in costs) + profiles),
            "stopped_prompt_decodes": float(sum(t.user_attrs.get(STOPPED, 0) for t in trials))}


@dataclass(frozen=True)
class ServerStarts:
    """The serving-engine servers a sweep started for the shards it measured, restarts
    included, and the seconds those starts took (part of its engine-seconds)."""

    count: int = 0
    seconds: float = 0.0


def server_starts(shards: Path) -> ServerStarts:
    """ServerStarts summed over a sweep's shard cache (`shards`, one JSON file a shard: its
    `engine_starts` and `engine_start_s`)."""
    count, seconds = 0, 0.0
    for path in shards.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):  # an unreadable entry is measured again
            shard = json.loads(path.read_text())
            count += int(shard.get("engine_starts", 0))
            seconds += float(shard.get("engine_start_s", 0.0))
    return ServerStarts(count, seconds)


def status_json(spec, study, starts: ServerStarts) -> dict:
    """`specsweep status --json`: the trials by state (interrupted apart from failed), what the
    sweep cost (sweep_cost's engine-seconds; `server_starts` and the seconds they took,
    `server_start_s`)."""
    trials = study.get_trials(deepcopy=False)
    interrupted = sum(t.state == optuna.trial.TrialState.FAIL and bool(t.user_attrs.get("interrupted"))
                      for t in trials)
    states = {state.name.lower(): sum(t.state == state for t in trials) for state in optuna.trial.TrialState}
    states["fail"] -= interrupted
    cost = sweep_cost(study)
    return {"sweep": spec.name, "trials": {**states, "interrupted": interrupted},
            "engine_seconds": round(cost["engine_s"], 3), "server_starts": starts.count,
            "server_start_s": round(starts.seconds, 3), "prompt_decodes": int(cost["prompt_decodes"])}


def fidelity_lines(trials: list, metric: str) -> list[str]:
    """What a multi-fidelity search measured and predicted: candidates profiled untimed,
    timed on every prompt, stopped; and, for those timed that had no timed prompt before
    (calibration), the first objective as predicted from the profile alone against the
    measurement."""
    decided = [t.user_attrs["fidelity"] | {"metrics": t.user_attrs.get("metrics", {})}
               for t in trials if "fidelity" in t.user_attrs]
    if not decided:
        return []
    full = max(d["profiled"] for d in decided)
    timed = [d for d in decided if d["timed"] >= full]
    errors = [abs(d["predicted_before_timing"] / d["metrics"][metric] - 1) for d in timed
              if d.get("predicted_before_timing") and d["metrics"].get(metric)]
    profile_s = sum(d.get("profile_engine_s", 0.0) for d in decided)
    stopped = sum(bool(d["stopped"]) for d in decided)
    line = (f"multi-fidelity: {len(decided)} candidates profiled untimed ({profile_s:.1f} engine-seconds), "
            f"{len(timed)} timed on every prompt, {stopped} stopped")
    if errors:
        line += (f"; {metric} predicted before timing vs measured: mean error "
                 f"{sum(errors) / len(errors):.1%}, largest {max(errors):.1%} ({len(errors)} trials)")
    return [line]


def failures(study) -> list:
    """The trials that failed with an error of their own (not interrupted), in trial order."""
    return [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))
            if "error" in t.user_attrs and not t.user_attrs.get("interrupted")]


def failure_lines(study, most: int = 10) -> list[str]:
    """One line per failed trial, `trial N failed: <its error>`, the first `most` of them."""
    failed = failures(study)
    lines = [f"trial {t.number} failed: {t.user_attrs['error']}" for t in failed[:most]]
    if len(failed) > most:
        lines.append(f"... and {len(failed) - most} more failed trials (each MLflow run's tag "
                     "specsweep.error says why)")
    return lines


def all_failed(study) -> str | None:
    """When no trial finished and one failed: `every trial failed (N); the first (trial i):
    <its error>`; else None."""
    S = optuna.trial.TrialState
    ended = study.get_trials(deepcopy=False, states=(S.COMPLETE, S.PRUNED, S.FAIL))
    failed = failures(study)
    if not failed or any(t.state != S.FAIL for t in ended):
        return None
    return (f"every trial failed ({len(failed)}); the first (trial {failed[0].number}): "
            f"{failed[0].user_attrs['error']}")


def status_lines(spec, study, reference: str = "worst", journal_cut: int = 0,
                 starts: ServerStarts = ServerStarts()) -> list[str]:
    """`specsweep status`: trial counts by state, baselines, frontier size and hypervolume,
    timing drift, worker hardware, where the MLflow runs are."""
    lines = []
    if journal_cut:
        lines.append(f"warning: the study journal's last record is cut short ({journal_cut} bytes): its "
                     "change is lost and that trial shows as running; `specsweep run SPEC --resume` repairs "
                     "the journal and asks it again")
    trials = study.get_trials(deepcopy=False)
    count = {state: sum(t.state == state for t in trials) for state in optuna.trial.TrialState}
    S = optuna.trial.TrialState
    # failed and marked interrupted (a journal cut between the two leaves the mark on a running trial)
    interrupted = sum(t.state == S.FAIL and bool(t.user_attrs.get("interrupted")) for t in trials)
    stopped = [t for t in trials if STOPPED in t.user_attrs]
    served = all(e.served for e in listed(spec.dimension_values()))
    unit = "concurrency" if served else "batch size"
    untimed = spec.search.whole_grid and served  # the search's, not racing's
    lines.append(f"sweep {spec.name}: {count[S.COMPLETE]} complete, {len(stopped)} "
                 f"{'not timed' if untimed else 'stopped by racing'}, "
                 f"{count[S.FAIL] - interrupted} failed, {interrupted} interrupted, "
                 f"{count[S.RUNNING]} running, {count[S.WAITING]} queued; " + (
                     "target: every grid point (multi-fidelity search)"
                     if spec.search.whole_grid else f"target {spec.search.trials}"))
    lines += fidelity_lines(trials, list(spec.objectives)[0])
    cost = sweep_cost(study)
    raced = (f"; {cost['stopped_prompt_decodes']:.0f} of them on trials racing stopped"
             if stopped and not untimed else "")
    lines.append(f"cost: {cost['prompt_decodes']:.0f} prompt-decodes, {cost['decode_s']:.1f} s of decoding, "
                 f"{cost['engine_s']:.1f} engine-seconds (trials and baselines{raced})"
                 + (f", {starts.count} server starts ({starts.seconds:.1f} s of them)" if served else ""))
    found = sorted(baselines(study).items())
    if found:
        lines.append("baselines (timed once, before the trials; a trial's ratio is against the controls "
                     "timed beside it):")
    for (pair, kind, size), metrics in found:
        speed = metrics.get("throughput_tps")
        shown = ([] if speed is None else [metric_text("throughput_tps", speed)]) + (
            [f"accuracy {metrics['accuracy']:.3g}"] if "accuracy" in metrics else [])
        at = f" at {unit} {size}" if size > 1 else ""
        lines.append(f"  {pair} {kind}{at}: {', '.join(shown)}")
    front = frontier_trials(study, spec)
    keys = sorted({load(t) for t in front}, key=load_order)
    for key in keys:
        points = [tuple(t.values) for t in front if load(t) == key]
        at = load_text(key, unit) if keys != [(1, None)] else ""
        lines.append(f"frontier{at}: {len(points)} trials on {', '.join(spec.objectives)}")
        value, where = hypervolume_against(spec, study, points, reference, key)
        lines.append(f"hypervolume{at}: {value:.6g} (reference: {where})")
    if not front:
        lines.append(f"frontier: 0 trials on {', '.join(spec.objectives)}")
    lines += failure_lines(study)
    report = timing_report(study)
    lines += describe(report)
    lines += ["hardware: " + ", ".join(f"{k} {v}" for k, v in kind.items()) for kind in report["hardware"]]
    attrs = study.user_attrs
    lines.append(f"MLflow: {attrs.get('tracking_uri')} parent run {attrs.get('parent_run')}")
    return lines
