"""Export frontier configurations: one YAML each that `specsweep decode --config` and
`DecodeConfig.from_file` load to decode with exactly the measured settings."""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import platform
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from orchestrator.analysis.choice import FLOORS, PICKS, by_batch_size, pick, routes, speed_metric
from orchestrator.analysis.metrics import NUMBER, metric_text
from orchestrator.analysis.serving import SGLANG, cpu_port_note, drafter_serving, drafts_schedule
from orchestrator.analysis.timing import drift_key, timing_report
from orchestrator.engines import VLLM, engine_of
from orchestrator.files import write_yaml
from orchestrator.stored import baseline, load_order, row_load
from workloads.models.pairspec import refs
from workloads.serving.sglang_flags import flags, settings
from workloads.serving.vllm import CPU_KV_CACHE_GIB, EngineSettings

_WHERE = re.compile(rf"^\s*([a-z_]+)\s*(>=|<=|>|<)\s*({NUMBER})\s*(?:\*\s*ar\.([a-z_]+))?\s*$")


def parse_where(where: str) -> tuple[str, str, float, str | None]:
    """`metric op number [* ar.metric]` -> (metric, op, number, baseline metric or None)."""
    m = _WHERE.match(where)
    if not m:
        raise ValueError(
            f"--where: expected '<metric> >= <number>' or '<metric> >= <number> * ar.<metric>'; got {where!r}"
        )
    number = float(m.group(3))
    if not math.isfinite(number):
        raise ValueError(f"--where: {m.group(3)} is not a finite number")
    return m.group(1), m.group(2), number, m.group(4)


def parse_floors(text: str) -> tuple[float, ...]:
    """`--floors`: comma-separated accuracy floors in [0, 1]."""
    try:
        levels = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--floors: comma-separated numbers; got {text!r}") from None
    if not all(0 <= x <= 1 for x in levels):  # NaN fails too
        raise ValueError(f"--floors: accuracy floors must lie in [0, 1]; got {text!r}")
    return levels


