"""The sweep driver: Optuna ask/tell over the joint space, shards on Ray workers, MLflow.

Flow: validate the spec; open (or resume) the sweep state in `<root>/.specsweep/<name>/`
(Optuna journal, shard cache, unsent MLflow logs); start the workers; run the baselines of
every pair; then keep `search.parallel` trials in flight, each split into one shard per
eligible worker, until `search.trials` trials have finished (or the grid is exhausted).

Faults: a shard whose worker died is queued again (preferably for another worker) and Ray
restarts the actor; a shard that raises is retried once more, after which its trial is
recorded as failed in Optuna and MLflow and the sweep goes on. Ctrl-C (or SIGTERM) marks
the trials in flight as failed-interrupted, ends the parent run as KILLED and leaves the
state for `--resume`, which re-asks those configurations and reuses their finished shards
from the cache, so no finished trial or shard runs twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import ray
import yaml

from orchestrator import raycluster
from orchestrator.files import write_atomic
from orchestrator.metrics import (
    control_speed,
    controlled_ratios,
    paired_bootstrap,
    pareto_front,
    trial_metrics,
)
from orchestrator.space import Candidate, choose_config, grid, params_key
from orchestrator.spec import SpecError, SweepSpec, constraint_terms
from orchestrator.tracking import Tracker, TrackingError, TrialLog, check_reachable, default_uri
from orchestrator.workers import Shard, start_workers
from workloads.decoding import DecodeConfig, is_exact
from workloads.tasks import get_task

MAX_ATTEMPTS = 2  # per shard, for errors raised by the decode itself
MAX_LOST = 3  # per shard, for workers that died under it
DEPTH = 2  # shards queued per worker
MIN_SHARD = 8  # prompts: smaller trials run whole, several trials side by side instead


class SweepError(ValueError):
    """A sweep that cannot start (existing state without --resume, nothing to resume...)."""


def state_dir(root: Path, name: str) -> Path:
    return root / ".specsweep" / name


def study_storage(path: Path, spec: SweepSpec):
    """The spec's RDB storage (a cluster), else a journal file in the sweep directory."""
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if spec.search.storage:
        return RDBStorage(spec.search.storage)
    return JournalStorage(JournalFileBackend(str(path / "study.journal")))


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
        directions=["maximize" if d == "max" else "minimize" for d in spec.objectives.values()],
        sampler=make_sampler(spec),
    )


def make_sampler(spec: SweepSpec) -> optuna.samplers.BaseSampler:
    s = spec.search

    def constraints(trial: optuna.trial.FrozenTrial) -> list[float]:
        return trial.user_attrs.get("constraints", [0.0])

    kwargs = {"constraints_func": constraints} if spec.constraints else {}
    if s.sampler in ("grid", "random"):  # grid points are enqueued; see Driver._ask
        return optuna.samplers.RandomSampler(seed=s.seed)
    if s.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=s.seed, constant_liar=True, **kwargs)
    if s.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=s.seed, **kwargs)
    return optuna.samplers.GPSampler(seed=s.seed, **kwargs)


def baseline_config(spec: SweepSpec, kind: str) -> DecodeConfig:
    """`ar` (verifier alone) or `diffusion` (drafter alone, one token per step) with the
    sweep's first sampling settings and output budget."""
    dims = spec.dimension_values()
    first = {k: dims[k][0] for k in ("temperature", "top_k", "top_p", "max_new_tokens") if k in dims}
    if kind == "ar":
        return DecodeConfig(schedule="ar", **first)
    block = dims.get("block", [DecodeConfig.block])[0]
    return DecodeConfig(schedule="diffusion", block=block, steps=block, **first)


@dataclass
class Job:
    """One trial (or baseline) in flight."""

    key: str  # "trial:<number>" or "baseline:<pair>:<kind>"
    label: str
    candidate: Candidate
    shards: list[Shard]
    trial: optuna.Trial | None = None
    results: dict[int, dict] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)
    lost: dict[int, int] = field(default_factory=dict)
    start: float = field(default_factory=time.time)
    error: str | None = None
    gpus: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.shards)


