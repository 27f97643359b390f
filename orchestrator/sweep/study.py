"""A sweep's state and everything stored with it: the directory `<root>/.specsweep/<name>/`,
its Optuna study (a journal file, or the spec's RDB storage on a cluster), the lock that
keeps one process at a time on it, the journal repair after a crash, and the rule for what
a resumed sweep may change."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path

import optuna
import yaml

from orchestrator.errors import did_you_mean
from orchestrator.files import write_atomic
from orchestrator.search.samplers import directions, make_sampler
from orchestrator.spec.sweep import SweepSpec, parse_spec


class SweepError(ValueError):
    """A sweep that cannot start (existing state without --resume, nothing to resume...)."""


def state_dir(root: Path, name: str) -> Path:
    return root / ".specsweep" / name


def study_storage(path: Path, spec: SweepSpec):
    """The spec's RDB storage (a cluster), else a journal file in the sweep directory."""
    from optuna.storages import JournalStorage, RDBStorage

    from orchestrator.sweep.interrupts import HeldJournal

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if spec.search.storage:
        return RDBStorage(spec.search.storage)
    return JournalStorage(HeldJournal(str(path / "study.journal")))


def journal_cut(path: Path) -> int:
    """Bytes after the journal's last newline: a record cut short by a crash or a full disk
    (its change is lost, and Optuna would append the next record onto it)."""
    journal = path / "study.journal"
    if not journal.is_file() or journal.stat().st_size == 0:
        return 0
    with open(journal, "rb") as f:
        f.seek(max(0, journal.stat().st_size - (1 << 16)))
        tail = f.read()
    return len(tail) - tail.rfind(b"\n") - 1 if b"\n" in tail else len(tail)


def repair_journal(path: Path) -> int:
    """Cut a journal back to its last whole record, keeping the damaged copy beside it as
    study.journal.damaged; returns the bytes cut (0: nothing to repair)."""
    cut = journal_cut(path)
    if cut:
        journal = path / "study.journal"
        shutil.copyfile(journal, path / "study.journal.damaged")
        with open(journal, "r+b") as f:
            f.truncate(journal.stat().st_size - cut)
    return cut


def study_exists(path: Path, spec: SweepSpec) -> bool:
    if spec.search.storage is None:
        return (path / "study.journal").exists()
    return spec.name in optuna.get_all_study_names(study_storage(path, spec))


def open_study(path: Path, spec: SweepSpec, create: bool = True) -> optuna.Study:
    storage = study_storage(path, spec)
    if not create:
        return optuna.load_study(study_name=spec.name, storage=storage)
    return optuna.create_study(
        study_name=spec.name,
        storage=storage,
        load_if_exists=True,
        directions=directions(spec),
        sampler=make_sampler(spec),
    )


def load_sweep(root: Path, name: str) -> tuple[SweepSpec, optuna.Study]:
    """The spec and study of an existing sweep, for status / frontier / export."""
    path = state_dir(root, name)
    if not (path / "spec.yaml").is_file():
        if path.is_dir() and any(path.iterdir()):  # a journal or shards, but its spec deleted
            raise SweepError(f"sweep {name!r}: its state in {path} has no spec.yaml (deleted?); put the "
                             "spec the sweep ran with back there, or start over with specsweep run SPEC "
                             "--fresh")
        swept = [p.parent.name for p in path.parent.glob("*/spec.yaml")]
        raise SweepError(f"sweep {name!r}: no state in {path}{did_you_mean(name, swept)} (run it first: "
                         "specsweep run SPEC)")
    spec = parse_spec(yaml.safe_load((path / "spec.yaml").read_text()), str(path / "spec.yaml"))
    check_not_empty(path, spec)
    if not study_exists(path, spec):
        raise SweepError(f"sweep {name!r}: no study in its storage (run it first: specsweep run SPEC)")
    journal = path / "study.journal"
    try:
        study = open_study(path, spec, create=False)
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # a record Optuna cannot replay
        if spec.search.storage is not None:
            raise
        raise SweepError(f"sweep {name!r}: its study journal {journal} is damaged: "
                         f"{journal_damage(journal) or f'its records do not replay ({err!r})'}") from None
    _follow_moved_store(study, root)
    return spec, study


def _follow_moved_store(study: optuna.Study, root: Path) -> None:
    """A state root copied or moved whole (`.specsweep/` with its mlflow.db) reads its own
    store: a study that names the default store of another root is pointed at this root's
    (its runs are the same rows, copied with it). Left alone where this root has none, or the
    study is read-only here."""
    stored = study.user_attrs.get("tracking_uri", "")
    local = f"sqlite:///{(root / '.specsweep' / 'mlflow.db').resolve()}"
    if (stored != local and stored.startswith("sqlite:///") and stored.endswith("/.specsweep/mlflow.db")
            and (root / ".specsweep" / "mlflow.db").is_file()):
        with contextlib.suppress(OSError):
            study.set_user_attr("tracking_uri", local)


