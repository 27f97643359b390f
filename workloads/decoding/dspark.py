"""DSpark drafting as vLLM defines it: a DFlash-style block pass whose rows all predict the next
position, then a low-rank Markov head that drafts left to right.

Its checkpoint is vLLM's (`architectures: [Qwen3DSparkModel]`): a DFlash backbone (the
`dflash` package's class loads it) plus `markov_head.markov_w1` (V, r), an embedding of the
previous token, and `markov_head.markov_w2` (V, r), and a confidence head
`confidence_head.proj` (1, H + r) that vLLM's adaptive verification reads (specsweep's
engine drafts without it: adaptive verification sizes drafts from timed cost tables).

A draft of K tokens after the anchor a (the newest token, at position P): one pass over rows
[a, mask × (K − 1)] at P .. P + K − 1, seeing the cached context features and each other,
gives states h_0 .. h_{K−1}, row i predicting position P + i + 1; then, with prev = a,

    d_i = argmax_c  z_i(c) + w2(c) · w1(prev),   z_i = head(h_i),   prev = d_i,

over the top-k of z_i when a draft top-k is set (vLLM's `dspark_draft_topk`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

HEADS = ("markov_head.", "confidence_head.")  # its weights' names beyond the DFlash backbone's


def is_dspark(config: dict) -> bool:
    """A DSpark drafter's config.json: a Markov head's rank, or a DSpark architecture."""
    return "markov_rank" in config or any("DSpark" in a for a in config.get("architectures") or ())


class MarkovHead(nn.Module):
    """The bias of the next draft given the previous token: w2 · w1(prev)."""

    def __init__(self, vocab: int, rank: int):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, rank)
        self.markov_w2 = nn.Linear(rank, vocab, bias=False)

    def forward(self, previous: torch.Tensor) -> torch.Tensor:
        """(…, V) logit biases of the tokens after `previous` (…)."""
        return self.markov_w2(self.markov_w1(previous)).float()


class ConfidenceHead(nn.Module):
    """P(draft i accepted) = sigmoid(w · [h_i; w1(prev_i)] + b): what vLLM's adaptive
    verification reads."""

    def __init__(self, hidden: int, rank: int):
        super().__init__()
        self.proj = nn.Linear(hidden + rank, 1)

    def forward(self, states: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(torch.cat([states, previous], -1)).float())[..., 0]


def attach_heads(drafter: nn.Module, path: Path | None, config: dict) -> None:
    """Give a loaded DFlash backbone its DSpark heads (`drafter.markov_head`,
    `drafter.confidence_head`), with the weights in `path`'s safetensors (None: fresh)."""
    vocab, rank, hidden = config["vocab_size"], config["markov_rank"], config["hidden_size"]
    drafter.markov_head = MarkovHead(vocab, rank)
    drafter.confidence_head = ConfidenceHead(hidden, rank)
    if path is None:
        return
    state = {}
    for weights in sorted(path.glob("*.safetensors")):
        with safe_open(str(weights), "pt") as f:
            names = f.keys()  # a safetensors file is not iterable
            state |= {k: f.get_tensor(k) for k in names if k.startswith(HEADS)}
    missing, _ = drafter.load_state_dict(state, strict=False)
    lacking = [k for k in missing if k.startswith(HEADS)]
    if lacking:
        raise ValueError(f"{lacking[0]} missing")


def markov_chain(logits: torch.Tensor, anchor: torch.Tensor, head: MarkovHead, top_k: int) -> torch.Tensor:
    """The drafts (L, K) from base logits (L, K, V) after `anchor` (L,): d_i = argmax of
    logits_i + head(d_{i−1}) (d_{−1} = anchor), over the top_k of logits_i when top_k > 0."""
    if top_k:
        values, candidates = logits.topk(min(top_k, logits.shape[-1]), dim=-1)
        logits = torch.full_like(logits, float("-inf")).scatter(-1, candidates, values)
    previous, drafts = anchor.to(logits.device), []
    for i in range(logits.shape[1]):
        previous = (logits[:, i] + head(previous)).argmax(-1)
        drafts.append(previous.cpu())
    return torch.stack(drafts, 1)
