"""The sweep driver: baselines, then Optuna trials, on Ray workers, logged to MLflow.

Flow: validate the spec; open (or resume) the sweep state in `<root>/.specsweep/<name>/`
(Optuna journal, shard cache, unsent MLflow logs); start the workers and, while they load
their models, the MLflow parent run (so a sweep whose Ray start fails leaves no run); run the
baselines of every pair; then keep `search.parallel` trials in flight, each split into one shard per
eligible worker, until `search.trials` trials have finished (or the grid is exhausted).
What runs next is the search strategy's (orchestrator/search: any registered one, asked and
told through one protocol), its requests' jobs the `Planner`'s (plan.py), running them the
`Executor`'s (execute.py), what they measured the `Recorder`'s (record.py); the driver passes
finished jobs from one to the next.

Faults: a shard whose worker died is queued again (preferably for another worker) and Ray
restarts the actor; a shard that raises is retried once more, after which its trial is
recorded as failed in Optuna and MLflow and the sweep goes on. Ctrl-C (or SIGTERM) marks
the trials in flight as failed-interrupted (held while the study's journal is written:
interrupts.py), ends the parent run as KILLED and leaves the
state for `--resume`, which re-asks those configurations and reuses their finished shards
from the cache, so no finished trial or shard runs twice. Bad input that only the workers
find (weights that do not load, a prompt a baseline cannot decode) undoes a new sweep before
its trials: its parent run, study and state directory go, and the error is one line.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import ray
from optuna.trial import TrialState

from orchestrator.analysis.categories import MAX_CATEGORIES, OTHER, category_names
from orchestrator.analysis.outcome import engine_seconds, shard_records
from orchestrator.engines import listed
from orchestrator.search.race import in_order
from orchestrator.search.registry import for_sweep as strategy_for
from orchestrator.search.samplers import trial_on
from orchestrator.search.strategy import Decision, Measured, Progress, Request, Strategy, Sweep
from orchestrator.spec.space import candidate_of
from orchestrator.spec.sweep import SpecError, SweepSpec, check_runnable
from orchestrator.stored import check_store
from orchestrator.sweep import interrupts, raycluster
from orchestrator.sweep.execute import Executor
from orchestrator.sweep.plan import Planner, decoding_order
from orchestrator.sweep.prompts import pair_prompts
from orchestrator.sweep.record import BaselineFailed, Recorder
from orchestrator.sweep.shards import Job
from orchestrator.sweep.study import (
    StateLock,
    SweepError,
    open_state,
    open_study,
    state_dir,
)
from orchestrator.sweep.tracking import check_reachable, default_uri
from orchestrator.sweep.workers import serving
from workloads.decoding.config import ConfigError
from workloads.models.pairspec import PairError
from workloads.serving.config import arrival_error
from workloads.tasks import Example, get_task


class Driver:
    """One session of a sweep: `prepare` (the task's prompts, the sweep state), then `run`."""

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
        self.spec, self.spec_yaml, self.root = spec, spec_yaml, root
        self.dir = state_dir(root, spec.name)
        self.lock = StateLock(root, spec.name)
        self.ray_address = ray_address or (None if spec.cluster.address == "local" else spec.cluster.address)
        self.tracking_uri = tracking_uri or spec.tracking.uri or default_uri(root / ".specsweep")
        self.progress = Progress(trials or spec.search.trials)
        self.on_progress = on_progress or (lambda p: None)
        # set by `prepare`
        self.prepared = False
        self.new = False  # this session made the sweep state, so a failed start may undo it
        self.examples: list[Example] = []  # the task's prompts, in decoding order
        self.prompts: dict[str, dict[int, str]] = {}  # pair -> prompt index -> the prompt it decodes
        self.categories: dict[str, str] = {}  # category labels of the data renamed in metric names
        # set by `run`, in this order: the executor only once Ray is up
        self.study: optuna.Study | None = None
        self.recorder: Recorder | None = None
        self.executor: Executor | None = None
        self.planner: Planner | None = None
        self.strategy: Strategy | None = None
        self.trials_s = 0.0  # wall time of the trial phase (after the baselines)

    @property
    def decode_s(self) -> float:
        """Σ batch wall of the decodes of the trials finished this session."""
        return self.recorder.decode_s if self.recorder is not None else 0.0

    def prepare(self, resume: bool = False, fresh: bool = False) -> None:
        """Load the task and format its prompts, then set up the sweep state; any error in
        the first part leaves nothing behind. `run` calls it when the caller has not."""
        check_runnable(self.spec, local=not self.ray_address)
        t = self.spec.task
        task = get_task(t.name, t.data)
        try:
            examples = task.examples(n=t.limit, seed=t.seed)
        except ValueError as err:  # the task names its argument n; the spec's key is task.limit
            raise SpecError(f"spec: task.limit: {str(err).removeprefix('n: ')}") from None
        examples, self.categories = _named_categories(examples)
        self.examples = decoding_order(self.spec, examples)
        self.prompts = pair_prompts(self.spec, task, self.examples)
        dims = self.spec.dimension_values()
        for rate in dims.get("request_rate", []):
            why = arrival_error(len(self.examples), rate, "spec: space.request_rate")
            if why:
                raise SpecError(why)
        for engine in listed(dims):
            engine.prepare(dims)  # an engine that is not set up fails here, not in every trial
        if self.tracking_uri != default_uri(self.root / ".specsweep"):  # whose folder --root's check names
            check_reachable(self.tracking_uri)
        check_store(self.tracking_uri)  # a damaged sqlite store: one line, before any state
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
        self.prepared, self.new = True, not resume

    def run(self, resume: bool = False, fresh: bool = False) -> optuna.Study:
        if not self.prepared:
            self.prepare(resume, fresh)
        self.study = open_study(self.dir, self.spec)
        indices = [e.index for e in self.examples]
        self.strategy = strategy_for(Sweep(self.spec, self.study, self.progress, indices, self.prompts))
        self.recorder = Recorder(self.spec, self.study, self.dir, self.prompts, self.progress)
        previous = interrupts.install()
        starting = True
        try:
            self._start()
            self._run_baselines()
            starting = False
            start = time.perf_counter()
            self._run_trials()
            self.trials_s = time.perf_counter() - start
            # inside the interrupt guard, so a Ctrl-C here still leaves nothing RUNNING
            self.recorder.finish()
            self.executor.close()  # idle workers stop their servers; on a failure Ray ends them
        except KeyboardInterrupt:
            self._interrupt("KILLED")
            raise
        except BaseException as err:
            # bad input found only once Ray ran (a pair that cannot load, a prompt a baseline
            # cannot decode), or a Ray that did not come up, leaves a new sweep unstarted;
            # other failures keep it for --resume
            if starting and self.new and isinstance(err, (PairError, ConfigError, BaselineFailed,
                                                          raycluster.ClusterError)):
                self._discard()
            else:
                self._interrupt("FAILED")
            raise
        finally:
            interrupts.restore(previous)
            try:
                if self.recorder.tracker is not None:
                    self.recorder.send_logs()
            finally:  # a store that failed the last send still frees Ray and the sweep's lock
                if ray.is_initialized():
                    ray.shutdown()
                self.lock.release()
        return self.study

    def _start(self) -> None:
        """Ray, the workers and (while they load their models) the MLflow parent run."""
        raycluster.start(self.spec.cluster, self.ray_address)
        interrupts.install()  # ray.init put its own SIGTERM handler in (it exits at once)
        serves = serving([p.name for p in self.spec.pairs], raycluster.slot_count(self.spec.cluster),
                         self.spec.cluster.placement)
        self.executor = Executor(self.spec, serves, self.examples, self.prompts, self.dir / "shards")
        self.recorder.open(self.tracking_uri, self.root / ".specsweep" / "artifacts", self.spec_yaml)
        if self.categories:
            self.recorder.tracker.describe_categories(self.recorder.parent_run, self.categories)
        self.recorder.hardware(self.executor.ready())
        self.planner = Planner(self.spec, [e.index for e in self.examples], serves)

    def _run_baselines(self) -> None:
        self.progress.note = "baselines"
        self.on_progress(self.progress)
        for job in self.planner.baselines():
            self.executor.run(job)
        self._drain(self.recorder.finish_baseline)
        self.progress.note = ""

    def _run_trials(self) -> None:
        """The search strategy's requests as jobs on the workers, each told back once done, and
        every candidate it decides recorded as a trial (a new one where the strategy asked
        none), until it asks for nothing more."""
        requests: dict[str, Request] = {}

        def refill() -> None:
            asked = self.strategy.ask(len(self.executor.jobs))
            if asked and (note := self.strategy.note(asked)):
                self.progress.note = note
                self.on_progress(self.progress)
            for request in asked:
                job = self.planner.request_job(request)
                requests[job.key] = request
                self.executor.run(job)

        def told(job: Job) -> None:
            results = list(job.results.values())
            records = in_order(shard_records(results), self.planner.indices) if job.error is None else []
            measured = Measured(records, engine_seconds(results), results, job.error)
            self.strategy.tell(requests.pop(job.key), measured)
            self._record(self.strategy.decided())

        self._drain(told, refill)
        self.progress.note = ""
        self._record(self.strategy.decided())

    def _record(self, decisions: list[Decision]) -> None:
        """Each decided candidate as its trial; one stopped between its ask and its tell is
        failed-interrupted, so `--resume` asks it again."""
        for decision in decisions:
            trial = decision.trial
            if trial is None:
                trial, candidate = trial_on(self.study, self.spec, decision.key)
            else:
                candidate = candidate_of(self.spec, trial.params)
            job = Job(f"trial:{trial.number}", f"trial {trial.number}", candidate, [], trial,
                      dict(enumerate(decision.results)), start=decision.start, error=decision.error)
            try:
                self.recorder.record(job, decision)
            except BaseException:
                if self.study.get_trials(deepcopy=False)[trial.number].state == TrialState.RUNNING:
                    trial.set_user_attr("interrupted", True)
                    self.study.tell(trial, state=TrialState.FAIL)
                raise
            self.on_progress(self.progress)

    def _drain(self, finish: Callable[[Job], None], refill: Callable[[], None] = lambda: None) -> None:
        """Until no job is in flight: `refill`, then `finish` each job the cache or the
        workers complete, one at a time, so when one raises the rest are still in flight
        (and marked interrupted)."""
        while True:
            refill()
            if not self.executor.jobs:
                return
            self._complete(self.executor.cached(), finish)
            self._complete(self.executor.step(), finish)

    def _complete(self, jobs: list[Job], finish: Callable[[Job], None]) -> None:
        for job in jobs:
            self.executor.jobs.pop(job.key, None)
            finish(job)
            self.on_progress(self.progress)

    def _interrupt(self, status: str) -> None:
        self.recorder.interrupt(self.executor.drop() if self.executor is not None else [], status)

    def _discard(self) -> None:
        """Undo a new sweep that failed before its trials: its parent run (with the baselines
        logged under it), its study and its state directory, so a rerun starts clean."""
        if self.executor is not None:
            self.executor.drop()
        self.recorder.discard()
        shutil.rmtree(self.dir, ignore_errors=True)


def _named_categories(examples: list[Example]) -> tuple[list[Example], dict[str, str]]:
    """The examples with each category label as its metrics name it (categories.category_names),
    and the labels that were renamed (label -> name)."""
    names = category_names([e.meta["category"] for e in examples if "category" in e.meta])
    renamed = {label: name for label, name in names.items() if label != name}
    if not renamed:
        return examples, {}
    return [dataclasses.replace(e, meta={**e.meta, "category": names[e.meta["category"]]})
            if "category" in e.meta else e for e in examples], renamed


def categories_note(renamed: dict[str, str]) -> str:
    """One line on the categories renamed for MLflow (the mapping is on the parent run)."""
    grouped = sum(name == OTHER for name in renamed.values())
    return (f"note: {len(renamed)} category labels renamed for metric names"
            + (f" ({grouped} beyond the {MAX_CATEGORIES} reported apart grouped as {OTHER!r})"
               if grouped else "")
            + "; the mapping is categories.json on the sweep's MLflow run")
