"""What a sweep runs next: its baselines, its trials (Optuna's asks, never a configuration
measured already) and, for each, the shards its prompts are split into; when a trial
races, whether it goes on to the next rung. The planner decides and records its decisions
on the study; it runs nothing (`execute`) and scores nothing (`record`).

Prompts are decoded in one order for the whole sweep: the task's, or under racing the
race's (`search.racing.race_order`), since a rung is a prefix of that order and must sample
the prompts uniformly. A trial's shards also carry the `ar` baseline's config, timed beside
the trial so its speed ratio compares like with like.
"""

from __future__ import annotations

from functools import cached_property

import optuna

from orchestrator.analysis.outcome import constraint_terms, shard_records
from orchestrator.engines import engine_of
from orchestrator.search.fidelity import MultiFidelity, Request
from orchestrator.search.race import Race, Rung, in_order, law
from orchestrator.search.racing import Racing, race_order
from orchestrator.search.samplers import (
    ask_untried,
    finished_trials,
    guided_start,
    remaining_grid,
    tried_keys,
)
from orchestrator.search.servingfidelity import ServingFidelity
from orchestrator.spec.space import (
    Candidate,
    baseline_config,
    batch_sizes,
    candidate_of,
    choose_config,
    grid,
    params_key,
)
from orchestrator.spec.sweep import FidelitySpec, SweepSpec
from orchestrator.stored import baseline_key
from orchestrator.sweep.record import Progress
from orchestrator.sweep.shards import Job, split
from orchestrator.sweep.workers import Shard
from workloads.tasks import Example


def decoding_order(spec: SweepSpec, examples: list[Example]) -> list[Example]:
    """The task's examples in the order a sweep decodes them: the race's order when the
    sweep races (rungs are prefixes, and each must sample the prompts uniformly)."""
    if not spec.search.race():
        return examples
    by_index = {e.index: e for e in examples}
    return [by_index[i] for i in race_order(list(by_index), spec.search.seed)]


def describe(trial: optuna.Trial, candidate: Candidate) -> None:
    """What a trial runs, on the trial: its pair, config, batch size and exactness."""
    trial.set_user_attr("pair", candidate.pair)
    trial.set_user_attr("config", candidate.config.to_dict())
    trial.set_user_attr("batch_size", candidate.batch_size)
    trial.set_user_attr("exact", candidate.config.exact)


