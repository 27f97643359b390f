"""The sweep driver: Optuna ask/tell over the joint space, shards on Ray workers, MLflow.

Flow: validate the spec; open (or resume) the sweep state in `<root>/.specsweep/<name>/`
(Optuna journal, shard cache, unsent MLflow logs); start the workers and, while they load
their models, the MLflow parent run (so a sweep whose Ray start fails leaves no run); run the
baselines of every pair; then keep `search.parallel` trials in flight, each split into one shard per
eligible worker, until `search.trials` trials have finished (or the grid is exhausted).

Faults: a shard whose worker died is queued again (preferably for another worker) and Ray
restarts the actor; a shard that raises is retried once more, after which its trial is
recorded as failed in Optuna and MLflow and the sweep goes on. Ctrl-C (or SIGTERM) marks
the trials in flight as failed-interrupted, ends the parent run as KILLED and leaves the
state for `--resume`, which re-asks those configurations and reuses their finished shards
from the cache, so no finished trial or shard runs twice. Bad input that only the workers
find (weights that do not load, a prompt a baseline cannot decode) undoes a new sweep before
its trials: its parent run, study and state directory go, and the error is one line.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna
import ray

from orchestrator.analysis.frontier import frontier_trials
from orchestrator.analysis.metrics import trial_metrics
from orchestrator.analysis.racing import STOPPED, race_order
from orchestrator.stored import baseline_key
from orchestrator.sweep import raycluster
from orchestrator.sweep.outcome import constraint_values, shard_records, trial_outcome
from orchestrator.sweep.prompts import pair_prompts
from orchestrator.sweep.race import Race, law
from orchestrator.sweep.runs import VIEW, log_summary, shared_view, trial_log
from orchestrator.sweep.search import ask_untried, finished_trials, guided_start, remaining_grid, tried_keys
from orchestrator.sweep.shards import MAX_LOST, Job, ShardQueue, split
from orchestrator.sweep.space import Candidate, baseline_config, batch_sizes, grid, params_key
from orchestrator.sweep.spec import SweepSpec, check_runnable
from orchestrator.sweep.study import (
    StateLock,
    SweepError,
    open_state,
    open_study,
    requeue_interrupted,
    state_dir,
    study_storage,
)
from orchestrator.sweep.tracking import Tracker, TrackingError, check_reachable, default_uri
from orchestrator.sweep.workers import Shard, serving, start_workers
from workloads.decoding import is_exact
from workloads.decoding.config import ConfigError
from workloads.decoding.kinds import allows_schedule
from workloads.models.pair import PairError
from workloads.tasks import get_task


@dataclass
class Progress:
    """What the CLI shows while a sweep runs."""

    target: int
    finished: int = 0
    failed: int = 0
    frontier: int = 0
    stopped: int = 0  # trials racing stopped early
    rungs: int = 0  # rungs after which a racing trial went on
    note: str = ""


class BaselineFailed(SweepError):
    """A baseline whose decode raised (its workers did not die): the sweep's input is bad, and
    a new sweep is undone rather than left half-started."""


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
        self.lock = StateLock(root, spec.name)
        self.decode_s = 0.0  # Σ batch wall of the decodes of finished trials
        self.trials_s = 0.0  # wall time of the trial phase (after the baselines)

    # -- setup -------------------------------------------------------------------------------

    def prepare(self, resume: bool = False, fresh: bool = False) -> None:
        """Load the task and format its prompts, then set up the sweep state; any error in
        the first part leaves nothing behind. `run` calls it when the caller has not."""
        check_runnable(self.spec, local=not self.ray_address)
        task = get_task(self.spec.task.name, self.spec.task.data)
        self.examples = task.examples(n=self.spec.task.limit, seed=self.spec.task.seed)
        self.by_index = {e.index: e for e in self.examples}
        if self.spec.search.racing:  # rungs are prefixes: each must sample the prompts uniformly
            self.examples = [self.by_index[i] for i in race_order(list(self.by_index), self.spec.search.seed)]
        self.prompts = pair_prompts(self.spec, task, self.examples)
        if self.tracking_uri != default_uri(self.root / ".specsweep"):  # whose folder --root's check names
            check_reachable(self.tracking_uri)
        if self.ray_address:
            self.ray_address = raycluster.check_head(self.ray_address)
        existed = self.dir.exists()
        try:
            self.lock.acquire()
            open_state(self.dir, self.spec, self.spec_yaml, resume, fresh)
        except OSError as err:  # a read-only root, a full disk: leave nothing half made
            if not existed:
                shutil.rmtree(self.dir, ignore_errors=True)
            self.lock.release()
            raise SweepError(f"--root: cannot write the sweep state in {self.dir} "
                             f"({err.strerror or err})") from None
        except BaseException:
            self.lock.release()
            raise
        self.new = not resume  # state this session made, which `_discard` may undo

    def _start_workers(self) -> list:
        """Create one actor per slot and send each its pairs to load; returns the load calls."""
        slots = raycluster.slot_count(self.spec.cluster)
        self.serves = serving([p.name for p in self.spec.pairs], slots, self.spec.cluster.placement)
        envs = {p.name: p.runtime_env for p in self.spec.pairs}
        specs = {p.name: p.load_spec() for p in self.spec.pairs}
        self.workers = start_workers(
            [envs[self.serves[i][0]] if len(self.serves[i]) == 1 else None for i in range(slots)],
            self.spec.cluster.resource, specs, self.spec.task.name, self.spec.search.seed)
        return [w.load.remote(self.serves[i]) for i, w in enumerate(self.workers)]

    def _open_tracking(self) -> None:
        self.tracker = Tracker(
            self.tracking_uri,
            self.spec.tracking.experiment or self.spec.name,
            self.root / ".specsweep" / "artifacts",
            self.dir / "mlflow-pending.jsonl",
        )
        self.tracker.set_view(VIEW, shared_view(self.spec))
        self.parent_run = self.tracker.start_sweep(
            self.spec.name, self.spec_yaml, self.study.user_attrs.get("parent_run")
        )
        self.study.set_user_attr("parent_run", self.parent_run)
        self.study.set_user_attr("tracking_uri", self.tracking_uri)
        self.tracker.start_background()

    def _await_workers(self, loading: list) -> None:
        try:
            ray.get(loading)
        except ray.exceptions.RayTaskError as err:
            if isinstance(err.cause, ValueError):  # a pair found bad as it loads: its one-line error
                raise err.cause from None
            raise
        self.worker_info = ray.get([w.info.remote() for w in self.workers])
        kinds = [json.loads(k) for k in sorted({json.dumps(i["hardware"], sort_keys=True)
                                                for i in self.worker_info})]
        self.study.set_user_attr("hardware", kinds)
        self.queue = ShardQueue(self.serves, self.dir / "shards", json.dumps(self.spec.task.model_dump()),
                                submit=self._submit, wait=raycluster.wait, fetch=raycluster.fetch,
                                probe=lambda w: self.workers[w].info.remote())
        gpus = sorted({info["gpu"] for info in self.worker_info})
        self.tracker.tag_sweep(self.parent_run, "specsweep.gpus", ",".join(gpus))
        if len(gpus) > 1:  # timings are comparable only on identical hardware
            self.progress.note = f"warning: workers run on different hardware ({', '.join(gpus)})"
            self.tracker.tag_sweep(self.parent_run, "specsweep.warning", self.progress.note)

    # -- jobs and shards ---------------------------------------------------------------------

    def _job(self, key: str, label: str, candidate: Candidate, trial: optuna.Trial | None = None) -> Job:
        """A job over every prompt, or over the first rung's when the trial races."""
        count = self.race.first() if self.race and trial is not None else len(self.examples)
        job = Job(key, label, candidate, self._shards(candidate, trial, 0, count), trial)
        self.jobs[key] = job
        self.queue.add(job)
        return job

    def _shards(self, candidate: Candidate, trial: optuna.Trial | None, start: int, end: int) -> list[Shard]:
        """Shards of the prompts start..end-1 (task order), one per eligible worker, each of whole batches."""
        eligible = [i for i, names in self.serves.items() if candidate.pair in names]
        indices = [e.index for e in self.examples[start:end]]
        config = candidate.config.to_dict()
        # a trial's shards time `ar` beside it, so its speed ratio compares like with like
        timed_ar = trial is not None and "ar" in self.spec.baselines
        control = baseline_config(self.spec, "ar").to_dict() if timed_ar else None
        number = trial.number if trial else -1
        return [Shard(number, candidate.pair, config, tuple(indices[a:b]), control, candidate.batch_size)
                for a, b in split(len(indices), len(eligible), candidate.batch_size)]

    def _submit(self, worker: int, shard: Shard):
        prompts = self.prompts[shard.pair]
        return self.workers[worker].run.remote(shard, [(self.by_index[x], prompts[x]) for x in shard.indices])

    # -- trials ------------------------------------------------------------------------------

    def _ask(self) -> Job | None:
        """Start the next trial on a configuration not measured yet (`ask_untried`); None when
        the whole space has been tried."""
        asked = ask_untried(self.study, self.spec, lambda key, number: key in tried_keys(self.study, number),
                            lambda: [p for p in self._space() if params_key(p) not in tried_keys(self.study)])
        if asked is None:
            self.target = self.progress.target = self.progress.finished + len(self.jobs)
            return None
        trial, candidate = asked
        trial.set_user_attr("pair", candidate.pair)
        trial.set_user_attr("config", candidate.config.to_dict())
        trial.set_user_attr("batch_size", candidate.batch_size)
        trial.set_user_attr("exact", is_exact(candidate.config))
        return self._job(f"trial:{trial.number}", f"trial {trial.number}", candidate, trial)

    def _space(self) -> list[dict]:
        if not hasattr(self, "_grid"):
            self._grid = grid(self.spec)
        return self._grid

    def _log(self, job: Job, metrics: dict, tags: dict, records: list[dict], status: str) -> None:
        pair = job.candidate.pair
        self.tracker.log_trial(trial_log(self.spec, self.parent_run, self.kinds[pair], job, metrics, tags,
                                         [{**r, "prompt": self.prompts[pair][r["index"]]} for r in records],
                                         status))

    def _finish_baseline(self, job: Job) -> None:
        pair, kind, size = job.candidate.pair, job.candidate.config.schedule, job.candidate.batch_size
        if job.error:
            died = any(n >= MAX_LOST for n in job.lost.values())  # a fault, not the input
            raise (SweepError if died else BaselineFailed)(
                f"baseline {kind} of pair {pair} at batch size {size} failed: {job.error}")
        records = shard_records(list(job.results.values()))
        self.baselines[pair][kind, size] = records
        if job.key in self.study.user_attrs:
            return  # logged by an earlier session of this sweep; its records came from the cache
        metrics = trial_metrics(records)
        self._log(job, metrics, {"specsweep.baseline": kind, "specsweep.batch_size": str(size)}, records,
                  "FINISHED")
        self.study.set_user_attr(job.key, metrics)

    def _finish_trial(self, job: Job) -> None:
        trial = job.trial
        tags = {"specsweep.trial": str(trial.number)}
        stopped = None
        if job.error is None:
            results = list(job.results.values())
            records = shard_records(results)
            if self.race is not None:
                rung = self.race.after(trial.number, records, law(job.candidate.pair, job.candidate.config))
                if rung.next is not None:  # the next rung: its new prompts only
                    job.shards += self._shards(job.candidate, trial, len(records), rung.next)
                    self.jobs[job.key] = job
                    self.queue.add(job)
                    self.progress.rungs += 1
                    return
                stopped = len(records) if rung.stopped else None
                self.race.keep(trial, records)
            ar = self.baselines.get(job.candidate.pair, {}).get(("ar", job.candidate.batch_size))
            metrics, control = trial_outcome(results, ar, self.spec.search.seed)
            self.decode_s += metrics["decode_s"]
            if control:
                trial.set_user_attr("control", control)
            missing = [m for m in self.spec.objectives if m not in metrics]
            if missing:
                job.error = f"objective {missing[0]} is undefined for this trial"
        if job.error is not None:
            self._log(job, {}, {**tags, "specsweep.error": job.error[:4000]}, [], "FAILED")
            trial.set_user_attr("error", job.error)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.progress.failed += 1
        else:
            trial.set_user_attr("metrics", metrics)
            if self.spec.constraints:
                trial.set_user_attr("constraints", constraint_values(metrics, self.spec.constraints))
            if stopped is not None:  # dominated (or infeasible) on the prompts so far: never on a frontier
                tags.update({"specsweep.racing": "stopped", "specsweep.rung": str(stopped)})
                trial.set_user_attr(STOPPED, stopped)
            self._log(job, metrics, tags, records, "FINISHED")
            if stopped is not None:
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                self.progress.stopped += 1
            else:
                self.study.tell(trial, [metrics[m] for m in self.spec.objectives])
        self.progress.finished += 1
        self.progress.frontier = len(frontier_trials(self.study, self.spec))

    # -- main loop ---------------------------------------------------------------------------

    def run(self, resume: bool = False, fresh: bool = False) -> optuna.Study:
        if not hasattr(self, "examples"):
            self.prepare(resume, fresh)
        self.kinds = self.spec.pair_kinds
        self.study = open_study(self.dir, self.spec)
        requeue_interrupted(self.study)
        self.race = Race(self.spec, len(self.examples)) if self.spec.search.racing else None
        if self.race:
            self.race.load(self.study)
        done = finished_trials(self.study)
        self.progress = Progress(self.target, finished=len(done))
        self.progress.failed = sum(t.state == optuna.trial.TrialState.FAIL for t in done)
        self.progress.stopped = sum(STOPPED in t.user_attrs for t in done)
        self.tracker, self.parent_run = None, None
        previous = {signal.getsignal(signal.SIGTERM)}
        signal.signal(signal.SIGTERM, _raise_interrupt)
        self.started = time.time()
        starting = True
        try:
            raycluster.start(self.spec.cluster, self.ray_address)
            loading = self._start_workers()
            self._open_tracking()  # while the workers load their models
            self._await_workers(loading)
            self._run_baselines()
            starting = False
            start = time.perf_counter()
            self._run_trials()
            self.trials_s = time.perf_counter() - start
            self._finish()
        except KeyboardInterrupt:
            self._interrupt()
            raise
        except BaseException as err:
            # bad input found only once Ray ran (a pair that cannot load, a prompt a baseline
            # cannot decode) leaves a new sweep unstarted; other failures keep it for --resume
            if starting and self.new and isinstance(err, (PairError, ConfigError, BaselineFailed)):
                self._discard()
            else:
                self._interrupt(status="FAILED")
            raise
        finally:
            signal.signal(signal.SIGTERM, previous.pop())
            if self.tracker is not None:
                self._send_logs()
            if ray.is_initialized():
                ray.shutdown()
            self.lock.release()
        return self.study

    def _send_logs(self) -> None:
        self.tracker.stop_background()
        # a server that is already failing gets one more try, not three timed-out rounds
        sent = self.tracker.flush(retries=1 if self.tracker.failing else 3)
        unsent = 0 if sent else self.tracker.save_pending()
        if unsent:
            self.progress.note = f"{unsent} trial logs could not reach MLflow; kept for --resume"

    def _finish(self) -> None:
        """The sweep's summary on the parent run, which then ends FINISHED (inside the
        interrupt guard, so a Ctrl-C here still leaves nothing RUNNING)."""
        self._send_logs()
        log_summary(self.tracker, self.parent_run, self.spec, self.study, self.dir)
        self.tracker.end_sweep(self.parent_run, "FINISHED")

    def _run_baselines(self) -> None:
        # pair -> (kind, batch size) -> records
        self.baselines: dict[str, dict[tuple[str, int], list[dict]]] = {p.name: {} for p in self.spec.pairs}
        self.progress.note = "baselines"
        self.on_progress(self.progress)
        for pair in self.spec.pairs:
            for kind in [k for k in self.spec.baselines if allows_schedule(self.kinds[pair.name], k)]:
                for size in batch_sizes(self.spec):
                    label = f"{pair.name} {kind} baseline" + (f" at batch size {size}" if size > 1 else "")
                    self._job(baseline_key(pair.name, kind, size), label,
                              Candidate(pair.name, baseline_config(self.spec, kind), size))
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
            self.queue.dispatch()
            ready = self.queue.collect(timeout=1.0)

    def _run_trials(self) -> None:
        if self.spec.search.guide and self.spec.search.sampler != "grid" and not finished_trials(self.study):
            for params in guided_start(self.spec, self._space(), tried_keys(self.study), self.target):
                self.study.enqueue_trial(params)
        planned = None
        if self.spec.search.sampler == "grid":  # the target shrinks to what the grid still holds
            planned, waiting = remaining_grid(self.study, self._space())
            self.target = min(self.target, self.progress.finished + len(planned) + waiting)
            self.progress.target = self.target
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
            self.queue.dispatch()
            self._complete(self.queue.collect(timeout=1.0), self._finish_trial)

    def _interrupt(self, status: str = "KILLED") -> None:
        for job in self.jobs.values():
            if job.trial is not None:
                job.trial.set_user_attr("interrupted", True)
                self.study.tell(job.trial, state=optuna.trial.TrialState.FAIL)
        self.jobs.clear()
        if self.parent_run is None:  # stopped before the sweep's run existed: nothing to end
            return
        self.tracker.stop_background()
        with contextlib.suppress(TrackingError):  # the error that brought us here says it already
            self.tracker.end_sweep(self.parent_run, status)

    def _discard(self) -> None:
        """Undo a new sweep that failed before its trials: its parent run (with the baselines
        logged under it), its study and its state directory, so a rerun starts clean."""
        self.jobs.clear()
        if self.parent_run is not None:
            with contextlib.suppress(TrackingError):  # the bad input is the error to report
                self.tracker.discard_sweep(self.parent_run)
        if self.spec.search.storage:
            with contextlib.suppress(Exception):  # the bad input stays the error reported
                optuna.delete_study(study_name=self.spec.name, storage=study_storage(self.dir, self.spec))
        shutil.rmtree(self.dir, ignore_errors=True)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
