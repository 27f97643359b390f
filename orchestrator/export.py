"""Export frontier configurations: one YAML each that `specsweep decode --config` and
`DecodeConfig.from_file` load to decode with exactly the measured settings."""

from __future__ import annotations

import datetime
import platform
import re
import subprocess
from pathlib import Path

import yaml

_WHERE = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|>|<)\s*(-?[\d.]+)\s*(?:\*\s*ar\.([a-z_]+))?\s*$")


def parse_where(where: str) -> tuple[str, str, float, str | None]:
    """`metric op number [* ar.metric]` -> (metric, op, number, baseline metric or None)."""
    m = _WHERE.match(where)
    if not m:
        raise ValueError(
            f"--where: expected '<metric> >= <number>' or '<metric> >= <number> * ar.<metric>'; got {where!r}"
        )
    return m.group(1), m.group(2), float(m.group(3)), m.group(4)


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


def export_configs(spec, study, rows: list[dict], out: Path, where: str | None = None) -> list[Path]:
    parsed = parse_where(where) if where else None
    pairs = {p.name: p.load_spec() for p in spec.pairs}
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for row in rows:
        baseline = study.user_attrs.get(f"baseline:{row['pair']}:ar", {})
        if parsed and not _keep(row, parsed, baseline):
            continue
        document = {
            "pair": pairs[row["pair"]],
            "config": row["config"],
            "exact": row["exact"],
            "metrics": row["metrics"],
            "provenance": {
                "sweep": spec.name,
                "trial": row["trial"],
                "mlflow_run_id": row["run_id"],
                "task": spec.task.model_dump(),
                "code_version": code_version(),
                "hardware": f"{platform.machine()} {platform.processor() or ''}".strip(),
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            },
        }
        if not row["exact"]:
            document["note"] = "lossy: this configuration does not reproduce the verifier's distribution"
        path = out / f"{spec.name}-trial{row['trial']}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        written.append(path)
    return written