@dataclass
class Progress:
    """What the CLI shows while a sweep runs."""

    target: int
    finished: int = 0
    failed: int = 0
    frontier: int = 0
    note: str = ""


class Driver:
    def __init__(
        self,
        spec: SweepSpec,
        spec_yaml: str,
        root: Path,
        ray_address: str | None = None,
        tracking_uri: str | None = None,
        trials: int | None = None,
        on_progress: Callable[[Progress], None] | None = None,
    ):
        self.spec, self.spec_yaml = spec, spec_yaml
        self.dir = state_dir(root, spec.name)
        self.root = root
        self.ray_address = ray_address or (None if spec.cluster.address == "local" else spec.cluster.address)
        self.tracking_uri = tracking_uri or spec.tracking.uri or default_uri(root / ".specsweep")
        self.target = trials or spec.search.trials
        self.on_progress = on_progress or (lambda p: None)
        self.jobs: dict[str, Job] = {}
        self.pending: list[tuple[Job, int, int | None]] = []  # (job, shard index, worker to avoid)
        self.inflight: dict = {}  # ray ref -> (job, shard index, worker index)
        self.load: dict[int, int] = {}  # shards queued or running per worker
        self.restarting: dict[int, ray.ObjectRef] = {}  # dead workers -> the probe that says they are back
        self.decode_s = 0.0  # Σ wall_s of the decodes of finished trials
        self.trials_s = 0.0  # wall time of the trial phase (after the baselines)

    # -- setup -------------------------------------------------------------------------------

    def prepare(self, resume: bool = False, fresh: bool = False) -> None:
        """Load the task and format its prompts, then set up the sweep state; any error in
        the first part leaves nothing behind. `run` calls it when the caller has not."""
        if self.spec.task.name == "arith" and self.spec.task.limit is None:
            raise SpecError("spec: task.limit: arith generates its prompts; say how many (e.g. 40)")
        c = self.spec.cluster
        if not self.ray_address and c.slots == "auto" and c.resource not in ("cpu", "gpu"):
            raise SpecError(f"spec: cluster.slots: auto needs a cluster that declares {c.resource!r}; "
                            "give a number of slots for a local run")
        task = get_task(self.spec.task.name, self.spec.task.data)
        self.examples = task.examples(n=self.spec.task.limit, seed=self.spec.task.seed)
        self.by_index = {e.index: e for e in self.examples}
        self.prompts = self._format_prompts(task)
        check_reachable(self.tracking_uri)
        if self.ray_address:
            raycluster.check_head(self.ray_address)
        existed = self.dir.exists()
        try:
            self._lock()
            self._open_state(resume, fresh)
        except OSError as err:  # a read-only root, a full disk: leave nothing half made
            if not existed:
                shutil.rmtree(self.dir, ignore_errors=True)
            self._unlock()
            raise SweepError(f"--root: cannot write the sweep state in {self.dir} "
                             f"({err.strerror or err})") from None
        except BaseException:
            self._unlock()
            raise

    def _open_state(self, resume: bool, fresh: bool) -> None:
        if resume:
            check_resumable(self.dir, self.spec)
            # the trial whose record was cut shows as running: it is asked again, from the cache
            repair_journal(self.dir)
        if fresh and study_exists(self.dir, self.spec) and self.spec.search.storage:
            optuna.delete_study(study_name=self.spec.name, storage=study_storage(self.dir, self.spec))
        if fresh and self.dir.exists():
            shutil.rmtree(self.dir)
        exists = study_exists(self.dir, self.spec)
        if exists and not resume:
            raise SweepError(f"sweep {self.spec.name!r} already has state in {self.dir}; pass --resume to "
                             "continue it or --fresh to start over")
        if resume and not exists:
            raise SweepError(f"sweep {self.spec.name!r}: nothing to resume in {self.dir}")
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "shards").mkdir(exist_ok=True)
        write_atomic(self.dir / "spec.yaml", self.spec_yaml)

    def _lock(self) -> None:
        """Hold `.specsweep/<name>.lock` until the run ends (`_unlock`): a second run, resume or
        --fresh of the same sweep is refused instead of sharing or deleting live state."""
        import fcntl
        import os

        path = state_dir(self.root, self.spec.name).with_suffix(".lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 (held open until _unlock)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise SweepError(f"sweep {self.spec.name!r} is in use by {holder}; wait for it or stop it "
                             "first") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._lock_handle = handle

    def _unlock(self) -> None:
        handle = getattr(self, "_lock_handle", None)
        if handle is None:
            return
        if not self.dir.exists():  # a start that failed leaves no trace
            path = Path(handle.name)
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # only when empty
        handle.close()  # closing the file releases the lock
        self._lock_handle = None

    def _format_prompts(self, task) -> dict[str, dict[int, str]]:
        """The prompt each pair decodes (and MLflow logs) per example index: the task's
        zero-shot prompt with the spec's shots, system prompt and the pair's chat template."""
        from workloads.models.pair import load_tokenizer
        from workloads.tasks.prompts import PromptFormat, format_prompt

        t = self.spec.task
        fmt = PromptFormat(chat=t.chat, system=t.system, shots=t.shots)
        out = {}
        for pair in self.spec.pairs:
            tokenizer = load_tokenizer(pair.load_spec()) if t.chat else None
            try:
                out[pair.name] = {e.index: format_prompt(task, e, fmt, tokenizer) for e in self.examples}
            except ValueError as err:
                raise SpecError(f"spec: task.{err} (pair {pair.name})") from None
        return out

    def _start_workers(self) -> None:
        names = [p.name for p in self.spec.pairs]
        slots = raycluster.slot_count(self.spec.cluster)
        if self.spec.cluster.placement == "split":
            self.serves = {i: [names[i % len(names)]] for i in range(slots)}
        else:
            self.serves = {i: names for i in range(slots)}
        envs = {p.name: p.runtime_env for p in self.spec.pairs}
        specs = {p.name: p.load_spec() for p in self.spec.pairs}
        self.workers = start_workers(
            [envs[self.serves[i][0]] if len(self.serves[i]) == 1 else None for i in range(slots)],
            self.spec.cluster.resource, specs, self.spec.task.name, self.spec.search.seed)
        ray.get([w.load.remote(self.serves[i]) for i, w in enumerate(self.workers)])
        self.worker_info = ray.get([w.info.remote() for w in self.workers])
        kinds = [json.loads(k) for k in sorted({json.dumps(i["hardware"], sort_keys=True)
                                                for i in self.worker_info})]
        self.study.set_user_attr("hardware", kinds)
        self.load = dict.fromkeys(range(len(self.workers)), 0)
        gpus = sorted({info["gpu"] for info in self.worker_info})
        self.tracker.tag_sweep(self.parent_run, "specsweep.gpus", ",".join(gpus))
        if len(gpus) > 1:  # timings are comparable only on identical hardware
            self.progress.note = f"warning: workers run on different hardware ({', '.join(gpus)})"
            self.tracker.tag_sweep(self.parent_run, "specsweep.warning", self.progress.note)

    # -- jobs and shards ---------------------------------------------------------------------

    def _job(self, key: str, label: str, candidate: Candidate, trial: optuna.Trial | None = None) -> Job:
        eligible = [i for i, names in self.serves.items() if candidate.pair in names]
        count = max(1, min(len(eligible), len(self.examples) // MIN_SHARD))
        indices = [e.index for e in self.examples]
        size = math.ceil(len(indices) / count)
        config = candidate.config.to_dict()
        # a trial's shards time `ar` beside it, so its speed ratio compares like with like
        timed_ar = trial is not None and "ar" in self.spec.baselines
        control = baseline_config(self.spec, "ar").to_dict() if timed_ar else None
        number = trial.number if trial else -1
        shards = [Shard(number, candidate.pair, config, tuple(indices[i : i + size]), control)
                  for i in range(0, len(indices), size)]
        job = Job(key, label, candidate, shards, trial)
        self.jobs[key] = job
        for i, shard in enumerate(shards):
            cached = self._read_cache(self._cache_path(shard))
            if cached is not None:
                job.results[i] = cached
            else:
                self.pending.append((job, i, None))
        return job

    @staticmethod
    def _read_cache(path: Path) -> dict | None:
        """A finished shard's result, or None when absent or unreadable (decoded again)."""
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def _cache_path(self, shard: Shard) -> Path:
        key = json.dumps(
            [shard.pair, shard.config, shard.indices, self.spec.task.model_dump()]
            + ([shard.control] if shard.control else []), sort_keys=True
        )
        return self.dir / "shards" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def _dispatch(self) -> None:
        """Hand pending shards to workers, up to DEPTH per worker: the next shard already
        waits in a worker's queue while the driver scores and logs, so slots do not idle.
        A shard whose worker died prefers another worker."""
        while self.pending:
            placed = False
            for n, (job, i, avoid) in enumerate(self.pending):
                open_slots = [w for w, load in self.load.items() if load < DEPTH and w not in self.restarting
                              and job.candidate.pair in self.serves[w]]
                if not open_slots:
                    continue
                others = [w for w in open_slots if w != avoid]
                worker = min(others or open_slots, key=lambda w: self.load[w])
                self.pending.pop(n)
                prompts = self.prompts[job.candidate.pair]
                items = [(self.by_index[x], prompts[x]) for x in job.shards[i].indices]
                ref = self.workers[worker].run.remote(job.shards[i], items)
                self.inflight[ref] = (job, i, worker)
                self.load[worker] += 1
                placed = True
                break
            if not placed:
                return

    def _probe(self, worker: int) -> None:
        """Ask a dead worker for its info: the answer comes once Ray has restarted it, and
        until then no shard is handed to it (a retry would only fail again)."""
        self.restarting[worker] = self.workers[worker].info.remote()

    def _restarted(self, ref) -> None:
        worker = next(w for w, probe in self.restarting.items() if probe == ref)
        try:
            self.worker_info[worker] = ray.get(ref)
            del self.restarting[worker]
        except ray.exceptions.RayError:  # not back yet
            time.sleep(0.2)
            self._probe(worker)

    def _collect(self, timeout: float) -> list[Job]:
        """Wait for shard results; returns jobs that became complete or failed."""
        if not self.inflight and not self.restarting:
            return []
        probes = list(self.restarting.values())
        ready, _ = ray.wait(list(self.inflight) + probes, num_returns=1, timeout=timeout)
        finished = []
        for ref in ready:
            if ref in probes:
                self._restarted(ref)
                continue
            job, i, worker = self.inflight.pop(ref)
            self.load[worker] -= 1
            try:
                out = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                if worker not in self.restarting:  # one death, however many calls it fails
                    job.lost[i] = job.lost.get(i, 0) + 1
                    self._probe(worker)
                if job.lost.get(i, 0) >= MAX_LOST:
                    job.error = f"shard {i}: its worker died {MAX_LOST} times"
                else:
                    self.pending.insert(0, (job, i, worker))
                    continue
            except ray.exceptions.RayError as err:
                job.attempts[i] = job.attempts.get(i, 0) + 1
                if job.attempts[i] >= MAX_ATTEMPTS:
                    job.error = _cause(err)
                else:
                    self.pending.insert(0, (job, i, worker))
                    continue
            else:
                job.results[i] = out
                write_atomic(self._cache_path(job.shards[i]), json.dumps(out))
            if job.error is not None:
                self.pending = [p for p in self.pending if p[0] is not job]
                if not any(j is job for j, _, _ in self.inflight.values()):
                    finished.append(job)
            elif job.done:
                finished.append(job)
        return finished

    # -- trials ------------------------------------------------------------------------------

    def _ask(self) -> Job | None:
        """Start the next trial on a configuration not measured yet. A sampler that proposes
        one already tried (TPE exploits) gets that trial pruned as a duplicate and an untried
        grid point enqueued instead; None when the whole space has been tried."""
        trial = self.study.ask()
        candidate = choose_config(self.spec, trial.suggest_categorical)
        if params_key(trial.params) in self._tried(exclude=trial.number):
            trial.set_user_attr("duplicate", True)
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            tried = self._tried(exclude=trial.number)
            untried = [p for p in self._space() if params_key(p) not in tried]
            if not untried:
                self.target = self.progress.target = self.progress.finished + len(self.jobs)
                return None
            self.study.enqueue_trial(random.Random(trial.number).choice(untried))
            return self._ask()
        trial.set_user_attr("pair", candidate.pair)
        trial.set_user_attr("config", candidate.config.to_dict())
        trial.set_user_attr("exact", is_exact(candidate.config))
        return self._job(f"trial:{trial.number}", f"trial {trial.number}", candidate, trial)

    def _space(self) -> list[dict]:
        if not hasattr(self, "_grid"):
            self._grid = grid(self.spec)
        return self._grid

    def _tried(self, exclude: int) -> set:
        """Configurations finished, failed or in flight (interrupted ones are asked again),
        other than trial `exclude`."""
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
                  optuna.trial.TrialState.RUNNING)
        return {params_key(t.params) for t in self.study.get_trials(deepcopy=False, states=states)
                if not t.user_attrs.get("interrupted") and t.number != exclude}

    def _finished_trials(self) -> list[optuna.trial.FrozenTrial]:
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
        return [
            t
            for t in self.study.get_trials(deepcopy=False, states=states)
            if not t.user_attrs.get("interrupted")
        ]

    def _records(self, job: Job) -> tuple[list[dict], list[str]]:
        records = sorted(
            (r for out in job.results.values() for r in out["records"]), key=lambda r: r["index"]
        )
        nodes = sorted({out["node"] for out in job.results.values()})
        job.gpus = sorted({out.get("gpu", "") for out in job.results.values()})
        return records, nodes

    def _params(self, candidate: Candidate) -> dict:
        config = candidate.config.to_dict()
        config.pop("seed")
        config["stop"] = ",".join(config["stop"])
        return {
            **config,
            "pair": candidate.pair,
            "pair_kind": self.kinds[candidate.pair],
            "task": self.spec.task.name,
            "task_limit": self.spec.task.limit,
            "task_seed": self.spec.task.seed,
        }

    def _log(self, job: Job, metrics: dict, tags: dict, records: list[dict], status: str) -> None:
        table = [{**r, "prompt": self.prompts[job.candidate.pair][r["index"]]} for r in records]
        self.tracker.log_trial(
            TrialLog(
                name=job.label,
                tags={
                    "specsweep.sweep": self.spec.name,
                    "mlflow.parentRunId": self.parent_run,
                    "specsweep.pair": job.candidate.pair,
                    "specsweep.exact": str(is_exact(job.candidate.config)).lower(),
                    "specsweep.gpu": ",".join(job.gpus),
                    **tags,
                },
                params=self._params(job.candidate),
                metrics=metrics,
                table=table,
                status=status,
                start_ms=int(job.start * 1000),
                end_ms=int(time.time() * 1000),
            )
        )

    def _finish_baseline(self, job: Job) -> None:
        _, pair, kind = job.key.split(":")
        if job.error:
            raise SweepError(f"baseline {kind} of pair {pair} failed: {job.error}")
        records, nodes = self._records(job)
        metrics = trial_metrics(records)
        self.baselines[pair][kind] = records
        if f"baseline:{pair}:{kind}" in self.study.user_attrs:
            return  # logged by an earlier session of this sweep; its records came from the cache
        self._log(
            job,
            metrics,
            {"specsweep.role": "trial", "specsweep.baseline": kind, "specsweep.nodes": ",".join(nodes)},
            records,
            "FINISHED",
        )
        self.study.set_user_attr(f"baseline:{pair}:{kind}", metrics)

    def _finish_trial(self, job: Job) -> None:
        trial = job.trial
        tags = {"specsweep.role": "trial", "specsweep.trial": str(trial.number)}
        if job.error is None:
            records, nodes = self._records(job)
            self.decode_s += sum(r["wall_s"] for r in records)
            tags["specsweep.nodes"] = ",".join(nodes)
            metrics = trial_metrics(records)
            ar = self.baselines.get(job.candidate.pair, {}).get("ar")
            if ar:
                metrics.update(paired_bootstrap(records, ar, seed=self.spec.search.seed))
                by_shard = [(out["records"], out.get("controls", [])) for out in job.results.values()]
                metrics.update(controlled_ratios(by_shard, ar, seed=self.spec.search.seed))
            controls = [c for out in job.results.values() for c in out.get("controls", [])]
            if controls:
                first = min(c["at"] for c in controls)
                trial.set_user_attr("control", {"at": first, "decodes": len(controls),
                                                "ms_per_token": control_speed(controls)})
            metrics["control_decodes"] = len(controls)
            metrics["warmup_decodes"] = sum(out.get("warmup", 0) for out in job.results.values())
            missing = [m for m in self.spec.objectives if m not in metrics]
            if missing:
                job.error = f"objective {missing[0]} is undefined for this trial"
        if job.error is not None:
            self._log(job, {}, {**tags, "specsweep.error": job.error[:4000]}, [], "FAILED")
            trial.set_user_attr("error", job.error)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.progress.failed += 1
        else:
            values = [metrics[m] for m in self.spec.objectives]
            trial.set_user_attr("metrics", metrics)
            if self.spec.constraints:
                trial.set_user_attr(
                    "constraints",
                    [
                        (bound - metrics.get(m, -math.inf))
                        if op == ">="
                        else (metrics.get(m, math.inf) - bound)
                        for m, op, bound in constraint_terms(self.spec.constraints)
                    ],
                )
            self._log(job, metrics, tags, records, "FINISHED")
            self.study.tell(trial, values)
        self.progress.finished += 1
        self.progress.frontier = len(frontier(self.study, self.spec))

    # -- main loop ---------------------------------------------------------------------------

    def run(self, resume: bool = False, fresh: bool = False) -> optuna.Study:
        if not hasattr(self, "examples"):
            self.prepare(resume, fresh)
        self.kinds = self.spec.pair_kinds()
        self.study = open_study(self.dir, self.spec)
        self.tracker = Tracker(
            self.tracking_uri,
            self.spec.tracking.experiment or self.spec.name,
            self.root / ".specsweep" / "artifacts",
            self.dir / "mlflow-pending.jsonl",
        )
        self.parent_run = self.tracker.start_sweep(
            self.spec.name, self.spec_yaml, self.study.user_attrs.get("parent_run")
        )
        self.study.set_user_attr("parent_run", self.parent_run)
        self.study.set_user_attr("tracking_uri", self.tracking_uri)
        self.tracker.start_background()
        self._requeue_interrupted()
        self.progress = Progress(self.target, finished=len(self._finished_trials()))
        self.progress.failed = sum(t.state == optuna.trial.TrialState.FAIL for t in self._finished_trials())
        previous = {signal.getsignal(signal.SIGTERM)}
        signal.signal(signal.SIGTERM, _raise_interrupt)
        self.started = time.time()
        try:
            raycluster.start(self.spec.cluster, self.ray_address)
            self._start_workers()
            self._run_baselines()
            self._run_trials()
            self._finish()
        except KeyboardInterrupt:
            self._interrupt()
            raise
        except BaseException:
            self._interrupt(status="FAILED")
            raise
        finally:
            signal.signal(signal.SIGTERM, previous.pop())
            self._send_logs()
            if ray.is_initialized():
                ray.shutdown()
            self._unlock()
        self.wall_s = time.time() - self.started
        return self.study

    def _send_logs(self) -> None:
        self.tracker.stop_background()
        # a server that is already failing gets one more try, not three timed-out rounds
        sent = self.tracker.flush(retries=1 if self.tracker.failing else 3)
        unsent = 0 if sent else self.tracker.save_pending()
        if unsent:
            self.progress.note = f"{unsent} trial logs could not reach MLflow; kept for --resume"

    def _finish(self) -> None:
        """Plots on the parent run, which then ends FINISHED (inside the interrupt guard, so
        a Ctrl-C here still leaves nothing RUNNING)."""
        from orchestrator.plots import sweep_plots
        from orchestrator.timing import timing_report

        self._send_logs()
        for path in sweep_plots(self.spec, self.study, self.dir / "plots"):
            self.tracker.attach(self.parent_run, path, "plots")
        report = timing_report(self.study)
        write_atomic(self.dir / "timing.json", json.dumps(report, indent=1))
        self.tracker.attach(self.parent_run, self.dir / "timing.json", "")
        self.tracker.log_sweep_metrics(self.parent_run, {
            f"{name}.{pair}": d[name] for pair, d in report["drift"].items()
            for name in ("drift", "baseline_vs_controls") if name in d})
        flagged = sorted(t for d in report["drift"].values() for t in d["outliers"])
        if flagged:
            self.tracker.tag_sweep(self.parent_run, "specsweep.timing_flagged", ",".join(map(str, flagged)))
        self.tracker.end_sweep(self.parent_run, "FINISHED")

    def _requeue_interrupted(self) -> None:
        """Trials left RUNNING by a killed session: mark them failed-interrupted and ask
        their configuration again (its finished shards come from the cache)."""
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            self.study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
            self.study.tell(t.number, state=optuna.trial.TrialState.FAIL)
            self.study.enqueue_trial(t.params, skip_if_exists=False)

    def _run_baselines(self) -> None:
        self.baselines: dict[str, dict[str, list[dict]]] = {p.name: {} for p in self.spec.pairs}
        self.progress.note = "baselines"
        self.on_progress(self.progress)
        for pair in self.spec.pairs:
            for kind in self.spec.baselines:
                config = baseline_config(self.spec, kind)
                self._job(
                    f"baseline:{pair.name}:{kind}",
                    f"{pair.name} {kind} baseline",
                    Candidate(pair.name, config),
                )
        self._drain(lambda job: self._finish_baseline(job))
        self.progress.note = ""

    def _complete(self, jobs: list[Job], finish: Callable[[Job], None]) -> None:
        for job in jobs:
            self.jobs.pop(job.key, None)
            finish(job)
            self.on_progress(self.progress)

    def _drain(self, finish: Callable[[Job], None]) -> None:
        ready = [j for j in self.jobs.values() if j.done]
        while True:
            self._complete(ready, finish)
            if not self.jobs:
                return
            self._dispatch()
            ready = self._collect(timeout=1.0)

    def _run_trials(self) -> None:
        start = time.perf_counter()
        try:
            self._trial_loop()
        finally:
            self.trials_s = time.perf_counter() - start

    def _guide(self) -> None:
        """Model-guided start: enqueue the untried configurations that the calibrated
        throughput model predicts on the (throughput, quality) frontier, at most half the
        trial budget; the sampler takes over after them."""
        from orchestrator.throughput import predicted_frontier

        calibration = json.loads(Path(self.spec.search.guide).expanduser().read_text())
        front = predicted_frontier(self.spec, self._space(), calibration)
        tried = self._tried(exclude=-1)
        for params in [p for p in front if params_key(p) not in tried][: max(1, self.target // 2)]:
            self.study.enqueue_trial(params)

    def _trial_loop(self) -> None:
        if self.spec.search.guide and self.spec.search.sampler != "grid" and not self._finished_trials():
            self._guide()
        planned = self._plan_grid()
        while True:
            done = self.progress.finished + len(self.jobs)
            while len(self.jobs) < self.spec.search.parallel and done < self.target:
                waiting = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
                if planned is not None and not waiting:
                    if not planned:
                        break
                    self.study.enqueue_trial(planned.pop(0))
                if self._ask() is None:
                    break
                done += 1
            if not self.jobs:
                return
            self._complete([j for j in self.jobs.values() if j.done], self._finish_trial)
            self._dispatch()
            self._complete(self._collect(timeout=1.0), self._finish_trial)

    def _plan_grid(self) -> list[dict] | None:
        """Grid points not yet tried (None when the sampler is not grid); the target shrinks
        to what the grid holds."""
        if self.spec.search.sampler != "grid":
            return None
        waiting = [
            t.system_attrs.get("fixed_params", {})
            for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        ]
        tried = [t.params for t in self._finished_trials()] + waiting
        remaining = [p for p in grid(self.spec) if p not in tried]
        self.target = min(self.target, self.progress.finished + len(remaining) + len(waiting))
        self.progress.target = self.target
        return remaining

    def _interrupt(self, status: str = "KILLED") -> None:
        for job in self.jobs.values():
            if job.trial is not None:
                job.trial.set_user_attr("interrupted", True)
                self.study.tell(job.trial, state=optuna.trial.TrialState.FAIL)
        self.jobs.clear()
        self.tracker.stop_background()
        with contextlib.suppress(TrackingError):  # the error that brought us here says it already
            self.tracker.end_sweep(self.parent_run, status)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _cause(err: Exception) -> str:
    cause = getattr(err, "cause", None) or err
    lines = [line for line in str(cause).strip().splitlines() if line.strip()]
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"[:500]


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
    from orchestrator.spec import parse_spec

    stored = path / "spec.yaml"
    if not stored.is_file():
        return
    old = parse_spec(yaml.safe_load(stored.read_text()), str(stored)).model_dump()
    changed = [f for f in changed_fields(old, spec.model_dump())
               if not any(f == r or f.startswith(r + ".") for r in RESUMABLE)]
    if changed:
        raise SweepError(f"spec: --resume with a changed spec ({', '.join(changed)}); restore it or start "
                         "over with --fresh")


def frontier(study: optuna.Study, spec: SweepSpec) -> list[optuna.trial.FrozenTrial]:
    """Feasible completed trials that no other feasible trial dominates on the objectives."""
    trials = [
        t
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if all(c <= 0 for c in t.user_attrs.get("constraints", []))
    ]
    if not trials:
        return []
    front = pareto_front([tuple(t.values) for t in trials], tuple(spec.objectives.values()))
    return sorted((trials[i] for i in front), key=lambda t: t.number)


def load_sweep(root: Path, name: str) -> tuple[SweepSpec, optuna.Study]:
    """The spec and study of an existing sweep, for status / frontier / export."""
    from orchestrator.spec import parse_spec

    path = state_dir(root, name)
    if not (path / "spec.yaml").is_file():
        raise SweepError(f"sweep {name!r}: no state in {path} (run it first: specsweep run SPEC)")
    spec = parse_spec(yaml.safe_load((path / "spec.yaml").read_text()), str(path / "spec.yaml"))
    if not study_exists(path, spec):
        raise SweepError(f"sweep {name!r}: no study in its storage (run it first: specsweep run SPEC)")
    return spec, open_study(path, spec, create=False)
