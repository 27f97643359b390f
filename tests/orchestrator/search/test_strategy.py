"""The contract every search strategy keeps (search/strategy.py), checked on each registered
one (search/registry.py) and on the sustained-rate bisection, as Optuna checks every sampler
with one test: asked and told through the protocol alone, it ends; it asks nothing twice;
it decides every candidate it measured exactly once; a request that failed is never asked
again; it keeps to what is in flight. Measurements are simulated (no decoding), so a new
strategy is held to all of it by being registered."""

import math
import random

import optuna
import pytest

from orchestrator.engines.shard import measured_together
from orchestrator.search.bisection import Bisection
from orchestrator.search.registry import STRATEGIES, for_sweep
from orchestrator.search.strategy import Decision, Measured, Progress, Request, Sweep
from orchestrator.spec.space import grid, params_key, together_key
from orchestrator.spec.sweep import parse_spec
from orchestrator.stored import STOPPED

PROMPTS = 16
SPACE = {"schedule": ["linear", "packed"], "block": [2, 4], "steps": [1, 2], "rule": ["lossless", "linear"],
         "leniency": [0.5, 1.0], "max_new_tokens": 24}


SERVED = {"engine": ["vllm"], "method": ["none", "ngram", "dflash"], "num_speculative_tokens": [2, 4],
          "concurrency": [1, 4], "max_new_tokens": 24}


def spec(sampler: str, racing: bool = False, served: bool = False):
    search = {"sampler": sampler, "trials": 6, "parallel": 2, "seed": 3}
    if racing:
        search["racing"] = {"start": 4}
    return parse_spec({"name": "contract", "pairs": ["toy-dflash" if served else "toy"],
                       "task": {"name": "arith", "limit": PROMPTS}, "space": SERVED if served else SPACE,
                       "objectives": {"throughput_tps": "max", "accuracy": "max"}, "search": search})


def record(key: tuple, index: int) -> dict:
    """A prompt's record as a worker returns it, drawn from the candidate and the prompt."""
    rng = random.Random(f"{key}:{index}")
    iterations = rng.randint(4, 12)
    nfe = iterations * rng.randint(1, 3)
    wall = 0.001 * nfe * rng.lognormvariate(0, 0.05)
    return {"index": index, "new_tokens": iterations * rng.randint(1, 4), "nfe": nfe, "rows": nfe * 3,
            "iterations": iterations, "correct": float(rng.random() < 0.7), "wall_s": wall,
            "batch_wall_s": wall}


