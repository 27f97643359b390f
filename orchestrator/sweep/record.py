"""What a sweep keeps of its finished jobs: each baseline's records (the `ar` ones score the
trials), each trial's metrics told to Optuna, a nested MLflow run per job under the sweep's
parent run, and the counts the CLI shows (`Progress`).

MLflow is written in the background and flushed at the end; logs that cannot reach the
server are kept in the sweep state for `--resume`. A baseline whose decode raised fails the
sweep (`BaselineFailed`: the input is bad); a trial that failed is recorded as failed and
the sweep goes on.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import optuna

from orchestrator.analysis.frontier import frontier_trials
from orchestrator.analysis.metrics import UNTIMED, trial_metrics
from orchestrator.analysis.outcome import constraint_values, engine_seconds, shard_records, trial_outcome
from orchestrator.search.samplers import constrain, finished_trials
from orchestrator.search.strategy import Decision, Progress
from orchestrator.spec.sweep import SweepSpec
from orchestrator.stored import STOPPED
from orchestrator.sweep.runs import VIEW, log_summary, shared_view, trial_log
from orchestrator.sweep.shards import MAX_LOST, Job
from orchestrator.sweep.study import SweepError, study_storage
from orchestrator.sweep.tracking import Tracker, TrackingError


class BaselineFailed(SweepError):
    """A baseline whose decode raised (its workers did not die): the sweep's input is bad, and
    a new sweep is undone rather than left half-started."""


class Recorder:
    """The study, the MLflow runs and the progress of one sweep session."""

    def __init__(self, spec: SweepSpec, study: optuna.Study, state: Path, prompts: dict[str, dict[int, str]],
                 progress: Progress):
        self.spec, self.study, self.state, self.progress = spec, study, state, progress
        self.prompts = prompts  # pair -> prompt index -> prompt: logged beside each record
        # None until `open`: a sweep whose Ray start fails leaves no MLflow run to end
        self.tracker: Tracker | None = None
        self.parent_run: str | None = None
        self.unwritten: list[str] = []  # summary files a full disk kept out (runs.log_summary)
        # pair -> (baseline schedule, batch size) -> records; the `ar` ones score the trials
        self.baselines: dict[str, dict[tuple[str, int], list[dict]]] = {p.name: {} for p in spec.pairs}
        self.decode_s = 0.0  # Σ batch wall of the decodes of the trials finished this session
        done = finished_trials(study)  # an earlier session's, counted as the sweep's
        progress.finished = len(done)
        progress.failed = sum(t.state == optuna.trial.TrialState.FAIL for t in done)
        progress.stopped = sum(STOPPED in t.user_attrs for t in done)

    def open(self, tracking_uri: str, artifacts: Path, spec_yaml: str) -> None:
        """The MLflow experiment and the sweep's parent run (the earlier session's, on
        resume), with its background sender."""
        self.tracker = Tracker(tracking_uri, self.spec.tracking.experiment or self.spec.name, artifacts,
                               self.state / "mlflow-pending.jsonl")
        self.tracker.set_view(VIEW, shared_view(self.spec))
        earlier = self.study.user_attrs.get("parent_run")  # a resumed sweep's run goes on
        self.parent_run = self.tracker.start_sweep(self.spec.name, spec_yaml, earlier)
        self.study.set_user_attr("parent_run", self.parent_run)
        self.study.set_user_attr("tracking_uri", tracking_uri)
        self.tracker.start_background()

    def hardware(self, worker_info: list[dict]) -> None:
        """What the workers run on, on the study and the parent run; a warning when their
        GPUs differ (timings are comparable only on identical hardware)."""
        distinct = sorted({json.dumps(i["hardware"], sort_keys=True) for i in worker_info})
        self.study.set_user_attr("hardware", [json.loads(k) for k in distinct])
        gpus = sorted({info["gpu"] for info in worker_info})
        self.tracker.tag_sweep(self.parent_run, "specsweep.gpus", ",".join(gpus))
        if len(gpus) > 1:
            self.progress.note = f"warning: workers run on different hardware ({', '.join(gpus)})"
            self.tracker.tag_sweep(self.parent_run, "specsweep.warning", self.progress.note)

    # -- finished jobs -----------------------------------------------------------------------

    def _log(self, job: Job, metrics: dict, tags: dict, records: list[dict], status: str) -> None:
        pair = job.candidate.pair
        table = [{**r, "prompt": self.prompts[pair][r["index"]]} for r in records]
        kind = self.spec.pair_kinds[pair].name
        self.tracker.log_trial(trial_log(self.spec, self.parent_run, kind, job, metrics, tags, table, status))

    def finish_baseline(self, job: Job) -> None:
        """Keep a baseline's records and log it once (an earlier session may have); raise
        when it failed."""
        pair, schedule, size = job.candidate.pair, job.candidate.config.schedule, job.candidate.batch_size
        if job.error:
            died = any(n >= MAX_LOST for n in job.lost.values())  # a fault, not the input
            raise (SweepError if died else BaselineFailed)(
                f"baseline {schedule} of pair {pair} at batch size {size} failed: {job.error}")
        records = shard_records(list(job.results.values()))
        self.baselines[pair][schedule, size] = records
        if job.key in self.study.user_attrs:
            return  # logged by an earlier session of this sweep; its records came from the cache
        metrics = {**trial_metrics(records), "engine_s": engine_seconds(list(job.results.values()))}
        self._log(job, metrics, {"specsweep.baseline": schedule, "specsweep.batch_size": str(size)}, records,
                  "FINISHED")
        self.study.set_user_attr(job.key, metrics)

    def finish_trial(self, job: Job, stopped: bool) -> None:
        """Score a trial against its pair's `ar` baseline, tell Optuna (failed, pruned when
        racing `stopped` it, else its objectives) and log it."""
        trial = job.trial
        tags = {"specsweep.trial": str(trial.number)}
        if job.error is None:
            results = list(job.results.values())
            records = shard_records(results)
            ar = self.baselines[job.candidate.pair].get(("ar", job.candidate.batch_size))
            metrics, control = trial_outcome(results, ar, self.spec.search.seed, self.spec.serving.slo)
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
                constrain(trial, constraint_values(metrics, self.spec.constraints))
            if stopped:  # dominated (or infeasible) on the prompts so far: never on a frontier
                tags.update({"specsweep.racing": "stopped", "specsweep.rung": str(len(records))})
                trial.set_user_attr(STOPPED, len(records))
            self._log(job, metrics, tags, records, "FINISHED")
            if stopped:
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                self.progress.stopped += 1
            else:
                self.study.tell(trial, [metrics[m] for m in self.spec.objectives])
        self.progress.finished += 1
        self.progress.frontier = len(frontier_trials(self.study, self.spec))

    def record(self, job: Job, decision: Decision) -> None:
        """Record a candidate its strategy decided as its trial (`job.trial`), with the
        attributes the strategy adds: measured (or failed), as `finish_trial`; only profiled
        (a multi-fidelity candidate never timed), pruned and logged with its untimed metrics
        and predicted objectives."""
        trial = job.trial
        for name, value in decision.attrs.items():
            trial.set_user_attr(name, value)
        if job.error is not None or job.results:
            self.finish_trial(job, decision.stopped)
            return
        records = decision.profile
        metrics = {m: v for m, v in trial_metrics(records).items() if m in UNTIMED}
        metrics.update({f"predicted_{m}": v for m, v in decision.predicted.items()
                        if v is not None and m not in UNTIMED})
        trial.set_user_attr("metrics", metrics)
        trial.set_user_attr(STOPPED, 0)
        tags = {"specsweep.trial": str(trial.number), "specsweep.racing": "stopped",
                "specsweep.fidelity": f"profiled on {len(records)} prompts, untimed; {decision.why}"}
        self._log(job, metrics, tags, records, "FINISHED")
        self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        self.progress.stopped += 1
        self.progress.finished += 1

    # -- the end of a session ----------------------------------------------------------------

    def send_logs(self) -> None:
        """Flush the trial logs; those MLflow did not take stay in the state for --resume."""
        self.tracker.stop_background()
        # a server that is already failing gets one more try, not three timed-out rounds
        sent = self.tracker.flush(retries=1 if self.tracker.failing else 3)
        unsent = 0 if sent else self.tracker.save_pending()
        if unsent:
            self.progress.note = f"{unsent} trial logs could not reach MLflow; kept for --resume"

    def finish(self) -> None:
        """The sweep's summary on the parent run, which then ends FINISHED."""
        self.send_logs()
        self.unwritten = log_summary(self.tracker, self.parent_run, self.spec, self.study, self.state)
        self.tracker.end_sweep(self.parent_run, "FINISHED")

    def interrupt(self, jobs: list[Job], status: str) -> None:
        """Mark the trials in flight failed-interrupted (asked again on --resume) and end the
        parent run with `status`."""
        for job in jobs:
            if job.trial is not None:
                job.trial.set_user_attr("interrupted", True)
                self.study.tell(job.trial, state=optuna.trial.TrialState.FAIL)
        if self.parent_run is None:  # stopped before the sweep's run existed: nothing to end
            return
        self.tracker.stop_background()
        with contextlib.suppress(TrackingError):  # the error that brought us here says it already
            self.tracker.end_sweep(self.parent_run, status)

    def discard(self) -> None:
        """Delete the parent run (with the baselines logged under it) and an RDB study; the
        journal goes with the state directory."""
        if self.parent_run is not None:
            with contextlib.suppress(TrackingError):  # the bad input is the error to report
                self.tracker.discard_sweep(self.parent_run)
        if self.spec.search.storage:
            with contextlib.suppress(Exception):  # the bad input stays the error reported
                optuna.delete_study(study_name=self.spec.name, storage=study_storage(self.state, self.spec))
