"""Orchestration overhead: one sweep of many short trials with 1, 2, ... worker slots, in
this process, timing the trial phase against the decoding inside it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

SPACE = {
    "schedule": ["linear", "packed"],
    "block": [2, 4, 8],
    "steps": [1, 2],
    "rule": ["lossless", "linear"],
    "leniency": [0.25, 0.5, 0.75, 1.0],
    "max_new_tokens": 24,
}


def orchestration_overhead(trials: int, prompts: int, max_slots: int) -> list[dict]:
    """Per slot count: {slots, trials_per_min, outside_decoding}, where outside_decoding =
    1 − Σ decode wall / (slots × trial-phase wall), the share of worker-slot time not spent
    decoding."""
    from orchestrator.spec.sweep import parse_spec
    from orchestrator.sweep.driver import Driver

    data = {
        "name": "bench",
        "pairs": ["toy"],
        "task": {"name": "arith", "limit": prompts},
        "space": SPACE,
        "objectives": {"throughput_tps": "max", "accuracy": "max"},
        "search": {"sampler": "random", "trials": trials, "parallel": 4, "seed": 0},
        "baselines": ["ar"],
    }
    rows = []
    for slots in range(1, max_slots + 1):
        spec = parse_spec({**data, "cluster": {"slots": slots}})
        with tempfile.TemporaryDirectory(prefix="specsweep-bench-") as root:
            driver = Driver(spec, yaml.safe_dump(data), Path(root))
            driver.run()
        rows.append({"slots": slots, "trials_per_min": 60 * driver.progress.finished / driver.trials_s,
                     "outside_decoding": 1 - driver.decode_s / (slots * driver.trials_s)})
    return rows


def heading(trials: int, prompts: int) -> str:
    """The line `specsweep bench sweep` prints before it runs."""
    return f"{trials} trials x {prompts} prompts, toy pair, 4 trials in flight"


def table(rows: list[dict]) -> list[str]:
    """The lines `specsweep bench sweep` prints: one per slot count, speed relative to 1 slot."""
    return [f"slots {r['slots']}: {r['trials_per_min']:6.1f} trials/min "
            f"({r['trials_per_min'] / rows[0]['trials_per_min']:.2f}x of 1 slot), worker-slot time "
            f"outside decoding {100 * r['outside_decoding']:.1f}%" for r in rows]
