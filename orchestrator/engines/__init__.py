"""The measuring engines, chosen in one place: `ENGINES` by name, `engine_of` a config's.

Nothing outside this package tests an engine's name; it asks the engine (engine.Engine).
"""

from __future__ import annotations

from orchestrator.engines.engine import Config, Engine
from orchestrator.engines.specsweep import SpecsweepEngine
from orchestrator.engines.vllm import VllmEngine

SPECSWEEP, VLLM = SpecsweepEngine(), VllmEngine()
ENGINES: dict[str, Engine] = {e.name: e for e in (SPECSWEEP, VLLM)}
# space dimensions of the engine axis: `engine` and each engine's own settings
DIMENSIONS = ("engine", *(key for e in ENGINES.values() for key in e.settings))


def engine_of(config: Config | dict) -> Engine:
    """The engine of a config, or of a stored config dict (specsweep's where it names none)."""
    name = config.get("engine", SPECSWEEP.name) if isinstance(config, dict) else config.engine
    return ENGINES[name]


def listed(dims: dict[str, list]) -> list[Engine]:
    """The engines a space lists (`space.engine`; specsweep's alone where it lists none);
    every name must be known (space_error)."""
    return [ENGINES[name] for name in dims.get("engine", [SPECSWEEP.name])]


def space_error(dims: dict[str, list], racing: bool) -> str | None:
    """Why the space's engine axis cannot run, in one line, or None: known engines, each
    engine's own settings only with that engine listed, then each listed engine's refusals."""
    unknown = [name for name in dims.get("engine", []) if name not in ENGINES]
    if unknown:
        return f"spec: space.engine: {unknown[0]!r} is not an engine; known: {', '.join(ENGINES)}"
    engines = listed(dims)
    for owner in ENGINES.values():
        own = [key for key in owner.settings if key in dims]
        if own and owner not in engines:
            return f"spec: space.{own[0]}: a {owner.title} setting; add {owner.name} to space.engine"
    for engine in engines:
        why = engine.space_error(dims, racing, alone=len(engines) == 1)
        if why:
            return why
    return None
