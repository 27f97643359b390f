"""The one place a sweep's `search.sampler` is turned into a strategy (strategy.Strategy):
a new strategy is a line here."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.engines import engine_of
from orchestrator.search import fidelity, servingfidelity
from orchestrator.search.samplers import Sampled
from orchestrator.search.strategy import Strategy, Sweep
from orchestrator.spec.space import candidate_of, grid


def multifidelity(sweep: Sweep) -> Strategy:
    """The multi-fidelity search of the engine the sweep's grid is served by: vLLM's
    (servingfidelity: acceptance measured once, vLLM timed where a setting can still win)
    where the grid is served, else specsweep's (fidelity: profiles, a cost model, racing)."""
    served = any(engine_of(candidate_of(sweep.spec, p).config).served for p in grid(sweep.spec))
    return (servingfidelity if served else fidelity).for_sweep(sweep)


STRATEGIES: dict[str, Callable[[Sweep], Strategy]] = {
    "grid": Sampled,
    "random": Sampled,
    "tpe": Sampled,
    "nsga2": Sampled,
    "gp": Sampled,
    "multifidelity": multifidelity,
}


def for_sweep(sweep: Sweep) -> Strategy:
    """The strategy `search.sampler` names, set up on the sweep's study."""
    return STRATEGIES[sweep.spec.search.sampler](sweep)
