"""What the toy trainers share: `arith` training sequences and the learning-rate schedule."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from transformers import PreTrainedTokenizerFast

from workloads.tasks.arith import render, split_of

CLEAN_LEN = 40  # longest prompt + scratchpad + eos is 9 + 26 + 1 = 36
IGNORE = -100


def encode(tok: PreTrainedTokenizerFast, text: str) -> list[int]:
    return tok.convert_tokens_to_ids(list(text))


def sample_sequences(rng: random.Random, tok: PreTrainedTokenizerFast, n: int, three: float = 0.5):
    """n training sequences: (ids of prompt + scratchpad + eos, prompt length); a share
    `three` of them with three operands."""
    out = []
    while len(out) < n:
        count = 3 if rng.random() < three else 2
        operands = [rng.randint(0, 99) for _ in range(count)]
        prompt, reference, _ = render(operands, [rng.choice("+-") for _ in range(count - 1)])
        if split_of(prompt) == "train":
            out.append((encode(tok, prompt + reference) + [tok.eos_token_id], len(prompt)))
    return out


def warmup_cosine(steps: int) -> Callable[[int], float]:
    """The learning-rate factor at each step: linear warm-up over w = max(1, steps // 20)
    steps, (s + 1) / w, then cosine decay 0.5 · (1 + cos(π (s − w) / (steps − w)))."""
    warmup = max(1, steps // 20)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    return factor
