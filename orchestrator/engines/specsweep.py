"""specsweep's own decoding engine: DecodeConfig's space, `ar` controls, decoded in the worker
process on its resident pairs (`Decoder`).

Timing honesty: the first time a process decodes with a pair (after loading it, and so after
any restart) it first decodes WARMUP prompts untimed, with the shard's config and with its
control config, so no timed decode pays for lazy initialisation. A shard of a trial also
decodes its *controls*: the `ar` baseline config on CONTROLS of its own batches, each right
before the trial's decode of that batch, so the trial's speed can be compared with `ar` timed
under the same conditions (orchestrator/analysis/metrics.py: controlled_ratios). When the model
engine itself fails (CUDA errors, out of memory) the process exits so Ray restarts it clean.

At batch size b a shard decodes its prompts b at a time, in order; each record carries its
batch (`batch`: the index of the batch's first prompt, the same for every config at that
batch size), the batch's wall time `batch_wall_s` and forward passes `batch_nfe`; and, as
every DecodeResult field, `accept_lengths` (the draft tokens each iteration accepted, a list
of ints no longer than the prompt's `token_ids`), from which a trial's accept-length
histogram is summed (orchestrator/analysis/metrics.py: acceptance_by_position).
"""

from __future__ import annotations

import os
import time

from orchestrator.engines.engine import Choose, Config, Engine, Pick
from orchestrator.engines.shard import Shard, prompt_seed, scored, where
from workloads.decoding import decode_batch
from workloads.decoding.config import DecodeConfig
from workloads.decoding.kinds import PairKind
from workloads.tasks import Example

FATAL = ("CUDA error", "out of memory", "CUBLAS_STATUS", "device-side assert")
WARMUP = 2  # untimed prompts per pair and process, before its first timed decode
CONTROLS = 3  # prompts per trial shard also decoded with `ar` under the same conditions

# Settings chosen after the schedule, effort and rule (spec.space).
SAMPLING = (
    "unmask",
    "temperature",
    "top_k",
    "top_p",
    "draft_temperature",
    "draft_top_k",
    "draft_top_p",
    "max_new_tokens",
)
# rule -> the dimension holding its DecodeConfig.leniency (λ for linear and match, δ for cactus)
LENIENCY = {"linear": "leniency", "match": "leniency", "cactus": "delta"}


def effort(config: dict) -> str:
    """A config's drafting effort as the tables and plots show it: `τ=<threshold>` or `K=<steps>`."""
    if config.get("threshold") is not None:
        return f"τ={config['threshold']:g}"
    return f"K={config.get('steps') or 1}"


class SpecsweepEngine(Engine):
    name = "specsweep"
    title = "specsweep's engine"
    served = False
    controls = "ar"
    baseline = "ar"

    def choose(self, dims: dict[str, list], kind: PairKind, pick: Pick, choose: Choose) -> tuple[Config, int]:
        """Schedule and block (quadratic only, and B >= 2, on dual-mode pairs; `|<kind>` names
        when a list is cut), the effort kind (steps or threshold, when both are given; none for
        one-step drafts), K (only values <= B, under a per-B name), τ, rule, then λ or δ, the
        sampling settings (the unmasking policy not chosen for one-step drafts, which commit
        every slot at once: the first listed is kept), and last the batch size."""
        settings: dict = {}
        fits = {"schedule": kind.runs, "block": lambda b: b >= kind.min_block}
        for key, allowed in fits.items():
            if key in dims:
                values = [v for v in dims[key] if allowed(v)]
                label = key if values == dims[key] else f"{key}|{kind.name}"
                settings[key] = values[0] if len(values) == 1 else choose(label, values)
        block = settings.get("block", DecodeConfig.block)
        chosen = "steps" if "steps" in dims else "threshold" if "threshold" in dims else None
        if kind.one_step(settings.get("schedule", DecodeConfig.schedule)):
            chosen = None
        if "steps" in dims and "threshold" in dims:
            chosen = choose("effort", ["steps", "threshold"])
        if chosen == "steps":
            allowed = [k for k in dims["steps"] if k <= block]
            if allowed:
                label = "steps" if allowed == dims["steps"] else f"steps|B={block}"
                settings["steps"] = allowed[0] if len(allowed) == 1 else choose(label, allowed)
            else:
                settings["steps"] = block  # every listed K exceeds this B: one token per step
        elif chosen == "threshold":
            settings["threshold"] = pick("threshold")
        if "rule" in dims:
            settings["rule"] = pick("rule")
        rule = settings.get("rule", DecodeConfig.rule)
        if LENIENCY.get(rule) in dims:
            settings["leniency"] = pick(LENIENCY[rule])
        single = "threshold" not in settings and settings.get("steps", 1) == 1
        for key in SAMPLING:
            if key == "unmask" and single and key in dims:
                settings[key] = dims[key][0]  # one step commits every slot: the order changes nothing
            elif key in dims:
                settings[key] = pick(key)
        return DecodeConfig(**settings), pick("batch_size") if "batch_size" in dims else 1

    def control(self, config: Config, ar: DecodeConfig | None) -> Config | None:
        return ar

    def measurer(self, worker) -> Decoder:
        return Decoder(worker)

    def columns(self, config: dict) -> dict:
        return {"schedule": config["schedule"], "block": config["block"], "effort": effort(config),
                "rule": config["rule"], "leniency": config["leniency"]}

    def label(self, config: dict) -> str:
        """`linear B8 K=1 λ0.5` (no rule where it is lossless), or `ar`."""
        if config["schedule"] == "ar":
            return "ar"
        shown = {"lossless": "", "linear": " λ{:g}", "cactus": " δ{:g}", "match": " match λ{:g}"}
        rule = shown[config["rule"]]
        return f"{config['schedule']} B{config['block']} {effort(config)}{rule.format(config['leniency'])}"

    def drift_key(self, pair: str) -> str:
        return pair


