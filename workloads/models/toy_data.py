"""What the toy trainers share: `arith` training sequences, their padding, the learning-rate
schedule and the optimizer."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import torch
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


def padded(seqs, pad: int, width: int = CLEAN_LEN) -> torch.Tensor:
    """The sequences' ids (n, width), right-padded with `pad`."""
    clean = torch.full((len(seqs), width), pad, dtype=torch.long)
    for r, (seq, _) in enumerate(seqs):
        clean[r, : len(seq)] = torch.tensor(seq)
    return clean


class Optimizer:
    """AdamW (weight decay 0.01, betas 0.9/0.98) under `warmup_cosine`, gradients clipped to
    norm 1: what each toy drafter trains with."""

    def __init__(self, model: torch.nn.Module, lr: float, steps: int):
        self.model = model
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, warmup_cosine(steps))

    def step(self, loss: torch.Tensor) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