def check_out(out: Path, force: bool) -> None:
    """Refuse an `--out` that is a file, a directory holding files unless `force`, or a place
    where no file can be written (tried with a temporary file, removed again with any
    directory made for it)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ValueError(f"--out: {out} already holds files; pass --force to write over them")
    made = [p for p in (out, *out.parents) if not p.exists()]
    try:
        for directory in reversed(made):
            directory.mkdir()
        tempfile.TemporaryFile(dir=out).close()
    except OSError as err:
        raise ValueError(f"--out: cannot write in {out} ({err.strerror or err})") from None
    finally:
        for directory in made:
            with contextlib.suppress(OSError):
                directory.rmdir()


def _keep(row: dict, where, baseline: dict) -> bool:
    metric, op, number, base_metric = where
    value = row["metrics"].get(metric)
    if value is None:
        raise ValueError(f"--where: trials have no metric {metric!r}")
    bound = number
    if base_metric is not None:
        if base_metric not in baseline:
            raise ValueError(f"--where: the ar baseline of pair {row['pair']} has no {base_metric!r}")
        bound *= baseline[base_metric]
    return {">=": value >= bound, "<=": value <= bound, ">": value > bound, "<": value < bound}[op]


def code_version() -> str:
    try:
        return (
            subprocess.run(
                ["git", "describe", "--always", "--dirty"],
                capture_output=True,
                text=True,
                cwd=Path(__file__).parent,
                timeout=5,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def recommendation(spec, rows: list[dict], floors: tuple[float, ...] = FLOORS, folder: str = "") -> list[str]:
    """What to deploy, one line per batch size (concurrency, under vLLM) and file: routes'
    pick (ranked by the sweep's speed: choice.speed_metric) for each accuracy floor it meets,
    how to serve it, and why: its speed ratio against the controls timed beside it (with its
    95% interval where one was computed), its tokens/s, accuracy and mean acceptance length; a
    warning where its timing was flagged. Files are named under `folder` (the export's, where
    one was written)."""
    by_trial = {r["trial"]: r for r in rows}
    picks: dict[tuple, list[float]] = {}
    for route in routes(rows, speed_metric(spec.objectives, rows), floors):
        if route["trial"] is not None:
            picks.setdefault((row_load(route), route["trial"]), []).append(route["accuracy_floor"])
    lines = []
    for ((size, rate), trial), met in picks.items():
        row = by_trial[trial]
        m, engine = row["metrics"], engine_of(row["config"])
        where = f"{'concurrency' if engine.served else 'batch size'} {size}" + (
            f" at {rate:g} requests/s" if rate is not None else "")
        floor = f"accuracy >= {met[0]:g}" if len(met) == 1 else f"accuracy >= {met[0]:g} to {met[-1]:g}"
        why = []
        if "throughput_ratio" in m:
            interval = (f" [{m['throughput_ratio_lo']:.2f}, {m['throughput_ratio_hi']:.2f}]"
                        if "throughput_ratio_lo" in m else "")
            why.append(f"{m['throughput_ratio']:.2f}x{interval} the speed of {engine.controls} "
                       "timed beside it")
        why.append(metric_text("throughput_tps", m["throughput_tps"]))
        why.append(f"accuracy {m.get('accuracy', float('nan')):.3g}")
        if m.get("mean_accept_len"):
            why.append(f"accept length {m['mean_accept_len']:.2f}")
        pair = next(p.load_spec() for p in spec.pairs if p.name == row["pair"])
        serving = serving_settings(spec.pair_kinds.get(row["pair"]), pair, row["config"])
        serve = _serve_line(f"{folder}trial{trial}", serving)
        lines.append(f"{where}, {floor}: {folder}trial{trial}.yaml ({serve}): {', '.join(why)}"
                     + ("; warning: timing flagged (its controls ran far from the sweep's typical speed)"
                        if row.get("timing_flagged") else ""))
    return lines or [f"none: no frontier configuration reaches accuracy {min(floors):g}, the lowest floor "
                     "(export --floors sets them)"]


def holds(mapping: dict[int, dict], scheduled: bool, how: str, speed: str) -> str:
    """by_batch_size.yaml's first line: what it holds, and which batch sizes vLLM cannot serve."""
    served = [size for size, document in mapping.items() if VLLM.section in (document.get("serving") or {})]
    unit = "concurrency" if all(engine_of(d["config"]).served for d in mapping.values()) else "batch size"
    rule = "fastest" if how == "all" else how
    text = f"per {unit}, the frontier configuration --pick {rule} chose there, ranked by {speed} and accuracy"
    if len(served) == len(mapping):
        return text + ("; vllm.speculative_config below: one vLLM server that drafts as each chose"
                       if scheduled else "; each entry's serving.vllm is its vLLM setting")
    others = ", ".join(str(size) for size in mapping if size not in served)
    return text + (f"; at {unit} {others} no vLLM setting (specsweep only: specsweep decode --config "
                   "trialN.yaml)") + ("; the rest carry theirs under serving.vllm" if served else "")


def is_export(path: Path) -> bool:
    """Whether a written file is a configuration's export (trial<N>.yaml), not its vLLM file."""
    return path.name.startswith("trial") and not path.name.endswith(".vllm.yaml")


def _write(out: Path, document: dict) -> list[Path]:
    """trial<N>.yaml, and beside it trial<N>.vllm.yaml where vLLM serves the configuration:
    the file `vllm serve --config` takes as it is (`serve_options`)."""
    name = f"trial{document['provenance']['trial']}"
    written = [out / f"{name}.yaml"]
    vllm = (document.get("serving") or {}).get(VLLM.section)
    if vllm is not None:
        written.append(out / f"{name}.vllm.yaml")
        cpu = not any(h.get("gpus") for h in document["provenance"]["hardware"])
        write_yaml(written[1], serve_options(document["pair"], vllm["speculative_config"], cpu))
    write_yaml(written[0], document)
    return written


def serve_options(pair: str | dict, speculative: dict | None, cpu: bool) -> dict:
    """`vllm serve --config` options that serve `pair`'s verifier with `speculative` (None: no
    speculation) under the engine settings the sweep measured with (EngineSettings); measured
    on CPUs, with their fixed KV cache (vllm.CPU_ENV), which `vllm serve` reads from no file."""
    speculative_json = None if speculative is None else json.dumps(speculative)
    cache = CPU_KV_CACHE_GIB << 30 if cpu else None
    return EngineSettings(refs(pair)["verifier"], speculative_json, kv_cache_bytes=cache).options()


def _serve_line(name: str, serving: dict | None) -> str:
    """The export's first line: how to serve it, or why no serving engine can."""
    if serving and VLLM.section in serving:
        return f"vllm serve --config {name}.vllm.yaml"
    if serving and "specsweep_only" in serving:
        return (f"specsweep only ({', '.join(serving['specsweep_only'])}: no vLLM or SGLang setting); "
                f"specsweep decode --config {name}.yaml")
    return (f"specsweep only (vLLM and SGLang serve no drafter of this pair); specsweep decode --config "
            f"{name}.yaml")


def serving_settings(kind, pair: str | dict, config: dict) -> dict | None:
    """How the serving engines run `config` on `pair` (of `kind`): a config measured in vLLM
    with its own settings, as they ran; one of specsweep's with its drafter's method where the
    kind has one (analysis.serving.drafter_serving); SGLang's flags and its launch command where
    SGLang has the method. None where no engine serves the pair's drafter."""
    found = refs(pair)
    engine = engine_of(config)
    own = engine.own_setting(config, found.get("drafter"))
    if own is not None:
        speculative = own["speculative_config"]
        serving = {engine.section: own}
        if speculative and kind.sglang_algorithm and speculative["method"] == kind.serving_method:
            # the same decoding in SGLang
            wanted = settings(kind.sglang_algorithm, found["drafter"], speculative["num_speculative_tokens"])
            serving[SGLANG] = flags(wanted)
    elif kind is not None and kind.serving_method is not None:
        serving = drafter_serving(kind, found["drafter"], config)
    else:
        return None
    if SGLANG in serving:
        serving["sglang_command"] = shlex.join(["python", "-m", "sglang.launch_server", "--model-path",
                                                found["verifier"], *serving[SGLANG]])
    return serving


def _document(spec, study, row: dict, pairs: dict, timing: dict) -> dict:
    """What an export holds of one frontier row: how to serve it (`serve`, first), pair, batch
    size, config, exactness, metrics, provenance, serving settings and notes."""
    document = {
        "serve": "",
        "pair": pairs[row["pair"]],
        "batch_size": row.get("batch_size", 1),
        "config": row["config"],
        "exact": row["exact"],
        "tied": row.get("tied", False),
        "metrics": row["metrics"],
        "provenance": {
            "sweep": spec.name,
            "trial": row["trial"],
            "mlflow_run_id": row["run_id"],
            "task": spec.task.model_dump(),
            "code_version": code_version(),
            "hardware": study.user_attrs.get("hardware") or [{"cpu": platform.machine()}],
            "timing": timing["drift"].get(drift_key(row["pair"], row["config"], row_load(row)), {}),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        },
    }
    serving = serving_settings(spec.pair_kinds.get(row["pair"]), pairs[row["pair"]], row["config"])
    if serving is not None:
        document["serving"] = serving
    document["serve"] = _serve_line(f"trial{row['trial']}", serving)
    notes = []
    if not row["exact"]:
        notes.append("lossy: this configuration does not reproduce the verifier's distribution")
    if row.get("timing_flagged"):
        notes.append("timing flagged: its ar controls ran far from the sweep's typical speed")
    port = cpu_port_note(((serving or {}).get(VLLM.section) or {}).get("speculative_config"))
    if port:
        notes.append(port)
    if notes:
        document["note"] = "; ".join(notes)
    return document


def matching(study, rows: list[dict], where: str | None) -> list[dict]:
    """The frontier rows that meet `--where` (all of them without one)."""
    parsed = parse_where(where) if where else None
    return [r for r in rows
            if not parsed or _keep(r, parsed, baseline(study, r["pair"], "ar", r.get("batch_size", 1)))]


def export_configs(
    spec,
    study,
    rows: list[dict],
    out: Path,
    where: str | None = None,
    how: str = "all",
    floors: tuple[float, ...] = FLOORS,
) -> list[Path]:
    """Write the chosen frontier configs (chosen per batch size), routes.yaml,
    by_batch_size.yaml and the sweep's plots into `out`."""
    from orchestrator.analysis.plots import sweep_plots

    pairs = {p.name: p.load_spec() for p in spec.pairs}
    kept = matching(study, rows, where)
    if how not in PICKS:
        raise ValueError(f"--pick: one of {', '.join(PICKS)}; got {how!r}")
    speed = speed_metric(spec.objectives, kept)
    keys = sorted({row_load(r) for r in kept}, key=load_order)
    chosen = [r for key in keys for r in pick([r for r in kept if row_load(r) == key], how, speed)]
    if not chosen:
        return []
    timing = timing_report(study)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for row in chosen:
        written += _write(out, _document(spec, study, row, pairs, timing))
    table = routes(kept, speed, floors)
    write_yaml(out / "routes.yaml", {"sweep": spec.name, "routes": table})
    # one setting per batch size, for loads without a rate (a rate is the traffic, not a setting)
    unrated = by_batch_size([r for r in kept if "request_rate" not in r], how, speed)
    mapping = {size: _document(spec, study, row, pairs, timing) for size, row in unrated.items()}
    schedule = drafts_schedule({size: document.get("serving") for size, document in mapping.items()})
    body = {"holds": holds(mapping, schedule is not None, how, speed), "sweep": spec.name,
            "by_batch_size": mapping}
    if schedule is not None:  # one vLLM server that drafts as chosen at each batch size
        body[VLLM.section] = {"speculative_config": schedule}
    write_yaml(out / "by_batch_size.yaml", body)
    written.append(out / "by_batch_size.yaml")
    for row in table:  # a route names a file: make sure it exists even when --pick left it out
        if row["trial"] is not None and not (out / row["file"]).exists():
            source = next(r for r in kept if r["trial"] == row["trial"])
            written += _write(out, _document(spec, study, source, pairs, timing))
    sweep_plots(spec, study, out / "plots")
    return written