def check_not_empty(path: Path, spec: SweepSpec) -> None:
    """Refuse a local journal with no record left (emptied by a crash or a full disk): it
    holds no study to read, and resuming it would start a new one beside the sweep's MLflow
    runs, logging every trial a second time."""
    journal = path / "study.journal"
    if spec.search.storage is None and journal.is_file() and journal.stat().st_size == 0:
        raise SweepError(f"sweep {spec.name!r}: its study journal {journal} is empty (0 bytes: no study "
                         "recorded); start over with specsweep run SPEC --fresh")


def journal_damage(journal: Path) -> str | None:
    """The first whole line of a journal that is not a JSON record (`line 4 is not a journal
    record`), or None; a last line cut short is `journal_cut`'s and not damage."""
    with open(journal, "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                return None
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict) or "op_code" not in record:
                shown = line.rstrip()[:40].decode(errors="replace")
                return f"line {number} is not a journal record ({shown!r})"
    return None


RESUMABLE = ("search.trials", "search.parallel", "cluster")  # what a resumed sweep may change


def changed_fields(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two spec dumps."""
    out = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}{key}"
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_fields(a, b, f"{path}.")
        elif a != b:
            out.append(path)
    return out


def check_resumable(path: Path, spec: SweepSpec) -> None:
    """Refuse to resume a sweep whose spec changed in anything but RESUMABLE (its trials would
    not be comparable, and Optuna's distributions would no longer match)."""
    stored = path / "spec.yaml"
    if not stored.is_file():
        return
    old = parse_spec(yaml.safe_load(stored.read_text()), str(stored)).model_dump()
    changed = [f for f in changed_fields(old, spec.model_dump())
               if not any(f == r or f.startswith(r + ".") for r in RESUMABLE)]
    if changed:
        raise SweepError(f"spec: --resume with a changed spec ({', '.join(changed)}); restore it or start "
                         "over with --fresh")


class StateLock:
    """`.specsweep/<name>.lock`, held from `acquire` to `release`: a second run, resume or
    --fresh of the same sweep is refused instead of sharing or deleting live state."""

    def __init__(self, root: Path, name: str):
        self.name, self.dir = name, state_dir(root, name)
        self.path = self.dir.with_suffix(".lock")
        self._handle = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 (held open until release)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise SweepError(f"sweep {self.name!r} is in use by {holder}; wait for it or stop it "
                             "first") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is None:
            return
        if not self.dir.exists():  # a start that failed leaves no trace
            self.path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.path.parent.rmdir()  # only when empty
        self._handle.close()  # closing the file releases the lock
        self._handle = None


def open_state(path: Path, spec: SweepSpec, spec_yaml: str, resume: bool, fresh: bool) -> None:
    """Create (or with `resume`, check and repair; with `fresh`, first delete) the sweep's
    state directory, its shard cache and the spec it ran with."""
    if resume:
        check_resumable(path, spec)
        # the trial whose record was cut shows as running: it is asked again, from the cache
        repair_journal(path)
        # the journal's file lock, left by a writer killed inside an append (Optuna's next
        # append would wait 30 s for it, then take it by force); this process holds the
        # sweep's own lock, so no other process appends to its journal now
        (path / "study.journal.lock").unlink(missing_ok=True)
        check_not_empty(path, spec)  # after the repair: a journal of one cut record is now empty
    if fresh and study_exists(path, spec) and spec.search.storage:
        optuna.delete_study(study_name=spec.name, storage=study_storage(path, spec))
    if fresh and path.exists():
        shutil.rmtree(path)
    exists = study_exists(path, spec)
    if exists and not resume and never_started(path, spec):  # its start failed: nothing to keep
        if spec.search.storage:
            optuna.delete_study(study_name=spec.name, storage=study_storage(path, spec))
        shutil.rmtree(path, ignore_errors=True)
        exists = False
    if exists and not resume:
        raise SweepError(f"sweep {spec.name!r} already has state in {path}; pass --resume to "
                         "continue it or --fresh to start over")
    if resume and not exists:
        raise SweepError(f"sweep {spec.name!r}: nothing to resume in {path}")
    path.mkdir(parents=True, exist_ok=True)
    (path / "shards").mkdir(exist_ok=True)
    write_atomic(path / "spec.yaml", spec_yaml)


def never_started(path: Path, spec: SweepSpec) -> bool:
    """Whether a sweep's study holds nothing a run made: no trial, and no MLflow parent run (a
    session that died before its workers came up). A study that does not replay is kept."""
    try:
        study = open_study(path, spec, create=False)
    except Exception:  # noqa: BLE001 (damaged state is the resume path's to report)
        return False
    return not study.get_trials(deepcopy=False) and "parent_run" not in study.user_attrs
