"""Train `toy-dspark`: a DSpark drafter (workloads.decoding.dspark) over the bundled toy
verifier, on `arith`, deterministically, on a CPU, in vLLM's checkpoint format.

It starts from the toy DFlash drafter's backbone (the same layers, context features and
block attention) and learns DSpark's layout: rows [x_a, mask × (K − 1)] after the anchor
position a, row i predicting x_{a+i+1}, with the Markov head's bias after the token before
it (the true one: teacher forcing) added to the row's logits. Loss: cross-entropy weighted
exp(−i/γ) as for DFlash, plus the confidence head's binary cross-entropy against whether
the row's argmax is the true token.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from workloads.decoding.dflash import FeatureTap
from workloads.decoding.dspark import attach_heads
from workloads.models.toy_data import CLEAN_LEN, Optimizer
from workloads.models.toy_dflash import BLOCK, GAMMA, LR, block_batches

DRAFTS = BLOCK - 1  # K: vLLM's num_speculative_tokens by default (top-level block_size)
RANK = 16
STEPS = 800


def dspark_config(dflash_config: dict) -> dict:
    """vLLM's Qwen3DSparkForCausalLM reads this config.json as written (the DFlash backbone's,
    with its heads and layout)."""
    layers = dflash_config["dflash_config"]["target_layer_ids"]
    mask = dflash_config["dflash_config"]["mask_token_id"]
    return {**dflash_config, "architectures": ["Qwen3DSparkModel"], "block_size": DRAFTS, "markov_rank": RANK,
            "enable_confidence_head": True, "confidence_head_with_markov": True, "sample_from_anchor": True,
            "mask_token_id": mask, "target_layer_ids": layers,
            "dflash_config": {"mask_token_id": mask, "target_layer_ids": layers}}


def train_dspark(verifier: LlamaForCausalLM, dflash, tok: PreTrainedTokenizerFast, seed: int = 0,
                 log: Callable[[str], None] = print, steps: int = STEPS):
    from dflash.model import DFlashDraftModel

    torch.manual_seed(seed)
    rng = random.Random(f"toy-train:dspark:{seed}")
    config = dspark_config(dflash.config.to_dict())
    drafter = DFlashDraftModel(type(dflash.config).from_dict(config))
    drafter.load_state_dict(dflash.state_dict())
    attach_heads(drafter, None, config)
    verifier.eval().requires_grad_(False)
    embed, head = verifier.get_input_embeddings(), verifier.lm_head
    tap = FeatureTap(verifier, drafter.target_layer_ids)
    optimizer = Optimizer(drafter, LR, steps)
    weights = torch.exp(-torch.arange(DRAFTS, dtype=torch.float32) / GAMMA)
    drafter.train()
    t0 = time.perf_counter()
    try:
        for step, batch in enumerate(block_batches(verifier, tap, tok, rng, steps)):
            context, ids, pos, mask, labels = batch
            # DSpark's layout: the first K rows, each predicting the position after it
            width = CLEAN_LEN + DRAFTS
            ids, pos, mask = ids[:, :DRAFTS], pos[:, :width], mask[:, :, :DRAFTS, :width]
            hidden = drafter(target_hidden=context, noise_embedding=embed(ids), position_ids=pos,
                             attention_mask=mask)
            previous = torch.cat([ids[:, :1], labels[:, :-1]], 1)
            logits = drafter.compute_logits(hidden, head).float() + drafter.markov_head(previous)
            drafts = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view_as(labels)
            hit = (logits.argmax(-1) == labels).float()
            sure = drafter.confidence_head(hidden, drafter.markov_head.markov_w1(previous))
            loss = (drafts * weights).sum() / (weights.sum() * len(labels))
            loss = loss + F.binary_cross_entropy(sure, hit)
            optimizer.step(loss)
            if step % 100 == 0 or step == steps - 1:
                took = time.perf_counter() - t0
                log(f"[dspark] step {step + 1}/{steps} loss {loss.item():.4f} accepted-now "
                    f"{hit.mean().item():.2f} ({took:.0f}s)")
    finally:
        tap.close()
    return drafter.eval()


def save_dspark(drafter, out: Path) -> None:
    """save_pretrained, with vLLM's DSpark architecture (transformers writes the class's name)."""
    drafter.save_pretrained(out, safe_serialization=True)
    config = json.loads((out / "config.json").read_text())
    config["architectures"] = ["Qwen3DSparkModel"]
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