class Harness:
    """Asks and tells a strategy through the protocol, holding it to the contract as it goes,
    and records each decision on the study as the sweep's recorder does (`sweep`)."""

    def __init__(self, strategy, failing: set = frozenset(), sweep: Sweep | None = None):
        self.strategy, self.failing, self.sweep = strategy, failing, sweep
        self.asked: list[Request] = []
        self.decisions: list[Decision] = []

    def record(self, decisions: list[Decision]) -> None:
        self.decisions += decisions
        for d in decisions:
            if self.sweep is None or d.trial is None:
                continue
            study, progress = self.sweep.study, self.sweep.progress
            progress.finished += 1
            if d.error is not None:
                study.tell(d.trial, state=optuna.trial.TrialState.FAIL)
            elif d.stopped:
                d.trial.set_user_attr(STOPPED, 1)
                study.tell(d.trial, state=optuna.trial.TrialState.PRUNED)
            else:
                rows = [r for out in d.results for r in out["records"]]
                study.tell(d.trial, [sum(r["new_tokens"] for r in rows) / sum(r["wall_s"] for r in rows),
                                     sum(r["correct"] for r in rows) / len(rows)])

    def units(self, requests: list[Request]) -> list[list]:
        """The requests' units of parallelism: the trials timed together (measured_together) are one."""
        spec = self.sweep.spec if self.sweep is not None else None
        units: list[list] = []
        for r in requests:
            key = together_key(spec, dict(r.key)) if spec is not None and r.trial is not None else None
            unit = next((u for u in units if all(measured_together(k, key) for k in u)), None)
            if unit is None:
                units.append([key])
            else:
                unit.append(key)
        return units

    def measure(self, request: Request) -> Measured:
        if request.key in self.failing:
            return Measured([], 0.1, error="decode failed")
        rows = [record(request.key, i) for i in range(request.start, request.end)]
        if dict(request.key).get("concurrency") and request.timed:  # a load served by vLLM
            wall = sum(r["wall_s"] for r in rows)
            rows = [{**r, "ttft_s": 0.01, "tpot_s": 0.001, "itl_s": [0.001], "queue_s": 0.0, "batch": 0,
                     "batch_wall_s": wall, "token_ids": list(range(r["new_tokens"]))} for r in rows]
            control = {"index": 0, "new_tokens": sum(r["new_tokens"] for r in rows), "wall_s": 1.3 * wall,
                       "at": 0.0, "repeats": 1}
            return Measured(rows, wall, [{"records": rows, "controls": [control]}])
        if not request.timed:  # a profile: what vLLM's counters would count, per prompt
            rows = [{**r, "token_ids": list(range(r["new_tokens"])), "drafted": 2 * r["iterations"],
                     "accepted": r["iterations"]} for r in rows]
        return Measured(rows, sum(r["wall_s"] for r in rows), [{"records": rows}])

    def run(self, parallel: int, rounds: int = 500) -> None:
        in_flight: list[Request] = []
        for _ in range(rounds):
            new = self.strategy.ask(len(in_flight))
            # keeps to what is in flight, the trials timed together counting as one
            assert len(self.units(in_flight + new)) <= max(parallel, len(self.units(in_flight)))
            for request in new:
                assert isinstance(request, Request) and request.start <= request.end
                same = [r for r in self.asked if (r.key, r.timed, r.start) == (request.key, request.timed,
                                                                                 request.start)]
                assert not same, f"asked twice: {request}"
                assert not (request.key in self.failing and any(r.key == request.key for r in self.asked
                                                                  if r.timed == request.timed)), request
            self.asked += new
            in_flight += new
            if not in_flight:
                self.record(self.strategy.decided())
                return
            done = in_flight.pop(0)  # one at a time, oldest first, as results arrive
            self.strategy.tell(done, self.measure(done))
            self.record(self.strategy.decided())
        pytest.fail("the strategy did not end")


def sweep_of(sampler: str, racing: bool = False, served: bool = False) -> Sweep:
    s = spec(sampler, racing, served)
    study = optuna.create_study(directions=["maximize", "maximize"])
    prompts = {p.name: {i: f"{i} + {i} =" for i in range(PROMPTS)} for p in s.pairs}
    return Sweep(s, study, Progress(s.search.trials), list(range(PROMPTS)), prompts)


# every registered strategy with and without racing (the multi-fidelity search always races),
# and on a space vLLM serves the multi-fidelity search (its own strategy there) and the grid
# (its trials timed together)
CASES = [(name, racing, False) for name in STRATEGIES for racing in (False, True)
         if not (racing and name == "multifidelity")]
CASES += [("multifidelity", False, True), ("grid", False, True)]


def test_the_spec_names_exactly_the_registered_strategies():
    from typing import get_args

    from orchestrator.spec.sweep import SearchSpec

    assert set(get_args(SearchSpec.model_fields["sampler"].annotation)) == set(STRATEGIES)


def test_every_registered_strategy_is_in_the_contract():
    assert {name for name, _, _ in CASES} == set(STRATEGIES)
    assert {type(for_sweep(sweep_of(*case))).__name__ for case in CASES if case[0] == "multifidelity"} == {
        "MultiFidelity", "ServingFidelity"}


@pytest.mark.parametrize(("name", "racing", "served"), CASES)
def test_a_registered_strategy_keeps_the_contract(name, racing, served):
    sweep = sweep_of(name, racing, served)
    space = {params_key(p) for p in grid(sweep.spec)}
    failing = {sorted(space)[1]}
    harness = Harness(for_sweep(sweep), failing, sweep)
    harness.run(sweep.spec.search.parallel if name != "multifidelity" else math.inf)
    keys = [d.key for d in harness.decisions]
    assert len(keys) == len(set(keys))  # each candidate decided once
    # to its budget: the trials asked for, or every candidate of a search over the whole grid
    assert len(keys) == (len(space) if name == "multifidelity" else sweep.spec.search.trials)
    assert set(keys) <= space and {r.key for r in harness.asked} <= space
    asked_keys = {r.key for r in harness.asked}
    assert asked_keys <= set(keys)  # whatever it measured, it decided
    assert any(r.timed for r in harness.asked)  # and it timed what it kept
    for d in harness.decisions:
        if d.key in failing and d.key in asked_keys:
            assert d.error == "decode failed" and not d.results  # a failure is recorded as one
        if d.results:
            assert d.error is None
    assert harness.strategy.ask(0) == [] and harness.strategy.decided() == []  # over, and stays so


