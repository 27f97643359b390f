"""The picks of several vLLM sweeps of one pair, served again side by side: at each
concurrency, each sweep's fastest configuration, every one of them on its own resident
server, their loads interleaved A B C C B A … so drift falls on all alike; each one's median
tokens/s, and its gap to the fastest there. Two sweeps that searched the same space
differently (a grid and the multi-fidelity search) are compared on the same clock.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path

import optuna

from workloads.serving.config import ServingConfig

Setting = tuple  # ServingConfig.setting: (method, num_speculative_tokens, DSpark top-k, adaptive)


def sweep_picks(root: Path, sweep: str, by: str | None = None) -> tuple[str, dict[int, ServingConfig]]:
    """(its pair, concurrency -> the complete trial with the largest `by` there: the sweep's
    first objective unless named) of a vLLM sweep."""
    from orchestrator.engines import engine_of
    from orchestrator.sweep.study import load_sweep

    spec, study = load_sweep(root, sweep)
    by = by or next(iter(spec.objectives))
    best: dict[int, tuple[float, ServingConfig]] = {}
    pairs = set()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        config = t.user_attrs["config"]
        if not engine_of(config).served:
            continue
        pairs.add(t.user_attrs["pair"])
        score = t.user_attrs["metrics"][by]
        c = config["concurrency"]
        if c not in best or score > best[c][0]:
            best[c] = score, ServingConfig.from_dict(config)
    if not best:
        raise ValueError(f"{sweep}: no finished vLLM trial to pick from")
    if len(pairs) > 1:
        raise ValueError(f"{sweep}: picks of {len(pairs)} pairs; compare sweeps of one pair")
    return pairs.pop(), {c: config for c, (_, config) in best.items()}


def pair_and_prompts(root: Path, sweeps: list[str], pairs: set[str]) -> tuple[dict, list[list[int]]]:
    """The checkpoints of the one pair the sweeps pick from (`pairs`: each sweep's) and the
    first sweep's prompts as that pair's token ids; ValueError for sweeps of several pairs."""
    from orchestrator.sweep.prompts import pair_prompts
    from orchestrator.sweep.study import load_sweep
    from workloads.models.pair import load_tokenizer
    from workloads.models.pairspec import refs
    from workloads.tasks import get_task

    if len(pairs) > 1:
        raise ValueError(f"sweeps: they pick from different pairs ({', '.join(sorted(pairs))})")
    spec, _ = load_sweep(root, sweeps[0])
    pair = next(p for p in spec.pairs if p.name in pairs)
    task = get_task(spec.task.name, spec.task.data)
    texts = pair_prompts(spec, task, task.examples(n=spec.task.limit, seed=spec.task.seed))[pair.name]
    tokenizer = load_tokenizer(pair.load_spec())
    return refs(pair.load_spec()), [tokenizer(t, verbose=False).input_ids for t in texts.values()]


def serve_picks(refs: dict, ids: list[list[int]], picks: dict[str, dict[int, ServingConfig]], repeats: int,
                progress: Callable[[str], None] | None = None) -> list[dict]:
    """One row per (concurrency, sweep): its pick, median tokens/s over `repeats` loads
    interleaved with the other sweeps' picks there, and its gap to the fastest pick."""
    from workloads.serving.load import measured, switch
    from workloads.serving.vllm import EngineSettings, VllmServer

    servers: dict[Setting, VllmServer] = {}
    rows, last = [], None
    try:
        for c in sorted({c for chosen in picks.values() for c in chosen}):
            here = {name: chosen[c] for name, chosen in picks.items() if c in chosen}
            settings = list(dict.fromkeys(config.setting for config in here.values()))
            walls: dict[Setting, list[float]] = {s: [] for s in settings}
            tokens: dict[Setting, int] = {}
            for s in settings:
                if s not in servers:
                    servers[s] = VllmServer(EngineSettings.of(refs, next(x for x in here.values()
                                                                          if x.setting == s)))
                    servers[s].start()
            for turn in range(repeats):
                order = settings if turn % 2 == 0 else settings[::-1]
                for s in order:
                    config = dataclasses.replace(next(x for x in here.values() if x.setting == s),
                                                 concurrency=c)
                    switch(last, servers[s])
                    last = servers[s]
                    served, wall = measured(servers[s], ids, config)
                    walls[s].append(wall)
                    tokens[s] = sum(len(x.token_ids) for x in served)
            tps = {s: tokens[s] / statistics.median(walls[s]) for s in settings}
            fastest = max(tps.values())
            for name, config in here.items():
                s = config.setting
                rows.append({"concurrency": c, "sweep": name, "method": s[0], "num_speculative_tokens": s[1],
                             "throughput_tps": tps[s], "gap": tps[s] / fastest - 1, "loads": repeats})
            if progress:
                progress(f"concurrency {c}: "
                         + ", ".join(f"{s[0]} {s[1]} {v:.0f} tok/s" for s, v in tps.items()))
    finally:
        for server in servers.values():
            server.stop()
    return rows


def table(rows: list[dict]) -> list[str]:
    lines = [f"{'conc':>4} {'sweep':<20} {'pick':<10} {'tok/s':>8} {'vs fastest':>10}"]
    for r in rows:
        pick = f"{r['method']} {r['num_speculative_tokens']}"
        lines.append(f"{r['concurrency']:>4} {r['sweep']:<20} {pick:<10} {r['throughput_tps']:8.1f} "
                     f"{r['gap']:>+10.1%}")
    return lines
