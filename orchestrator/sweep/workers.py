"""Ray actors that keep model pairs resident and decode shards of a trial's prompts.

One actor per worker slot (a GPU with `num_gpus=1`, a CPU slot, or a custom resource that
simulates GPU slots in tests). An actor loads each pair it serves once and keeps it across
trials. A shard is (pair, config, prompt indices); each prompt's seed derives from (sweep
seed, prompt index), so a retried shard reproduces its records exactly. When the model
engine itself fails (CUDA errors, out of memory) the process exits so Ray restarts it clean.

Timing honesty: the first time a process decodes with a pair (after loading it, and so
after any restart) it first decodes WARMUP prompts untimed, with the shard's config and
with its control config, so no timed decode pays for lazy initialisation. A shard of a
trial also decodes its *controls*: the `ar` baseline config on CONTROLS of its own batches,
each right before the trial's decode of that batch, so the trial's speed can be compared
with `ar` timed under the same conditions (orchestrator/analysis/metrics.py: controlled_ratios).

At batch size b a shard decodes its prompts b at a time, in order; each record carries its
batch (`batch`: the index of the batch's first prompt, the same for every config at that
batch size), the batch's wall time `batch_wall_s` and forward passes `batch_nfe`; and, as
every DecodeResult field, `accept_lengths` (the draft tokens each iteration accepted, a list
of ints no longer than the prompt's `token_ids`), from which a trial's accept-length
histogram is summed (orchestrator/analysis/metrics.py: acceptance_by_position).
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import ray

from orchestrator.engines import engine_of
from workloads.decoding import DecodeConfig, decode_batch
from workloads.serving.config import ServingConfig
from workloads.tasks import Example

FATAL = ("CUDA error", "out of memory", "CUBLAS_STATUS", "device-side assert")
WARMUP = 2  # untimed prompts per pair and process, before its first timed decode
CONTROLS = 3  # prompts per trial shard also decoded with `ar` under the same conditions


def judged(task, example: Example, text: str) -> dict:
    """What a record holds of its example: its index, the task's score of `text` and, where
    the task labels its examples (`mix`, a dataset's category field), its category."""
    score = task.judge(example, text)
    category = {"category": example.meta["category"]} if "category" in example.meta else {}
    return {"index": example.index, "correct": score.correct, "detail": score.detail, **category}


def scored(task, example: Example, result) -> dict:
    """A decoded prompt's record: its DecodeResult and what it holds of its example (`judged`)."""
    return {**result.to_dict(), **judged(task, example, result.text)}


def prompt_seed(sweep_seed: int, index: int) -> int:
    """Seed of prompt `index` in a sweep: the same for every config, worker and retry."""
    digest = hashlib.sha256(f"{sweep_seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass(frozen=True)
class Shard:
    trial: int  # Optuna trial number, or a negative id for baselines
    pair: str
    config: DecodeConfig | ServingConfig  # validated once, where the driver built it; pickled as it is
    indices: tuple[int, ...]
    control: DecodeConfig | ServingConfig | None = None  # `ar`, or vLLM unspeculative: timed beside the trial
    batch_size: int = 1  # prompts decoded together; a shard holds whole batches
    repeats: int = 1  # a served trial's load and its control's, each timed this many times


def serving(pairs: list[str], slots: int, placement: str) -> dict[int, list[str]]:
    """Worker index -> the pairs it serves: all of them (`shared`), or pairs dealt round
    robin so each worker holds one (`split`)."""
    if placement == "split":
        return {i: [pairs[i % len(pairs)]] for i in range(slots)}
    return {i: pairs for i in range(slots)}


def control_positions(n: int, count: int = CONTROLS) -> list[int]:
    """Which of a shard's n prompts (positions) get a control: `count` spread evenly, first
    and last included, so drift within the shard falls on controls and trial alike."""
    if n <= count:
        return list(range(n))
    return sorted({round(k * (n - 1) / (count - 1)) for k in range(count)})


class PairWorker:
    """Actor body; see the module docstring."""

    def __init__(self, pairs: dict[str, str | dict], task: str, sweep_seed: int, logs: str | None = None):
        from workloads.tasks import TASKS

        self.pair_specs = pairs
        self.pairs: dict = {}
        self.task = TASKS[task]()  # scoring only: examples arrive with the shard
        self.sweep_seed = sweep_seed
        self.warm: set[str] = set()  # pairs this process has decoded its warm-up prompts with
        self.engines = None  # the vLLM servers of the shards under engine vllm (sweep.serving)
        self.logs = logs  # where those servers log (the sweep's state on its node)

    def _pair(self, name: str):
        if name not in self.pairs:
            from workloads.models import load_pair

            self.pairs[name] = load_pair(self.pair_specs[name])
        return self.pairs[name]

    def info(self) -> dict:
        return {"node": _node(), "pid": os.getpid(), "gpu": _gpu_name(), "hardware": hardware()}

    def load(self, names: list[str]) -> None:
        for name in names:
            self._pair(name)

    def _decode(self, pair, prompts: list[str], config: DecodeConfig, seeds: list[int]):
        try:
            return decode_batch(pair, prompts, config, seeds=seeds)
        except RuntimeError as err:
            if any(s in str(err) for s in FATAL):
                os._exit(1)  # a broken engine: let Ray restart this worker
            raise

    def _warm_up(self, name: str, pair, configs: list[DecodeConfig], prompts: list[str], size: int) -> int:
        """Untimed decodes of the first WARMUP prompts one by one, or of the first batch at a
        batch size above 1, once per pair and process; returns how many prompts were decoded
        (0 when the pair is already warm)."""
        if name in self.warm:
            return 0
        made = 0
        for start in range(0, min(len(prompts), max(WARMUP, size)), size):
            batch = prompts[start:start + size]
            for config in configs:
                self._decode(pair, batch, config, [config.seed] * len(batch))
                made += len(batch)
        self.warm.add(name)
        return made

    def run(self, shard: Shard, items: list[tuple[Example, str]]) -> dict:
        """Measure and score every (example, formatted prompt) of the shard the way its
        config's engine measures (Engine.measure: `decode` here, or `serve` on a server);
        `engine_s`: the seconds it took here, all of it (warm-up, controls, engine starts)."""
        start = time.perf_counter()
        out = engine_of(shard.config).measure(self, shard, items)
        return {**out, "engine_s": time.perf_counter() - start}

    def decode(self, shard: Shard, items: list[tuple[Example, str]]) -> dict:
        """`run` in specsweep's engine: decode the shard in batches of its batch size, with its
        controls; returns the per-prompt records, the control records (per batch: `index` its
        batch, `new_tokens`, `wall_s`, `at`: when it ran), how many untimed warm-up decodes
        preceded them, the Ray node and the GPU model."""
        pair = self._pair(shard.pair)
        base, control = shard.config, shard.control
        configs = [base] + ([control] if control else [])
        size = shard.batch_size
        warmup = self._warm_up(shard.pair, pair, configs, [p for _, p in items], size)
        batches = [items[i:i + size] for i in range(0, len(items), size)]
        controlled = set(control_positions(len(batches))) if control else set()
        records, controls = [], []
        for position, batch in enumerate(batches):
            seeds = [prompt_seed(self.sweep_seed, example.index) for example, _ in batch]
            prompts = [prompt for _, prompt in batch]
            first = batch[0][0].index
            if position in controlled:
                at = time.time()
                timed = self._decode(pair, prompts, control, seeds)
                controls.append({"index": first, "new_tokens": sum(r.new_tokens for r in timed.results),
                                 "wall_s": timed.wall_s, "at": at})
            done = self._decode(pair, prompts, base, seeds)
            for (example, _), result in zip(batch, done.results):
                records.append({**scored(self.task, example, result), "batch": first,
                                "batch_wall_s": done.wall_s, "batch_nfe": done.nfe})
        _release_device_memory()
        return {"records": records, "controls": controls, "warmup": warmup, "node": _node(),
                "gpu": _gpu_name()}

    def serve(self, shard: Shard, items: list[tuple[Example, str]]) -> dict:
        """`run` under the vllm engine (sweep.serving); `engine_start_s`: seconds spent
        starting servers for it; `engine_restarts`: servers found dead and started again."""
        from orchestrator.sweep.serving import Engines, serve_shard
        from workloads.models.pair import load_tokenizer

        if self.engines is None:
            self.engines = Engines(self.pair_specs, None if self.logs is None else Path(self.logs))
        tokenizer = load_tokenizer(self.pair_specs[shard.pair])
        prompts = [tokenizer(prompt, verbose=False).input_ids for _, prompt in items]
        restarts = self.engines.restarts
        records, controls, started, report = serve_shard(self.engines, shard.pair, shard.config,
                                                         shard.control, prompts, items[0][0].index,
                                                         shard.repeats)
        for (example, _), record in zip(items, records):
            record.update(judged(self.task, example, record["text"]))
        return {"records": records, "controls": controls, "warmup": 0, "node": _node(), "gpu": _gpu_name(),
                "engine_start_s": started, "engine_restarts": self.engines.restarts - restarts,
                "engine_report": report}

    def close(self) -> None:
        """Stop the vLLM servers this worker started."""
        if self.engines is not None:
            self.engines.close()


def _node() -> str:
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


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
    return {"cpu": cpu, "cpu_cores": os.cpu_count(), "gpu": _gpu_name() if gpus else None, "gpus": gpus,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads()}


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
