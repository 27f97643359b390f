"""Train the bundled toy pair from scratch on `arith`, deterministically, on a CPU.

Three small Llama-architecture models (transformers classes, saved as safetensors):

* `verifier`: autoregressive (8 layers), trained on next-token prediction of prompt +
  scratchpad: 4 layers from scratch, then grown to 8 and trained on.
* `drafter`:  a 2-layer masked-diffusion denoiser initialised from the verifier's
  embeddings and first layers (as Dream was adapted from an AR model), with Dream-style
  shifted logits: row i predicts position i + 1.
* `self`:     the verifier's first 4 layers (it trains an exit there) fine-tuned on both
  objectives at once (dual mode, as the shared-weight models of paper 2610.33379): causal
  rows for next-token prediction, block rows for masked diffusion with the same shifted
  outputs. The attention mask selects the mode. (An unshifted diffusion head, where a mask
  row predicts its own position, did not adapt from AR weights within the training budget:
  one-step accuracy stayed near zero.)

Diffusion training packs, after each clean causal sequence, several noisy blocks. A block
starting at completion position s holds [x_{s-1}, y_s .. y_{s+W-1}], where y_j is x_j or
the mask token with probability t ~ U(0, 1); it sees the clean tokens before s - 1 and
itself bidirectionally — the same rows a drafting call evaluates over a cached prefix.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from workloads.decoding.masks import additive
from workloads.models.tokenizer import build_char_tokenizer
from workloads.models.toy_data import CLEAN_LEN, IGNORE, sample_sequences, warmup_cosine

MAX_CANVAS = 32


@dataclass(frozen=True)
class Stage:
    """One training run of one model."""

    name: str
    steps: int
    lr: float
    batch: int
    ar: bool  # next-token loss on the clean rows
    diffusion: str | None  # None, "shifted" (row i predicts i+1) or "unshifted"
    block_rows: int = 96  # noisy block rows packed after each clean sequence
    exits: tuple[int, ...] = ()  # also train early exits after these many layers (LayerSkip)
    exit_weight: float = 0.5  # per exit
    three_operand_share: float = 0.5  # training mix; the hard cases are the 3-operand ones
    diffusion_weight: float = 1.0
    fully_masked: float = 0.0  # share of short blocks with every slot masked
    max_width: int = MAX_CANVAS  # noisy blocks are 1..max_width slots wide
    short_width: int = MAX_CANVAS  # blocks up to this wide count as short
    short_share: float = 0.0  # share of steps whose blocks are short (1..short_width)


def model_config(vocab: int, layers: int, profile: dict) -> LlamaConfig:
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    config.specsweep = profile
    return config


def build_batch(seqs, rng: random.Random, stage: Stage, tok: PreTrainedTokenizerFast):
    """Tensors for one step: ids, position ids, additive mask, labels, all (b, T[, T])."""
    eos, pad, mask_id = tok.eos_token_id, tok.pad_token_id, tok.mask_token_id
    short = stage.short_share > 0 and rng.random() < stage.short_share
    width = rng.randint(1, stage.short_width if short else stage.max_width) if stage.diffusion else 0
    blocks = max(1, stage.block_rows // (width + 1)) if stage.diffusion else 0
    # Clean rows: a fixed span when blocks follow them, else just the longest sequence.
    clean = CLEAN_LEN if stage.diffusion else max(len(seq) for seq, _ in seqs)
    total = clean + blocks * (width + 1)
    b = len(seqs)
    ids = torch.full((b, total), pad, dtype=torch.long)
    pos = torch.zeros((b, total), dtype=torch.long)
    labels = torch.full((b, total), IGNORE, dtype=torch.long)
    allowed = torch.zeros((b, total, total), dtype=torch.bool)
    allowed[:, :clean, :clean] = torch.ones(clean, clean, dtype=torch.bool).tril()
    pos[:, :clean] = torch.arange(clean)
    for r, (seq, plen) in enumerate(seqs):
        ids[r, : len(seq)] = torch.tensor(seq)
        if stage.ar:  # next-token loss on the completion only: prompt digits are noise
            labels[r, plen - 1 : len(seq) - 1] = torch.tensor(seq[plen:])
        start = clean
        for _ in range(blocks):
            s = rng.randint(plen, len(seq) - 1)  # first drafted position
            target = [seq[j] if j < len(seq) else eos for j in range(s, s + width)]
            # Drafting starts from a fully masked canvas (and K = 1 never sees anything
            # else); `fully_masked` of the short blocks are trained that way. Long fully
            # masked canvases teach the drafter to hedge towards end-of-sequence.
            full = width <= stage.short_width and rng.random() < stage.fully_masked
            t = 1.0 if full else rng.random()
            masked = [rng.random() < t for _ in range(width)]
            if not any(masked):
                masked[rng.randrange(width)] = True
            rows = slice(start, start + width + 1)
            ids[r, rows] = torch.tensor(
                [seq[s - 1]] + [mask_id if m else x for x, m in zip(target, masked)]
            )
            pos[r, rows] = torch.arange(s - 1, s + width)
            allowed[r, rows, : s - 1] = True
            allowed[r, rows, rows] = True
            shift = 0 if stage.diffusion == "shifted" else 1
            for j, (x, m) in enumerate(zip(target, masked)):
                if m:
                    labels[r, start + j + shift] = x
            start += width + 1
    return ids, pos, additive(allowed), labels


def objective(logits: torch.Tensor, labels: torch.Tensor, diffusion_weight: float = 1.0) -> torch.Tensor:
    """Mean next-token loss on the clean rows + diffusion_weight × mean denoising loss on
    the block rows, so the many masked block tokens do not drown the AR objective."""
    loss = logits.new_zeros(())
    for rows, weight in ((slice(0, CLEAN_LEN), 1.0), (slice(CLEAN_LEN, None), diffusion_weight)):
        part = labels[:, rows]
        if (part != IGNORE).any():
            loss = loss + weight * F.cross_entropy(
                logits[:, rows].flatten(0, 1), part.flatten(), ignore_index=IGNORE)
    return loss


def train(
    model: LlamaForCausalLM,
    stage: Stage,
    tok: PreTrainedTokenizerFast,
    seed: int,
    log: Callable[[str], None] = print,
) -> None:
    torch.manual_seed(seed)
    rng = random.Random(f"toy-train:{stage.name}:{seed}")
    opt = torch.optim.AdamW(model.parameters(), lr=stage.lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(stage.steps))
    model.train()
    t0 = time.perf_counter()
    hidden = bool(stage.exits)  # exits read the intermediate hidden states
    for step in range(stage.steps):
        seqs = sample_sequences(rng, tok, stage.batch, stage.three_operand_share)
        ids, pos, mask, labels = build_batch(seqs, rng, stage, tok)
        if stage.diffusion:
            out = model(input_ids=ids, position_ids=pos, attention_mask=mask, output_hidden_states=hidden)
        else:  # plain causal attention
            out = model(input_ids=ids, output_hidden_states=hidden)
        loss = objective(out.logits, labels, stage.diffusion_weight)
        for layer in stage.exits:
            early = model.lm_head(model.model.norm(out.hidden_states[layer]))
            loss = loss + stage.exit_weight * objective(early, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == stage.steps - 1:
            log(f"[{stage.name}] step {step + 1}/{stage.steps} loss {loss.item():.4f} "
                f"({time.perf_counter() - t0:.0f}s)")
    model.eval()


# Steps are sized for about 13 minutes on 2 CPU cores in all. The verifier trains as 4
# layers, then grows to 8 and trains on (GROW): a verifier call then costs about 3.5
# drafting calls, the regime speculation is for (on a CPU most of a call's cost is Python
# per layer, so a 4-layer verifier over a 2-layer drafter left too little to gain). It
# trains early exits after 2 and 4 layers, so the 2-layer drafter and the 4-layer dual-mode
# network start from truncations that can already do arithmetic.
VERIFIER = Stage("verifier", steps=2100, lr=3e-3, batch=64, ar=True, diffusion=None,
                 exits=(2,), three_operand_share=0.7)
GROW = Stage("verifier-8", steps=300, lr=1e-3, batch=64, ar=True, diffusion=None,
             exits=(2, 4), three_operand_share=0.7)
VERIFIER_LAYERS = 8
# Half the drafter's steps use short fully masked blocks (mostly): the one-step drafts that
# speculation verifies. That lifted the accepted length at B = 4 from about 1 to 2.2.
DRAFTER = Stage("drafter", steps=400, lr=1e-3, batch=128, ar=True, diffusion="shifted",
                block_rows=64, diffusion_weight=3.0, short_share=0.5, fully_masked=0.6, short_width=8)
SELF = Stage("self", steps=120, lr=2e-4, batch=128, ar=True, diffusion="shifted",
             block_rows=48, diffusion_weight=0.25, three_operand_share=0.7)

PROFILES = {
    "verifier": {"role": "verifier", "mask_token_id": None},
    "drafter": {"role": "drafter", "shift": True, "attention": "block"},
    "self": {"role": "dual", "shift": True, "attention": "block"},
}


def grow(model: LlamaForCausalLM, layers: int) -> LlamaForCausalLM:
    """A deeper copy of `model` computing the same function: new layer i repeats layer
    i − n (n = current depth) with its attention and MLP output projections zeroed, so it
    adds nothing to the residual stream until training moves them (function-preserving
    growth, as in progressive stacking)."""
    n = model.config.num_hidden_layers
    deeper = LlamaForCausalLM(model_config(model.config.vocab_size, layers, model.config.specsweep))
    state = model.state_dict()
    for i in range(n, layers):
        prefix, source = f"model.layers.{i}.", f"model.layers.{i - n}."
        for key, value in list(state.items()):
            if key.startswith(source):
                state[prefix + key[len(source):]] = value.clone()
        state[prefix + "self_attn.o_proj.weight"].zero_()
        state[prefix + "mlp.down_proj.weight"].zero_()
    deeper.load_state_dict(state)
    return deeper


def drafter_from(verifier: LlamaForCausalLM, layers: int, profile: dict) -> LlamaForCausalLM:
    """A shallower copy of the verifier: its embeddings, first `layers` blocks and norm."""
    config = model_config(verifier.config.vocab_size, layers, profile)
    drafter = LlamaForCausalLM(config)
    state = {k: v for k, v in verifier.state_dict().items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    drafter.load_state_dict(state)
    return drafter


def save(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


STAGES = ("verifier", "drafter", "self", "dflash", "dflash2", "dspark", "eagle3")


def train_all(out: Path, seed: int = 0, stages: tuple[str, ...] = STAGES, log: Callable[[str], None] = print
              ) -> None:
    """Train the toy models into out/<stage> for each of `stages` (STAGES); later stages start
    from the verifier in out/verifier when it is not retrained in this call (DFlash 2 and
    DSpark from the DFlash drafter in out/dflash)."""
    tok = build_char_tokenizer()
    if "verifier" in stages:
        torch.manual_seed(seed)
        base = LlamaForCausalLM(model_config(len(tok), 4, PROFILES["verifier"]))
        train(base, VERIFIER, tok, seed, log)
        verifier = grow(base, VERIFIER_LAYERS)
        train(verifier, GROW, tok, seed, log)
        save(verifier, tok, out / "verifier")
    else:
        verifier = LlamaForCausalLM.from_pretrained(out / "verifier")
    if "drafter" in stages:
        drafter = drafter_from(verifier, 2, PROFILES["drafter"] | {"mask_token_id": tok.mask_token_id})
        train(drafter, DRAFTER, tok, seed, log)
        save(drafter, tok, out / "drafter")
    if "self" in stages:
        dual = drafter_from(verifier, 4, PROFILES["self"] | {"mask_token_id": tok.mask_token_id})
        train(dual, SELF, tok, seed, log)
        save(dual, tok, out / "self")
    if "dflash" in stages:
        from workloads.models.toy_dflash import save_dflash, train_dflash

        save_dflash(train_dflash(verifier, tok, seed, log), out / "dflash")
    if {"dflash2", "dspark"} & set(stages):  # both start from the DFlash drafter
        from dflash.model import DFlashDraftModel

        dflash = DFlashDraftModel.from_pretrained(out / "dflash")
    if "dflash2" in stages:
        from workloads.models.toy_dflash2 import save_dflash2, train_dflash2

        save_dflash2(train_dflash2(verifier, dflash, tok, seed, log), out / "dflash2")
    if "dspark" in stages:
        from workloads.models.toy_dspark import save_dspark, train_dspark

        save_dspark(train_dspark(verifier, dflash, tok, seed, log), out / "dspark")
    if "eagle3" in stages:
        from workloads.models.toy_eagle3 import train_eagle3

        train_eagle3(verifier, tok, seed, log).save(out / "eagle3")
