"""Train `toy-dflash2`: a DFlash 2 drafter (the `dflash` package's DFlash2DraftModel: grouped
dynamic causal convolutions around each layer's attention and MLP, and a candidate selector)
over the bundled toy verifier, on `arith`, deterministically, on a CPU, saved in the format
vLLM loads (its selector's codebooks named without `.weight`).

It starts from the toy DFlash drafter: the same backbone weights, convolutions that pass
their input through (kernel 1 at offset 0, no dynamic part) and small random codebooks, so
it first drafts as toy-dflash does. Loss: DFlash's block cross-entropy (weighted
exp(−(k − 1)/γ)) plus the selector's: at each slot, cross-entropy over its top-k candidates
(scored after the true token before it) towards the true token, where it is a candidate.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from workloads.decoding.dflash import FeatureTap
from workloads.models.toy_data import Optimizer
from workloads.models.toy_dflash import BLOCK, GAMMA, LR, block_batches

SELECTOR = {"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 4}
STEPS = 400
CODEBOOKS = ("predecessor_codebook", "successor_codebook")


def passing_through(drafter) -> None:
    """Every convolution returns its input: base kernel 1 at offset 0, 0 elsewhere, no dynamic part."""
    for module in drafter.modules():
        if hasattr(module, "base_kernel"):
            module.base_kernel.data.zero_()
            module.base_kernel.data[:, 0] = 1.0
            module.kernel_projection.weight.data.zero_()


def train_dflash2(verifier: LlamaForCausalLM, dflash, tok: PreTrainedTokenizerFast, seed: int = 0,
                  log: Callable[[str], None] = print, steps: int = STEPS):
    from dflash.model import DFlash2DraftModel

    torch.manual_seed(seed)
    rng = random.Random(f"toy-train:dflash2:{seed}")
    config = dflash.config.to_dict()
    config["dflash_config"] = {**config["dflash_config"], **SELECTOR}
    config["architectures"] = ["DFlash2DraftModel"]
    drafter = DFlash2DraftModel(type(dflash.config).from_dict(config))
    drafter.load_state_dict(dflash.state_dict(), strict=False)  # the backbone; convolutions, selector fresh
    passing_through(drafter)
    selector = drafter.candidate_selector
    for codebook in (selector.predecessor_codebook, selector.successor_codebook):
        codebook.weight.data.normal_(0, 0.02)
    verifier.eval().requires_grad_(False)
    embed, head = verifier.get_input_embeddings(), verifier.lm_head
    tap = FeatureTap(verifier, drafter.target_layer_ids)
    optimizer = Optimizer(drafter, LR / 2, steps)
    weights = torch.exp(-torch.arange(BLOCK - 1, dtype=torch.float32) / GAMMA)
    drafter.train()
    t0 = time.perf_counter()
    try:
        for step, batch in enumerate(block_batches(verifier, tap, tok, rng, steps)):
            context, ids, pos, mask, labels = batch
            hidden = drafter(target_hidden=context, noise_embedding=embed(ids), position_ids=pos,
                             attention_mask=mask)[:, 1:]
            logits = drafter.compute_logits(hidden, head).float()
            block = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view_as(labels)
            unary, candidates = logits.topk(selector.top_k, dim=-1)  # the gradient reaches the kept logits
            before = torch.cat([ids[:, :1], labels[:, :-1]], 1)
            after = selector.predecessor_codebook(before) * selector.hidden_projection(hidden)
            scores = unary + (selector.successor_codebook(candidates) @ after[..., None])[..., 0]
            target = candidates == labels[..., None]
            found = target.any(-1)
            chosen = F.cross_entropy(scores[found], target[found].float().argmax(-1)) if found.any() else 0.0
            loss = (block * weights).sum() / (weights.sum() * len(labels)) + chosen
            optimizer.step(loss)
            if step % 100 == 0 or step == steps - 1:
                took = time.perf_counter() - t0
                log(f"[dflash2] step {step + 1}/{steps} loss {loss.item():.4f} "
                    f"chain-now {(scores.argmax(-1) == target.float().argmax(-1))[found].float().mean():.2f} "
                    f"({took:.0f}s)")
    finally:
        tap.close()
    return drafter.eval()


def save_dflash2(drafter, out: Path) -> None:
    """save_pretrained, with the selector's codebooks named as vLLM loads them (no `.weight`;
    the `dflash` package reads both)."""
    drafter.save_pretrained(out, safe_serialization=True)
    weights = out / "model.safetensors"
    state = load_file(str(weights))
    for name in CODEBOOKS:
        state[f"candidate_selector.{name}"] = state.pop(f"candidate_selector.{name}.weight")
    save_file(state, str(weights), metadata={"format": "pt"})
