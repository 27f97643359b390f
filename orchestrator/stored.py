"""The names of what a sweep stores on its Optuna study, read back by status, frontier and
export: one place, so a writer and its readers cannot drift apart.

Study attributes: `baseline:<pair>:<kind>` (below; `<kind>@<b>` at batch size b > 1),
`parent_run` and `tracking_uri` (where its MLflow runs are), `hardware` (one entry per kind
of worker). Trial attributes: `pair`, `config` (DecodeConfig.to_dict()), `batch_size`
(absent: 1), `exact`, `metrics`, `constraints` (<= 0 feasible), `control` (the ar
controls' speed), and for trials that did not finish `error`, `interrupted` (asked again on
resume) or `duplicate` (pruned, another point asked instead). And in MLflow, each trial
run's per-prompt records (`RECORDS`, read back by `logged_records`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import sqlite3
from pathlib import Path


class StoreError(ValueError):
    """An MLflow store that cannot be read: one line naming it."""


def store_client(uri: str):
    """An MlflowClient of `uri`, once `check_store` passes. A sqlite store is opened under a
    lock beside it (`<store>.lock`): opening one creates and migrates its tables, and two
    sweeps doing that at once on one new store collide (sqlite: duplicate column name)."""
    from mlflow.tracking import MlflowClient

    check_store(uri)
    path = sqlite_path(uri)
    if path is None or not path.parent.is_dir():
        return MlflowClient(tracking_uri=uri)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        return MlflowClient(tracking_uri=uri)


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///` store, or None for any other store."""
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0]) if uri.startswith("sqlite:///") else None


def check_store(uri: str) -> None:
    """For a sqlite store that exists, a StoreError naming the file unless sqlite reads it
    whole (`PRAGMA quick_check`): a truncated or overwritten store otherwise fails deep inside
    SQLAlchemy, in a traceback. Creates nothing."""
    path = sqlite_path(uri)
    if path is not None and path.is_file():
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                verdict = db.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.Error as err:
            verdict = str(err)
        if verdict != "ok":
            raise StoreError(f"tracking: the MLflow store {path} is damaged ({verdict.splitlines()[0]}); "
                                "restore it from a copy, or move it aside to start a new one")



STOPPED = "racing_stopped"  # trial attribute: the prompts a trial racing stopped was measured on

BASELINE = "baseline:"  # study attribute prefix: baseline:<pair>:<kind> -> that baseline's metrics


def baseline_key(pair: str, kind: str, batch_size: int = 1) -> str:
    return f"{BASELINE}{pair}:{kind}" + (f"@{batch_size}" if batch_size != 1 else "")


def baselines(study) -> dict[tuple[str, str, int], dict]:
    """(pair, kind, batch size) -> metrics of every baseline the study holds."""
    out = {}
    for key, metrics in study.user_attrs.items():
        if key.startswith(BASELINE):
            pair, _, kind = key.removeprefix(BASELINE).rpartition(":")
            kind, _, size = kind.partition("@")
            out[pair, kind, int(size or 1)] = metrics
    return out


def baseline(study, pair: str, kind: str = "ar", batch_size: int = 1) -> dict:
    """One baseline's metrics ({} when the sweep has none)."""
    return study.user_attrs.get(baseline_key(pair, kind, batch_size), {})


def batch_size(trial) -> int:
    """The batch size a trial decoded at."""
    return int(trial.user_attrs.get("batch_size", 1))


def load(trial) -> tuple[int, float | None]:
    """The load a trial was measured under: (batch size or concurrency, request rate or None).
    Speeds under different loads are not comparable, so each load has its own frontier."""
    return batch_size(trial), trial.user_attrs.get("config", {}).get("request_rate")


def row_load(row: dict) -> tuple[int, float | None]:
    """`load` of a frontier row."""
    return row.get("batch_size", 1), row.get("request_rate")


def load_order(key: tuple[int, float | None]) -> tuple[int, float]:
    """Sort key of a load: by size, then rate (all at once, no rate, first)."""
    return key[0], key[1] or 0.0


RECORDS = "prompts.jsonl"  # a trial run's artifact: one JSON record per prompt


def logged_records(client, run_id: str) -> list[dict] | None:
    """A run's per-prompt records (`RECORDS`) in index order, through an MlflowClient; None
    when it has none."""
    if RECORDS not in {a.path for a in client.list_artifacts(run_id)}:
        return None
    text = Path(client.download_artifacts(run_id, RECORDS)).read_text()
    return sorted((json.loads(line) for line in text.splitlines()), key=lambda r: r["index"])
