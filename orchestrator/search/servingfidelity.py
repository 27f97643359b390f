"""The multi-fidelity search of a vLLM sweep: every configuration's acceptance measured
without serving, in specsweep's engine; vLLM timed only where a configuration can still
win (search/servingsearch.py decides).

Its grid points differ only in `method`, `num_speculative_tokens` and `concurrency`
(spec.sweep checks). Steps, as search.fidelity's (requests the caller runs and `tell`s back):
1. profile: one untimed batch over every prompt per distinct `acceptance.profile_config`
   (a drafter setting's own configuration; greedy `ar` for none and ngram), its records
   turned into each configuration's (`acceptance.served_record`);
2. timing: per pair, the setting the search names, at the concurrencies where it can still
   beat the pick by more than the tolerance, with the draft lengths of its start the search
   times beside it there (ServingSearch.beside: one balanced order, controls shared), each a
   whole trial (its loads, repeats and controls as the grid's), until none can.
A configuration never timed is recorded with what was measured of it (accuracy, acceptance)
and why it was not timed: the most tokens/s it could reach there against the pick's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.analysis.outcome import trial_outcome
from orchestrator.engines import engine_of
from orchestrator.search.fidelity import PHASES, Outcomes
from orchestrator.search.racing import value
from orchestrator.search.samplers import mark_interrupted, tried_keys
from orchestrator.search.servingsearch import ServingSearch
from orchestrator.search.strategy import Decision, Measured, Request, Sweep
from orchestrator.spec.serving import SPEED
from orchestrator.spec.space import candidate_of, grid, params_key
from orchestrator.spec.sweep import FidelitySpec
from workloads.serving.acceptance import Acceptance, served_record
from workloads.serving.config import ServingConfig


@dataclass
class ServingFidelity:
    """The state of one search over `configs` (grid key -> (pair, ServingConfig))."""

    configs: dict[tuple, tuple[str, ServingConfig]]
    profile_configs: dict[tuple, object]  # key -> its acceptance.profile_config
    prompt_ids: Callable[[str, int], list[int]]  # (pair, prompt index) -> its token ids
    total: int
    tolerance: float
    error: float
    seed: int = 0
    repeats: int = 1  # serving.repeats: what timing a setting beside another saves
    profiles: dict[tuple, list[dict]] = field(default_factory=dict)
    timed: dict[tuple, list[dict]] = field(default_factory=dict)
    stopped: dict[tuple, str] = field(default_factory=dict)
    predicted_before: dict[tuple, float] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    profile_s: dict[tuple, float] = field(default_factory=dict)
    searches: dict[str, ServingSearch] = field(default_factory=dict)  # per pair, once profiled
    profiled: bool = False  # the profiles were asked for
    over: bool = False
    objectives: tuple[str, ...] = ()  # what a decision's predictions are of
    outcomes: Outcomes = field(default_factory=Outcomes)

    @property
    def pairs(self) -> dict[tuple, str]:
        return {k: pair for k, (pair, _) in self.configs.items()}

    def _key(self, pair: str, setting: tuple[str, int], concurrency: int) -> tuple:
        return next(k for k, (p, c) in self.configs.items()
                    if p == pair and c.setting == setting and c.concurrency == concurrency)

    def step(self) -> list[Request]:
        """The next requests; [] when the search is over."""
        if not self.profiled:
            self.profiled = True
            firsts: dict[tuple, tuple] = {}
            for key in sorted(self.configs):
                firsts.setdefault((self.configs[key][0], self.profile_configs[key]), key)
            return [Request(key, False, 0, self.total, "profile", self.profile_configs[key])
                    for key in firsts.values()]
        if not self.searches:
            self._start_searches()
        requests = []
        for pair, search in sorted(self.searches.items()):
            chosen = search.next()
            if chosen is None:
                continue
            setting, where = chosen
            for c in where:
                for timed in [setting, *search.beside(setting, c)]:
                    key = self._key(pair, timed, c)
                    # in the first objective's unit, as the summary compares it (tok/s or a ratio)
                    before = self.predicted(key, self.objectives[0]) if self.objectives else None
                    if before is not None:
                        self.predicted_before[key] = before
                    requests.append(Request(key, True, 0, self.total, "timing"))
        if not requests and not self.over:
            self.over = True
            self._stop_untimed()
        return requests

    def _start_searches(self) -> None:
        for pair in sorted({p for p, _ in self.configs.values()}):
            keys = [k for k in self.configs if self.configs[k][0] == pair and k in self.profiles]
            gains, starts = {}, {}
            for key in keys:
                config = self.configs[key][1]
                accepted = Acceptance.of(self.profiles[key])
                gains[config.setting] = (accepted.step_gain, accepted.width)
                starts[config.setting] = engine_of(config).start_key(pair, config)
            gains.setdefault(("none", 0), (1.0, 0.0))  # the control: measured beside every timing
            concurrencies = sorted({self.configs[k][1].concurrency for k in keys})
            self.searches[pair] = ServingSearch(gains, concurrencies, self.tolerance, self.error,
                                                 self.repeats, starts)

    def _stop_untimed(self) -> None:
        for key, (pair, config) in self.configs.items():
            if key in self.timed or key in self.stopped:
                continue
            search = self.searches[pair]
            c = config.concurrency
            if config.method == "none":
                measured = search.predicted(("none", 0), c)
                self.stopped[key] = ("measured as the control beside every timing" if measured is None else
                                     f"measured as the control beside every timing: {measured:.0f} tok/s")
                continue
            most = search.optimistic(config.setting, c)
            self.stopped[key] = (f"not timed: at most {most:.2f}x the speed without speculation at "
                                 f"concurrency {c}, the pick {search.best(c):.2f}x (tolerance "
                                 f"{self.tolerance:.0%})")

    def _sharing(self, key: tuple) -> list[tuple]:
        """The configurations of `key`'s pair measured by the same profile as `key`."""
        pair, profile = self.configs[key][0], self.profile_configs[key]
        return [k for k, (p, _) in self.configs.items() if p == pair and self.profile_configs[k] == profile]

    def fail(self, key: tuple, why: str) -> None:
        """A request that failed: a profile's configurations leave the search, a timing's is
        never timed again there, nor picked."""
        pair, config = self.configs[key]
        if pair not in self.searches:
            for k in self._sharing(key):
                self.stopped[k] = f"failed: {why}"
            return
        self.stopped[key] = f"failed: {why}"
        self.searches[pair].fail(config.setting, config.concurrency)

    def tell(self, request: Request, measured: Measured) -> None:
        """A request's records (prompt order) and engine-seconds; a timing's raw shard
        results give its tokens/s and ratio against its control; a failed one `fail`s."""
        if self.outcomes.told(request, measured):
            self.fail(request.key, measured.error)
            return
        records, seconds = measured.records, measured.seconds
        self.spent[request.phase] += seconds
        if request.timed:
            self.timed[request.key] = records
            pair, config = self.configs[request.key]
            metrics, _ = trial_outcome(measured.results, None, self.seed)
            self.searches[pair].tell(config.setting, config.concurrency, metrics["throughput_tps"],
                                     metrics["throughput_ratio"])
            return
        pair = self.configs[request.key][0]
        sharing = self._sharing(request.key)
        for key in sharing:
            config = self.configs[key][1]
            self.profiles[key] = [served_record(config, r, self.prompt_ids(pair, r["index"]))
                                  for r in records]
            self.profile_s[key] = seconds / len(sharing)

    def predicted(self, key: tuple, metric: str) -> float | None:
        """`metric` of `key`: its speed from the cost lines of its method (where two widths
        are timed at its concurrency), else what its profile measured (None if it cannot)."""
        pair, config = self.configs[key]
        if metric in SPEED:
            search = self.searches.get(pair)
            tps = None if search is None else search.predicted(config.setting, config.concurrency)
            if tps is None or metric == "throughput_tps":
                return tps
            return tps / search.tps(1.0, config.concurrency)
        records = self.profiles.get(key)
        return value(records, metric) if records else None

    def frontier(self) -> list[tuple]:
        return sorted(self.timed)

    def ask(self, in_flight: int) -> list[Request]:
        """`step`, once every request of the last one is told."""
        return [] if in_flight else self.outcomes.over_if(self.step())

    def decided(self) -> list[Decision]:
        return self.outcomes.decisions(self, self.objectives)

    def note(self, step: list[Request]) -> str:
        """What a step does, for the progress line."""
        if step[0].phase == "profile":
            return (f"measuring acceptance of {len(self.configs)} configurations in {len(step)} "
                    "untimed batches")
        where: dict[tuple, list[str]] = {}  # the chosen setting first, then those beside it
        for r in step:
            config = self.configs[r.key][1]
            setting = config.method, config.num_speculative_tokens
            where.setdefault(setting, []).append(str(config.concurrency))
        ((method, n), cs), *beside = where.items()
        said = f"timing {method} {n} in vLLM at concurrency {', '.join(cs)}"
        for (method, n), cs in beside:
            said += f", {method} {n} beside it at {', '.join(cs)}"
        return f"{said} ({len(self.timed)} of {len(self.configs)} timed so far)"


