"""What every engine measures: a shard of a trial's prompts, each prompt's seed, how a
prompt's record is scored, and where a shard ran. Both engines' measuring (specsweep.py's
Decoder, serverpool.py's Serving) and the sweep that plans and queues shards read these."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from workloads.decoding import DecodeConfig
from workloads.serving.config import ServingConfig
from workloads.tasks import Example


@dataclass(frozen=True)
class Shard:
    trial: int  # Optuna trial number, or a negative id for baselines
    pair: str
    config: DecodeConfig | ServingConfig  # validated once, where the driver built it; pickled as it is
    indices: tuple[int, ...]
    control: DecodeConfig | ServingConfig | None = None  # `ar`, or vLLM unspeculative: timed beside the trial
    batch_size: int = 1  # prompts decoded together; a shard holds whole batches
    repeats: int = 1  # a served trial's load and its control's, each timed this many times
    # a served trial's server starts at this num_speculative_tokens (the largest its sweep asks)
    # and drafts the trial's at run time, so one start times every draft length; None: the trial's
    draft_ceiling: int | None = None
    # what a served trial's server starts (Engine.start_key); None: a shard timed on its own
    start: object | None = None

    @property
    def together(self) -> tuple | None:
        """Its key for `measured_together`: its server
        start, None where its control's own server serves it (no speculation), and what the
        others must share: pair, control, prompts, batch size, repeats and draft ceiling."""
        if self.start is None or self.control is None:
            return None
        return (None if self.config == self.control else self.start,
                (self.pair, self.control, self.indices, self.batch_size, self.repeats, self.draft_ceiling))


def measured_together(a: tuple | None, b: tuple | None) -> bool:
    """Whether two timed trials (their keys: Shard.together, spec.space.together_key) are
    measured together, beside shared controls (a served engine times them in one balanced order:
    serverpool.serve_shards): the same control and prompts, and one server start, a trial its
    control's own server serves joining any start's."""
    if a is None or b is None or a[1] != b[1]:
        return False
    return a[0] is None or b[0] is None or a[0] == b[0]


def prompt_seed(sweep_seed: int, index: int) -> int:
    """Seed of prompt `index` in a sweep: the same for every config, worker and retry."""
    digest = hashlib.sha256(f"{sweep_seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def judged(task, example: Example, text: str) -> dict:
    """What a record holds of its example: its index, the task's score of `text` and, where
    the task labels its examples (`mix`, a dataset's category field), its category."""
    score = task.judge(example, text)
    category = {"category": example.meta["category"]} if "category" in example.meta else {}
    return {"index": example.index, "correct": score.correct, "detail": score.detail, **category}


def scored(task, example: Example, result) -> dict:
    """A decoded prompt's record: its DecodeResult and what it holds of its example (`judged`)."""
    return {**result.to_dict(), **judged(task, example, result.text)}


def where() -> dict:
    """Where a shard ran: its Ray node ("local" outside Ray) and GPU model ("cpu" without)."""
    return {"node": node(), "gpu": gpu_name()}


def node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