def test_the_grid_asks_the_trials_of_one_server_start_and_control_together_as_one_of_parallel():
    sweep = sweep_of("grid", served=True)  # parallel 2
    strategy = for_sweep(sweep)

    def points(requests: list[Request]) -> list[tuple]:
        return [(p["method"], p.get("num_speculative_tokens"), p["concurrency"])
                for p in (dict(r.key) for r in requests)]

    first = strategy.ask(0)  # a trial without speculation goes with the first start's of its control
    assert points(first) == [("none", None, 1), ("ngram", 2, 1), ("ngram", 4, 1),
                             ("none", None, 4), ("ngram", 2, 4), ("ngram", 4, 4)]
    for request in first[:3]:
        strategy.tell(request, Harness(strategy).measure(request))
    second = strategy.ask(3)  # three trials in flight, but one group: one more group
    assert points(second) == [("dflash", 2, 1), ("dflash", 4, 1)]
    assert strategy.ask(5) == []  # two groups in flight
    keys = [together_key(sweep.spec, dict(r.key)) for r in first + second]
    assert all(measured_together(keys[0], k) for k in keys[1:3]) and not measured_together(keys[0], keys[3])
    assert measured_together(keys[0], keys[6]) and not measured_together(keys[1], keys[6])  # another start


def test_interrupted_trials_timed_together_are_asked_again_together():
    sweep = sweep_of("grid", served=True)  # parallel 2
    for params in grid(sweep.spec)[:3]:  # none, ngram 2 and 4 at concurrency 1: enqueued again
        sweep.study.enqueue_trial(params)
    asked = for_sweep(sweep).ask(0)
    keys = [together_key(sweep.spec, dict(r.key)) for r in asked]
    assert len(asked) == 6 and all(measured_together(keys[0], k) for k in keys[1:3])
    assert [dict(r.key)["concurrency"] for r in asked] == [1, 1, 1, 4, 4, 4]  # and then one more group
    partial = sweep_of("grid", served=True)
    partial.study.enqueue_trial({"method": "ngram"})  # interrupted before its other params were asked
    partial.study.enqueue_trial({"method": "ngram"})
    assert len(for_sweep(partial).ask(0)) >= 2  # asked, the sampler choosing the rest


def test_the_bisection_keeps_the_contract():
    truth = 40.0  # loads meet the SLO below this rate

    def judge(measured: Measured) -> bool:
        return measured.records[0]["rate"] < truth

    bisection = Bisection(1.0, 100.0, 5, 3, judge)
    asked, decisions = [], []
    while requests := bisection.ask(0):
        assert len(requests) == 1 and bisection.ask(1) == []  # one load at a time
        (request,) = requests
        asked.append(request)
        rate = dict(request.key)["request_rate"]
        bisection.tell(request, Measured([{"rate": rate}], 1.0))
        decisions += bisection.decided()
    decisions += bisection.decided()
    assert len(asked) == len(set(r.key for r in asked))  # no load asked twice
    (decision,) = decisions
    found = decision.attrs["bracket"]
    assert found.sustained < truth <= found.failed and len(found.probes) == 5 + 2
    assert bisection.ask(0) == [] and bisection.decided() == []


class AsksTwice:
    """A strategy that breaks the contract: it asks its one candidate again once told."""

    def __init__(self):
        self.told = 0

    def ask(self, in_flight):
        return [] if in_flight or self.told > 1 else [Request((("block", 2),), True, 0, 4, "trial")]

    def tell(self, request, measured):
        self.told += 1

    def decided(self):
        return []

    def note(self, requests):
        return ""


def test_the_contract_catches_a_strategy_that_asks_twice():
    with pytest.raises(AssertionError, match="asked twice"):
        Harness(AsksTwice()).run(parallel=1)