def for_sweep(sweep: Sweep) -> ServingFidelity:
    """The search over a vLLM sweep's grid, with the spec's tolerance and error; the trials a
    killed session left running are marked interrupted (the search records every candidate
    not recorded yet, those included)."""
    from workloads.models.pair import load_tokenizer
    from workloads.serving.acceptance import profile_config

    spec = sweep.spec
    mark_interrupted(sweep.study)
    f = spec.search.fidelity or FidelitySpec()
    configs, proxies = {}, {}
    for params in grid(spec):
        candidate = candidate_of(spec, params)
        configs[params_key(params)] = candidate.pair, candidate.config
        proxies[params_key(params)] = profile_config(candidate.config, spec.pair_kinds[candidate.pair])
    tokenizers = {p.name: load_tokenizer(p.load_spec()) for p in spec.pairs}

    def prompt_ids(pair: str, index: int) -> list[int]:
        return tokenizers[pair](sweep.prompts[pair][index], verbose=False).input_ids

    sweep.progress.target = len(configs)
    return ServingFidelity(configs, proxies, prompt_ids, len(sweep.indices), f.tolerance, f.error,
                           seed=spec.search.seed, repeats=spec.serving.repeats,
                           objectives=tuple(spec.objectives), outcomes=Outcomes(tried_keys(sweep.study)))
