"""Ray actors that keep model pairs resident and measure shards of a trial's prompts.

One actor per worker slot (a GPU with `num_gpus=1`, a CPU slot, or a custom resource that
simulates GPU slots in tests). An actor loads each pair it serves once and keeps it across
trials. A shard (engines/shard.py) is (pair, config, prompt indices); each prompt's seed
derives from (sweep seed, prompt index), so a retried shard reproduces its records exactly.
The actor measures a shard the way its config's engine does: the engine's measurer
(engines/specsweep.py's Decoder, engines/serverpool.py's Serving), made once per process and
kept, holds what it keeps warm between shards.
"""

from __future__ import annotations

import os
import platform
import time

import ray

from orchestrator.engines import engine_of
from orchestrator.engines.engine import Engine, Measurer
from orchestrator.engines.shard import Shard, gpu_name, node
from workloads.tasks import Example


def serving(pairs: list[str], slots: int, placement: str) -> dict[int, list[str]]:
    """Worker index -> the pairs it serves: all of them (`shared`), or pairs dealt round
    robin so each worker holds one (`split`)."""
    if placement == "split":
        return {i: [pairs[i % len(pairs)]] for i in range(slots)}
    return {i: pairs for i in range(slots)}


class PairWorker:
    """Actor body; see the module docstring."""

    def __init__(self, pairs: dict[str, str | dict], task: str, sweep_seed: int, logs: str | None = None):
        from workloads.tasks import TASKS

        self.pair_specs = pairs
        self.pairs: dict = {}
        self.task = TASKS[task]()  # scoring only: examples arrive with the shard
        self.sweep_seed = sweep_seed
        self.logs = logs  # where serving engines log (the sweep's state on its node)
        self.measurers: dict[str, Measurer] = {}  # engine name -> its measurer in this process

    def pair(self, name: str):
        """The pair `name`, loaded once and kept resident."""
        if name not in self.pairs:
            from workloads.models import load_pair

            self.pairs[name] = load_pair(self.pair_specs[name])
        return self.pairs[name]

    def info(self) -> dict:
        return {"node": node(), "pid": os.getpid(), "gpu": gpu_name(), "hardware": hardware()}

    def load(self, names: list[str]) -> None:
        for name in names:
            self.pair(name)

    def measurer(self, engine: Engine) -> Measurer:
        """`engine`'s measurer in this process, made on its first shard and kept."""
        if engine.name not in self.measurers:
            self.measurers[engine.name] = engine.measurer(self)
        return self.measurers[engine.name]

    def run(self, shards: list[Shard], items: list[tuple[Example, str]]) -> list[dict]:
        """Measure and score every (example, formatted prompt) of the shards (one, or several
        measured together: Shard.together) the way their engine measures (its measurer); per
        shard, its result, whose `engine_s` is its share of the seconds the call took here, all
        of them (warm-up, controls, engine starts)."""
        start = time.perf_counter()
        outs = self.measurer(engine_of(shards[0].config)).measure(shards, items)
        share = (time.perf_counter() - start) / len(shards)
        return [{**out, "engine_s": share} for out in outs]

    def close(self) -> None:
        """Have every measurer stop what it started (the vLLM servers of this worker)."""
        for measurer in self.measurers.values():
            measurer.close()


def hardware() -> dict:
    """What timings depend on: CPU model and cores, GPU model and count, torch and
    transformers versions, torch threads in this process."""
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"cpu": cpu, "cpu_cores": os.cpu_count(), "gpu": gpu_name() if gpus else None, "gpus": gpus,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads()}


def start_workers(runtime_envs: list[dict | None], resource: str, pairs: dict[str, str | dict], task: str,
                  sweep_seed: int, logs: str | None = None) -> list:
    """One actor per slot (len(runtime_envs)), each holding one unit of `resource` (cpu, gpu
    or custom), spread over the cluster's nodes; runtime_envs[i] is slot i's Ray runtime_env;
    their vLLM servers log under `logs`."""
    if resource == "cpu":
        options = {"num_cpus": 1}
    elif resource == "gpu":
        options = {"num_gpus": 1, "num_cpus": 1}
    else:
        options = {"num_cpus": 0, "resources": {resource: 1}}
    actor = ray.remote(max_restarts=-1, max_task_retries=0)(PairWorker)
    return [actor.options(**options, scheduling_strategy="SPREAD", **({"runtime_env": env} if env else {}))
            .remote(pairs, task, sweep_seed, logs) for env in runtime_envs]
