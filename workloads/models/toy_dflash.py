"""Train `toy-dflash`: a small DFlash drafter (`dflash.model.DFlashDraftModel`) over the
bundled toy verifier, on `arith`, deterministically, on a CPU.

The verifier stays frozen. Each step takes clean training sequences, runs the verifier
once over them and keeps the outputs of its TARGET_LAYERS; for every sequence it picks an
anchor position a inside the completion and trains the drafter to fill the block
[x_a, mask × (B − 1)] from the features of positions < a: the rows a drafting call sees
(features of the verified prefix minus its last token, that token as the anchor). Loss:
cross-entropy over the B − 1 drafted positions, weighted exp(−(k − 1)/γ) at offset k as in
the DFlash paper (early positions decide the accepted length). Several anchors of the same
sequence share one verifier pass.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast, Qwen3Config

from workloads.decoding.dflash import FeatureTap
from workloads.decoding.masks import additive
from workloads.models.toy_data import CLEAN_LEN, IGNORE, Optimizer, padded, sample_sequences

BLOCK = 8  # the anchor and 7 drafts (vLLM: num_speculative_tokens 7)
TARGET_LAYERS = [1, 3, 5]  # of the verifier's 8
LAYERS = 2
STEPS, BATCH, ANCHORS, LR = 3000, 32, 4, 2e-3
GAMMA = 4.0  # loss decay over block offsets


def drafter_config(verifier: LlamaForCausalLM, mask_token_id: int) -> Qwen3Config:
    v = verifier.config
    config = Qwen3Config(
        vocab_size=v.vocab_size, hidden_size=v.hidden_size, intermediate_size=2 * v.hidden_size,
        num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=4, head_dim=32,
        max_position_embeddings=v.max_position_embeddings, rms_norm_eps=v.rms_norm_eps,
        num_target_layers=v.num_hidden_layers, tie_word_embeddings=False,
        dflash_config={"block_size": BLOCK, "mask_token_id": mask_token_id,
                       "target_layer_ids": TARGET_LAYERS},
    )
    config.architectures = ["DFlashDraftModel"]
    return config


def build_blocks(seqs, rng: random.Random, features: torch.Tensor, mask_id: int, eos: int):
    """For ANCHORS anchors per sequence: context features (n, CLEAN_LEN, F), block ids
    (n, BLOCK), position ids (n, CLEAN_LEN + BLOCK), additive mask (n, 1, BLOCK, CLEAN_LEN +
    BLOCK) and labels (n, BLOCK − 1)."""
    rows = [(r, rng.randint(plen - 1, len(seq) - 2)) for r, (seq, plen) in enumerate(seqs)
            for _ in range(ANCHORS)]
    n, total = len(rows), CLEAN_LEN + BLOCK
    ids = torch.full((n, BLOCK), mask_id, dtype=torch.long)
    pos = torch.zeros((n, total), dtype=torch.long)
    labels = torch.full((n, BLOCK - 1), IGNORE, dtype=torch.long)
    allowed = torch.zeros((n, BLOCK, total), dtype=torch.bool)
    for i, (r, a) in enumerate(rows):
        seq = seqs[r][0]
        ids[i, 0] = seq[a]
        target = [seq[j] if j < len(seq) else eos for j in range(a + 1, a + BLOCK)]
        labels[i] = torch.tensor(target)
        pos[i, :CLEAN_LEN] = torch.arange(CLEAN_LEN)
        pos[i, CLEAN_LEN:] = torch.arange(a, a + BLOCK)
        allowed[i, :, :a] = True  # the features of positions before the anchor
        allowed[i, :, CLEAN_LEN:] = True  # and the block, bidirectionally
    context = features[[r for r, _ in rows]]
    return context, ids, pos, additive(allowed), labels


def verified_features(verifier: LlamaForCausalLM, tap: FeatureTap, clean: torch.Tensor) -> torch.Tensor:
    """The tapped layers' outputs (n, L, F) of one frozen verifier pass over `clean`."""
    with torch.no_grad():
        verifier(input_ids=clean)
        return tap.features


def block_batches(verifier: LlamaForCausalLM, tap: FeatureTap, tok: PreTrainedTokenizerFast,
                  rng: random.Random, steps: int) -> Iterator[tuple[torch.Tensor, ...]]:
    """Per training step, `build_blocks` of BATCH fresh sequences from one frozen verifier pass."""
    for _ in range(steps):
        seqs = sample_sequences(rng, tok, BATCH, 0.7)
        features = verified_features(verifier, tap, padded(seqs, tok.pad_token_id))
        yield build_blocks(seqs, rng, features, tok.mask_token_id, tok.eos_token_id)


def train_dflash(verifier: LlamaForCausalLM, tok: PreTrainedTokenizerFast, seed: int = 0,
                 log: Callable[[str], None] = print, steps: int = STEPS):
    from dflash.model import DFlashDraftModel

    torch.manual_seed(seed)
    rng = random.Random(f"toy-train:dflash:{seed}")
    drafter = DFlashDraftModel(drafter_config(verifier, tok.mask_token_id))
    verifier.eval().requires_grad_(False)
    embed, head = verifier.get_input_embeddings(), verifier.lm_head
    tap = FeatureTap(verifier, TARGET_LAYERS)
    optimizer = Optimizer(drafter, LR, steps)
    weights = torch.exp(-torch.arange(BLOCK - 1, dtype=torch.float32) / GAMMA)
    drafter.train()
    t0 = time.perf_counter()
    try:
        for step, batch in enumerate(block_batches(verifier, tap, tok, rng, steps)):
            context, ids, pos, mask, labels = batch
            hidden = drafter(target_hidden=context, noise_embedding=embed(ids), position_ids=pos,
                             attention_mask=mask)
            logits = drafter.compute_logits(hidden[:, 1:], head).float()
            logits[..., tok.mask_token_id] = float("-inf")
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                                   reduction="none").view_as(labels)
            valid = (labels != IGNORE).float()
            loss = (loss * weights * valid).sum() / (weights * valid).sum()
            optimizer.step(loss)
            if step % 100 == 0 or step == steps - 1:
                log(f"[dflash] step {step + 1}/{steps} loss {loss.item():.4f} "
                    f"({time.perf_counter() - t0:.0f}s)")
    finally:
        tap.close()
    drafter.eval()
    return drafter


def save_dflash(drafter, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    drafter.save_pretrained(out, safe_serialization=True)
