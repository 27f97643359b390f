"""Ray actors that keep model pairs resident and decode shards of a trial's prompts.

One actor per worker slot (a GPU with `num_gpus=1`, a CPU slot, or a custom resource that
simulates GPU slots in tests). An actor loads each pair it serves once and keeps it across
trials. A shard is (pair, config, prompt indices); each prompt's seed derives from (sweep
seed, prompt index), so a retried shard reproduces its records exactly. When the model
engine itself fails (CUDA errors, out of memory) the process exits so Ray restarts it clean.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace

import ray

from workloads.decoding import DecodeConfig, decode
from workloads.tasks import Example

FATAL = ("CUDA error", "out of memory", "CUBLAS_STATUS", "device-side assert")


def prompt_seed(sweep_seed: int, index: int) -> int:
    """Seed of prompt `index` in a sweep: the same for every config, worker and retry."""
    digest = hashlib.sha256(f"{sweep_seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass(frozen=True)
class Shard:
    trial: int  # Optuna trial number, or a negative id for baselines
    pair: str
    config: dict  # DecodeConfig.to_dict()
    indices: tuple[int, ...]


class PairWorker:
    """Actor body; see the module docstring."""

    def __init__(self, pairs: dict[str, str | dict], task: str, sweep_seed: int):
        from workloads.tasks import TASKS

        self.pair_specs = pairs
        self.pairs: dict = {}
        self.task = TASKS[task]()  # scoring only: examples arrive with the shard
        self.sweep_seed = sweep_seed

    def _pair(self, name: str):
        if name not in self.pairs:
            from workloads.models import load_pair

            self.pairs[name] = load_pair(self.pair_specs[name])
        return self.pairs[name]

    def info(self) -> dict:
        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "gpu": _gpu_name()}

    def load(self, names: list[str]) -> None:
        for name in names:
            self._pair(name)

    def run(self, shard: Shard, items: list[tuple[Example, str]]) -> dict:
        """Decode and score every (example, formatted prompt) of the shard; returns the
        per-prompt records, the Ray node and the GPU model that ran them."""
        pair = self._pair(shard.pair)
        base = DecodeConfig.from_dict(shard.config)
        records = []
        for example, prompt in items:
            config = replace(base, seed=prompt_seed(self.sweep_seed, example.index))
            try:
                result = decode(pair, prompt, config)
            except RuntimeError as err:
                if any(s in str(err) for s in FATAL):
                    os._exit(1)  # a broken engine: let Ray restart this worker
                raise
            record = result.to_dict()
            record.pop("accept_lengths")
            score = self.task.judge(example, result.text)
            record.update(index=example.index, correct=score.correct, detail=score.detail)
            records.append(record)
        _release_device_memory()
        return {
            "records": records,
            "node": ray.get_runtime_context().get_node_id(),
            "gpu": _gpu_name(),
        }


def _release_device_memory() -> None:
    """Return the shard's cached KV blocks and activations to the GPU between trials, so a
    trial's peak memory does not carry into the next configuration's."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def start_workers(runtime_envs: list[dict | None], resource: str, pairs: dict[str, str | dict], task: str,
                  sweep_seed: int) -> list:
    """One actor per slot (len(runtime_envs)), each holding one unit of `resource` (cpu, gpu
    or custom), spread over the cluster's nodes; runtime_envs[i] is slot i's Ray runtime_env."""
    if resource == "cpu":
        options = {"num_cpus": 1}
    elif resource == "gpu":
        options = {"num_gpus": 1, "num_cpus": 1}
    else:
        options = {"num_cpus": 0, "resources": {resource: 1}}
    actor = ray.remote(max_restarts=-1, max_task_retries=0)(PairWorker)
    return [actor.options(**options, scheduling_strategy="SPREAD", **({"runtime_env": env} if env else {}))
            .remote(pairs, task, sweep_seed) for env in runtime_envs]
