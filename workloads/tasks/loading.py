"""Dataset records through `datasets`: from the hub (or its local cache) or a local file.

A local `--data` path is a JSON, JSON Lines or parquet file, or a directory holding one;
it goes through `datasets.load_dataset` like a hub id, so both paths yield the same records.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def _kind(path: Path) -> str | None:
    """The datasets builder for a file, looking through one compression suffix."""
    suffixes = path.suffixes[-2:] if path.suffix in (".gz", ".bz2", ".xz", ".zst") else path.suffixes[-1:]
    return _BUILDERS.get(suffixes[0]) if suffixes else None


class DataError(ValueError):
    """A dataset that cannot be loaded; the message says how to supply it."""


@dataclass(frozen=True)
class Source:
    """Where a task's records live on the hub, and what a local file must contain."""

    hub_id: str
    split: str
    fields: tuple[str, ...]  # required fields of each record
    config: str | None = None


def _local_files(path: Path) -> tuple[str, list[str]]:
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if _kind(p))
    if not files:
        raise DataError(f"data: no .json, .jsonl or .parquet file in {path}")
    builders = {_kind(p) for p in files}
    if None in builders or len(builders) > 1:
        raise DataError(f"data: {path} must be JSON, JSON Lines or parquet (one kind); got "
                        f"{', '.join(p.name for p in files)}")
    return builders.pop(), [str(p) for p in files]


def _blank(file: str) -> bool:
    """Whether a data file holds nothing but whitespace (judged from its first 4 KiB)."""
    with open(file, "rb") as f:
        return not f.read(4096).strip()


def load_records(task: str, source: Source, data: str | Path | None = None) -> list[dict]:
    """Every record of the task's split, in dataset order, each checked for source.fields."""
    import datasets

    datasets.disable_progress_bars()
    if data is not None:
        path = Path(data).expanduser()
        if not path.exists():
            raise DataError(f"data: {path} does not exist")
        builder, files = _local_files(path)
        if all(_blank(f) for f in files):
            raise DataError(f"data: {path} holds no records ({task} needs {', '.join(source.fields)})")
        try:
            ds = datasets.load_dataset(builder, data_files=files, split="train")
        except Exception as e:  # malformed JSON/parquet surfaces as many exception types
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise DataError(f"data: cannot read {path} as {builder}: {reason}") from None
        where = str(path)
    else:
        try:
            ds = datasets.load_dataset(source.hub_id, source.config, split=source.split)
        except Exception as e:  # offline, gated, renamed: all end the same way for the user
            raise DataError(
                f"{task}: dataset {source.hub_id} is not reachable ({type(e).__name__}); download it "
                f"or pass --data PATH (JSON, JSONL or parquet with fields {', '.join(source.fields)})"
            ) from e
        where = source.hub_id
    records = ds.to_list()
    if not records:
        raise DataError(f"data: {where} holds no records ({task} needs {', '.join(source.fields)})")
    for i, record in enumerate(records):
        missing = [f for f in source.fields if f not in record]
        if missing:
            raise DataError(f"data: record {i} of {where} lacks field(s) {', '.join(missing)} "
                            f"({task} needs {', '.join(source.fields)})")
    return records


def subset(count: int, n: int | None, seed: int) -> list[int]:
    """Indices of a deterministic subset: all of them in order when n is None or covers the
    set, else the first n of a permutation fixed by seed (so a smaller n is a prefix)."""
    if n is None or n >= count:
        return list(range(count))
    if n < 0:
        raise ValueError(f"n must be >= 0; got {n}")
    order = list(range(count))
    random.Random(f"subset:{seed}").shuffle(order)
    return order[:n]
