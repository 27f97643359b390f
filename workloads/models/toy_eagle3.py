"""Train `toy-eagle3`: a one-layer EAGLE-3 drafter (workloads.decoding.eagle3) over the bundled
toy verifier, on `arith`, deterministically, on a CPU.

The verifier stays frozen and lends its embeddings and LM head. Each step runs the verifier
once over clean training sequences and keeps the outputs of the layers the drafter reads
(vLLM's default for 8 layers: ids 2, 4, 5). Training unrolls the chain as drafting runs it
(EAGLE-3's training-time test): pass 1 at every position p takes fc(features at p) and token
x_{p+1} and predicts x_{p+2}; pass s > 1 takes pass s − 1's pre-norm state at p and token
x_{p+s} at position p + s − 1 and predicts x_{p+s+1}, seeing pass 1's keys at positions <= p
and its own chain's at p. Loss: cross-entropy over the completion, pass s weighted 0.8^(s−1).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from workloads.decoding.dflash import FeatureTap
from workloads.decoding.eagle3 import Eagle3Model
from workloads.models.toy_data import CLEAN_LEN, IGNORE, Optimizer, padded, sample_sequences
from workloads.models.toy_dflash import verified_features

LAYER_IDS = [2, 4, 5]  # vLLM's default for an 8-layer verifier: (2, L // 2, L − 3)
PASSES = 3
STEPS, BATCH, LR = 1500, 32, 2e-3
DECAY = 0.8


def drafter_config(verifier: LlamaForCausalLM) -> dict:
    """vLLM's Eagle3LlamaForCausalLM reads this config.json as written."""
    v = verifier.config
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": v.hidden_size,
            "intermediate_size": 2 * v.hidden_size, "num_attention_heads": 4, "num_key_value_heads": 4,
            "head_dim": v.hidden_size // 4, "num_hidden_layers": 1, "hidden_act": "silu",
            "rms_norm_eps": v.rms_norm_eps, "max_position_embeddings": v.max_position_embeddings,
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "attention_bias": False,
            "mlp_bias": False, "tie_word_embeddings": False, "vocab_size": v.vocab_size,
            "draft_vocab_size": v.vocab_size, "target_hidden_size": v.hidden_size,
            "eagle_aux_hidden_state_layer_ids": LAYER_IDS, "norm_before_residual": False, "dtype": "float32",
            "pad_token_id": v.pad_token_id, "eos_token_id": v.eos_token_id, "bos_token_id": None}


def chain_seen(t: int, passes: int) -> torch.Tensor:
    """(T, passes · T) keys pass `passes` at row p sees: pass 1's at rows <= p, and each later
    pass's (its own included) at row p."""
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    return torch.cat([causal] + [torch.eye(t, dtype=torch.bool)] * (passes - 1), 1)


def train_eagle3(verifier: LlamaForCausalLM, tok: PreTrainedTokenizerFast, seed: int = 0,
                 log: Callable[[str], None] = print, steps: int = STEPS) -> Eagle3Model:
    torch.manual_seed(seed)
    rng = random.Random(f"toy-train:eagle3:{seed}")
    drafter = Eagle3Model(drafter_config(verifier))
    verifier.eval().requires_grad_(False)
    embed, head = verifier.get_input_embeddings(), verifier.lm_head
    tap = FeatureTap(verifier, drafter.tapped)
    optimizer = Optimizer(drafter, LR, steps)
    t, positions = CLEAN_LEN, torch.arange(CLEAN_LEN)
    drafter.train()
    t0 = time.perf_counter()
    try:
        for step in range(steps):
            seqs = sample_sequences(rng, tok, BATCH, 0.7)
            clean = padded(seqs, tok.pad_token_id, t + PASSES + 1)
            labels = torch.full_like(clean, IGNORE)
            for r, (seq, plen) in enumerate(seqs):
                labels[r, plen:len(seq)] = torch.tensor(seq[plen:])
            features = verified_features(verifier, tap, clean[:, :t])
            x, keys, values, loss, total = drafter.fc(features), [], [], 0.0, 0.0
            for s in range(1, PASSES + 1):
                rows = positions.expand(len(seqs), -1)
                seen = chain_seen(t, s).expand(len(seqs), -1, -1)
                cached_k = torch.cat(keys, 2) if keys else x.new_zeros(len(seqs), 4, 0, drafter.head_dim)
                cached_v = torch.cat(values, 2) if values else cached_k
                tokens = embed(clean[:, s:s + t])
                x, normed, (k, v) = drafter.layer(x, tokens, rows + s - 1, cached_k, cached_v, seen)
                keys.append(k)
                values.append(v)
                logits = head(normed).float()
                weight = DECAY ** (s - 1)
                target = labels[:, s + 1:s + 1 + t].flatten()
                loss = loss + weight * F.cross_entropy(logits.flatten(0, 1), target, ignore_index=IGNORE)
                total += weight
            loss = loss / total
            optimizer.step(loss)
            if step % 100 == 0 or step == steps - 1:
                took = time.perf_counter() - t0
                log(f"[eagle3] step {step + 1}/{steps} loss {loss.item():.4f} ({took:.0f}s)")
    finally:
        tap.close()
    return drafter.eval()