class Planner:
    """The jobs a sweep runs, in order; `progress.target` is the number of trials it aims
    for, cut when the grid (or the whole space) holds fewer."""

    def __init__(self, spec: SweepSpec, study: optuna.Study, indices: list[int], serves: dict[int, list[str]],
                 progress: Progress):
        self.spec, self.study, self.progress = spec, study, progress
        self.indices = indices  # prompt indices in decoding order
        self.serves = serves  # worker -> the pairs it serves: a job's shards go one per eligible worker
        # the multi-fidelity search races on its own (fidelity.py), its trials recorded once decided
        racing = spec.search.racing and spec.search.sampler != "multifidelity"
        self.race = Race(spec, len(indices)) if racing else None
        if self.race is not None:
            self.race.load(self.study, indices)  # rivals finished or stopped by earlier sessions
        # built once, here: every trial shard carries this same config to its worker
        self.control = baseline_config(spec, "ar") if "ar" in spec.baselines else None
        self.planned: list[dict] | None = None  # grid sampler: grid points not enqueued yet, in order

    @cached_property
    def space(self) -> list[dict]:
        """Every point of the space (`space.grid`), built only when a plan needs it: a
        guided start, the grid sampler, or a duplicate proposal to replace."""
        return grid(self.spec)

    # -- jobs and shards ---------------------------------------------------------------------

    def job(self, key: str, label: str, candidate: Candidate, trial: optuna.Trial | None = None) -> Job:
        """A job over every prompt, or over the first rung's when the trial races."""
        count = self.race.first() if self.race is not None and trial is not None else len(self.indices)
        number = trial.number if trial is not None else None
        return Job(key, label, candidate, self.shards(candidate, number, 0, count), trial)

    def shards(self, candidate: Candidate, number: int | None, start: int, end: int) -> list[Shard]:
        """Shards of the prompts start..end-1 (decoding order), one per eligible worker, each
        of whole batches; a trial's (`number` not None) carry its engine's control
        (Engine.control)."""
        eligible = [w for w, names in self.serves.items() if candidate.pair in names]
        indices = self.indices[start:end]
        engine = engine_of(candidate.config)
        control = engine.control(candidate.config, self.control) if number is not None else None
        number = -1 if number is None else number
        size = candidate.batch_size
        repeats = engine.repeats(self.spec.serving.repeats)
        return [Shard(number, candidate.pair, candidate.config, tuple(indices[a:b]), control, size, repeats)
                for a, b in split(len(indices), len(eligible), size)]

    def baselines(self) -> list[Job]:
        """One job per pair, baseline schedule the pair runs, and batch size."""
        jobs = []
        for pair in self.spec.pairs:
            kind = self.spec.pair_kinds[pair.name]
            for schedule in [s for s in self.spec.baselines if kind.runs(s)]:
                for size in batch_sizes(self.spec):
                    at = f" at batch size {size}" if size > 1 else ""
                    label = f"{pair.name} {schedule} baseline{at}"
                    candidate = Candidate(pair.name, baseline_config(self.spec, schedule), size)
                    jobs.append(self.job(baseline_key(pair.name, schedule, size), label, candidate))
        return jobs

    # -- trials ------------------------------------------------------------------------------

    def start_trials(self) -> None:
        """Before the first trial: a guided start's enqueued points, or the grid still to run
        (the target shrinks to what it holds)."""
        if self.spec.search.guide and self.spec.search.sampler != "grid" and not finished_trials(self.study):
            for params in guided_start(self.spec, self.space, tried_keys(self.study), self.progress.target):
                self.study.enqueue_trial(params)
        if self.spec.search.sampler == "grid":
            self.planned, waiting = remaining_grid(self.study, self.space)
            left = self.progress.finished + len(self.planned) + waiting
            self.progress.target = min(self.progress.target, left)

    def next_trials(self, in_flight: int) -> list[Job]:
        """New trials, up to `search.parallel` in flight and no more than the target; when the
        space holds no untried configuration the target becomes what has started."""
        jobs: list[Job] = []
        started = self.progress.finished + in_flight
        while in_flight + len(jobs) < self.spec.search.parallel and started < self.progress.target:
            waiting = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
            if self.planned is not None and not waiting:
                if not self.planned:
                    break
                self.study.enqueue_trial(self.planned.pop(0))
            job = self._ask()
            if job is None:
                self.progress.target = self.progress.finished + in_flight + len(jobs)
                break
            jobs.append(job)
            started += 1
        return jobs

    def _ask(self) -> Job | None:
        """The next trial, on a configuration not measured yet (`ask_untried`); None when the
        whole space has been tried."""
        asked = ask_untried(self.study, self.spec, lambda key, number: key in tried_keys(self.study, number),
                            lambda: [p for p in self.space if params_key(p) not in tried_keys(self.study)])
        if asked is None:
            return None
        trial, candidate = asked
        describe(trial, candidate)
        return self.job(f"trial:{trial.number}", f"trial {trial.number}", candidate, trial)

    def after(self, job: Job) -> Rung:
        """What a trial does once its shards are in: go on to the next rung (its new prompts
        added to the job as shards), stop, or finish. Only a racing trial that decoded
        without error can do more than finish; one that stops or finishes leaves its
        per-prompt columns on the study for the races of later sessions."""
        if self.race is None or job.error is not None:
            return Rung()
        records = in_order(shard_records(list(job.results.values())), self.indices)
        rung = self.race.after(job.trial.number, records, law(job.candidate.pair, job.candidate.config))
        if rung.next is not None:
            job.shards += self.shards(job.candidate, job.trial.number, len(records), rung.next)
        else:
            self.race.keep(job.trial, records)
        return rung

    # -- the multi-fidelity search -----------------------------------------------------------

    def multifidelity(self, prompts: dict[str, dict[int, str]]) -> MultiFidelity | ServingFidelity:
        """The multi-fidelity search over the grid: on vLLM (`servingfidelity`), with the
        spec's tolerance and error; else (`fidelity`) with its racing and calibration.
        `prompts`: pair -> prompt index -> the prompt (an n-gram replay reads its tokens)."""
        r, f = self.spec.search.race(), self.spec.search.fidelity or FidelitySpec()
        if any(engine_of(candidate_of(self.spec, p).config).served for p in self.space):
            return self._serving_fidelity(prompts, f)
        pairs, laws = {}, {}
        for params in self.space:
            candidate = candidate_of(self.spec, params)
            pairs[params_key(params)] = candidate.pair
            laws[params_key(params)] = law(candidate.pair, candidate.config)
        self.progress.target = len(pairs)
        racing = Racing(start=r.start, factor=r.factor, alpha=r.alpha)
        return MultiFidelity(pairs, laws, len(self.indices), racing,
                             dict(self.spec.objectives), constraint_terms(self.spec.constraints),
                             calibration=f.calibration, calibration_prompts=f.calibration_prompts,
                             parallel=self.spec.search.parallel, seed=self.spec.search.seed)

    def _serving_fidelity(self, prompts: dict[str, dict[int, str]], f: FidelitySpec) -> ServingFidelity:
        from workloads.models.pair import load_tokenizer
        from workloads.serving.acceptance import profile_config

        configs, proxies = {}, {}
        for params in self.space:
            candidate = candidate_of(self.spec, params)
            configs[params_key(params)] = candidate.pair, candidate.config
            kind = self.spec.pair_kinds[candidate.pair]
            proxies[params_key(params)] = profile_config(candidate.config, kind)
        tokenizers = {p.name: load_tokenizer(p.load_spec()) for p in self.spec.pairs}

        def prompt_ids(pair: str, index: int) -> list[int]:
            return tokenizers[pair](prompts[pair][index], verbose=False).input_ids

        self.progress.target = len(configs)
        return ServingFidelity(configs, proxies, prompt_ids, len(self.indices), f.tolerance, f.error,
                               seed=self.spec.search.seed)

    def request_job(self, request: Request) -> Job:
        """A multi-fidelity request as a job: a profile's prompts in one shard of one batch,
        with no control; a timing's at batch size 1 with the trial's control, split as a
        trial's."""
        candidate = candidate_of(self.spec, dict(request.key))
        if request.timed:
            shards = self.shards(candidate, -1, request.start, request.end)
        else:
            indices = tuple(self.indices[request.start:request.end])
            config = request.config or candidate.config
            shards = [Shard(-1, candidate.pair, config, indices, None, len(indices))]
        label = (f"{request.phase} {candidate.pair} {params_label(request.key)}, "
                 f"prompts {request.start}-{request.end}")
        return Job(f"{request.phase}:{request.key}:{request.start}", label, candidate, shards)

    def start_trial(self, key: tuple) -> tuple[optuna.Trial, Candidate]:
        """A new trial on the grid point `key` (a multi-fidelity candidate, recorded once
        decided)."""
        self.study.enqueue_trial(dict(key))
        trial = self.study.ask()
        candidate = choose_config(self.spec, trial.suggest_categorical)  # the enqueued params, as the trial's
        describe(trial, candidate)
        return trial, candidate


def params_label(key: tuple) -> str:
    """A grid point's params in one short line: `name=value, ...`."""
    return ", ".join(f"{name}={value}" for name, value in key)