class Decoder:
    """specsweep's measuring in one worker process: shards decoded on the worker's resident
    pairs, warm-up once per pair and process, controls beside a trial's batches."""

    def __init__(self, worker):
        self.worker = worker
        self.warm: set[str] = set()  # pairs this process has decoded its warm-up prompts with

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

    def measure(self, shards: list[Shard], items: list[tuple[Example, str]]) -> list[dict]:
        """Each shard decoded on its own (`shard`): specsweep's controls sit beside a trial's
        batches, so shards share none."""
        return [self.shard(shard, items) for shard in shards]

    def shard(self, shard: Shard, items: list[tuple[Example, str]]) -> dict:
        """Decode the shard in batches of its batch size, with its controls; returns the
        per-prompt records, the control records (per batch: `index` its batch, `new_tokens`,
        `wall_s`, `at`: when it ran), how many untimed warm-up decodes preceded them, and where
        it ran (shard.where)."""
        pair = self.worker.pair(shard.pair)
        base, control = shard.config, shard.control
        configs = [base] + ([control] if control else [])
        size = shard.batch_size
        warmup = self._warm_up(shard.pair, pair, configs, [p for _, p in items], size)
        batches = [items[i:i + size] for i in range(0, len(items), size)]
        controlled = set(control_positions(len(batches))) if control else set()
        records, controls = [], []
        for position, batch in enumerate(batches):
            seeds = [prompt_seed(self.worker.sweep_seed, example.index) for example, _ in batch]
            prompts = [prompt for _, prompt in batch]
            first = batch[0][0].index
            if position in controlled:
                at = time.time()
                timed = self._decode(pair, prompts, control, seeds)
                controls.append({"index": first, "new_tokens": sum(r.new_tokens for r in timed.results),
                                 "wall_s": timed.wall_s, "at": at})
            done = self._decode(pair, prompts, base, seeds)
            for (example, _), result in zip(batch, done.results):
                records.append({**scored(self.worker.task, example, result), "batch": first,
                                "batch_wall_s": done.wall_s, "batch_nfe": done.nfe})
        release_device_memory()
        return {"records": records, "controls": controls, "warmup": warmup, **where()}

    def close(self) -> None:
        """Nothing to stop: the pairs stay resident in the worker."""


def control_positions(n: int, count: int = CONTROLS) -> list[int]:
    """Which of a shard's n prompts (positions) get a control: `count` spread evenly, first
    and last included, so drift within the shard falls on controls and trial alike."""
    if n <= count:
        return list(range(n))
    return sorted({round(k * (n - 1) / (count - 1)) for k in range(count)})


def release_device_memory() -> None:
    """Return the shard's cached KV blocks and activations to the GPU between trials, so a
    trial's peak memory does not carry into the next configuration's."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
