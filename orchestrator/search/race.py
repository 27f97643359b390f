"""Racing in a live sweep: which prompts a trial decodes next, and whether it stops.

A racing trial runs rung by rung (`search.racing.rungs`) on the first prompts of the
race's order (`search.racing.race_order`, fixed by the sweep seed); each rung decodes only
its new prompts, as shards the cache keeps, so a trial resumed mid-race re-decodes nothing
it finished. After a rung the rule of `search.racing.stop` compares the trial's records
with every other trial measured at least as far (finished or stopped, this session or an
earlier one: their per-prompt columns are kept on the study as the `racing` trial
attribute), passing over accuracy for rivals that provably sample its law (`law`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import optuna

from orchestrator.analysis.metrics import PROMPT_SUMS
from orchestrator.analysis.outcome import constraint_terms
from orchestrator.search.racing import Racing, rungs, stop
from orchestrator.spec.sweep import SweepSpec
from workloads.decoding import DecodeConfig
from workloads.decoding.config import is_exact


def law(pair: str, config: DecodeConfig) -> tuple | None:
    """The output law a configuration provably samples: its verifier's (the pair's) under its
    sampling settings and length, when the configuration is exact; None otherwise. Two
    configurations with one law have equal accuracy by construction."""
    if not is_exact(config):
        return None
    return pair, config.temperature, config.top_k, config.top_p, config.max_new_tokens, config.stop


def same_law(a: tuple | None, b: tuple | None) -> bool:
    """Whether two `law`s are one known law (None, not exact, matches nothing)."""
    return a is not None and a == b


def in_order(records: list[dict], order: list[int]) -> list[dict]:
    """`records` in the race's `order` of prompt indices: a rival's first n records are then
    the prompts a candidate measured on n was, so the two compare paired."""
    position = {index: i for i, index in enumerate(order)}
    return sorted(records, key=lambda r: position[r["index"]])


@dataclass(frozen=True)
class Rung:
    """A race's decision after a rung: go on to `next` prompts, stop (`stopped`: dominated
    or infeasible with confidence), or neither (every prompt measured: the trial finishes)."""

    next: int | None = None
    stopped: bool = False


@dataclass
class Race:
    spec: SweepSpec
    total: int  # prompts of the task
    measured: dict[int, list[dict]] = field(default_factory=dict)  # trial number -> records so far
    laws: dict[int, tuple | None] = field(default_factory=dict)  # trial number -> `law`

    @property
    def racing(self) -> Racing:
        r = self.spec.search.race()
        return Racing(start=r.start, factor=r.factor, alpha=r.alpha)

    def columns(self) -> list[str]:
        """The per-prompt columns the objectives and constraints are sums of."""
        metrics = [*self.spec.objectives, *(m for m, _, _ in constraint_terms(self.spec.constraints))]
        return sorted({c for m in metrics if m in PROMPT_SUMS for c in PROMPT_SUMS[m] if c})

    def first(self) -> int:
        """Prompts of the first rung."""
        return rungs(self.total, self.racing)[0]

    def after(self, number: int, records: list[dict], trial_law: tuple | None) -> Rung:
        """The decision after a rung of trial `number` (its records so far, in the race's order;
        its `law`)."""
        self.measured[number], self.laws[number] = records, trial_law
        n = len(records)
        if n >= self.total:
            return Rung()
        rivals = [(r, same_law(trial_law, self.laws.get(k))) for k, r in self.measured.items() if k != number]
        if stop(records, rivals, dict(self.spec.objectives), constraint_terms(self.spec.constraints),
                self.racing, self.spec.search.seed):
            return Rung(stopped=True)
        return Rung(next=next(m for m in rungs(self.total, self.racing) if m > n))

    def keep(self, trial: optuna.Trial, records: list[dict]) -> None:
        """Keep a trial's per-prompt columns on the study, for racing after a resume."""
        trial.set_user_attr("racing", {c: [r.get(c) for r in records] for c in ["index", *self.columns()]})

    def load(self, study: optuna.Study, order: list[int]) -> None:
        """The records of every trial an earlier session finished or stopped, in the race's
        `order` of prompt indices."""
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        for t in study.get_trials(deepcopy=False, states=states):
            kept = t.user_attrs.get("racing")
            if kept:
                records = [dict(zip(kept, row)) for row in zip(*kept.values())]
                self.measured[t.number] = in_order(records, order)
                config = DecodeConfig.from_dict(t.user_attrs["config"])
                self.laws[t.number] = law(t.user_attrs["pair"], config)
