"""Quality of the toy pair on `arith` test prompts: the figures the foundation promises.

Greedy decoding only; the full engine (sampling, speculation, metrics) lives in
`workloads.decoding`. Here each mode is a few lines over the raw transformers model:

* AR: prefill the prompt into a KV cache, then one causal row per new token.
* diffusion: the prompt minus its last token in the cache; each denoising step evaluates
  rows [last prompt token, canvas of W slots] that see the cache and each other, and
  commits the most confident masked slots (ceil(remaining / steps left) of them).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from workloads.models.masks import additive, rows_after_cache


@torch.inference_mode()
def ar_generate(model: PreTrainedModel, prompt: list[int], max_new: int, eos: int) -> list[int]:
    cache = DynamicCache()
    ids = torch.tensor([prompt])
    pos = torch.arange(len(prompt)).unsqueeze(0)
    out: list[int] = []
    while len(out) < max_new:
        logits = model(input_ids=ids, position_ids=pos, cache=cache, use_cache=True).logits
        token = int(logits[0, -1].argmax())
        out.append(token)
        if token == eos:
            break
        ids = torch.tensor([[token]])
        pos = torch.tensor([[len(prompt) + len(out) - 1]])
    return out


@torch.inference_mode()
def diffusion_generate(model: PreTrainedModel, prompt: list[int], width: int, steps: int,
                       mask_id: int, eos: int, shifted: bool) -> list[int]:
    """Draft `width` tokens after the prompt in `steps` greedy confidence-ordered steps."""
    cache = DynamicCache()
    past = len(prompt) - 1
    model(input_ids=torch.tensor([prompt[:-1]]), position_ids=torch.arange(past).unsqueeze(0),
          cache=cache, use_cache=True)
    canvas = torch.full((width,), mask_id)
    pos = torch.arange(past, past + width + 1).unsqueeze(0)
    mask = additive(rows_after_cache(past, torch.ones(width + 1, width + 1, dtype=torch.bool))[None])
    for step in range(steps):
        rows = torch.cat([torch.tensor(prompt[-1:]), canvas]).unsqueeze(0)
        logits = model(input_ids=rows, position_ids=pos, attention_mask=mask, cache=cache,
                       use_cache=True).logits[0]
        cache.crop(-(width + 1))  # block rows never stay in the cache
        logits = logits[:-1] if shifted else logits[1:]
        logits[:, mask_id] = float("-inf")
        conf, token = logits.softmax(-1).max(-1)
        masked = canvas == mask_id
        remaining = int(masked.sum())
        k = -(-remaining // (steps - step))
        conf = torch.where(masked, conf, torch.tensor(-1.0))
        chosen = conf.topk(k).indices
        canvas[chosen] = token[chosen]
    out = canvas.tolist()
    return out[: out.index(eos) + 1] if eos in out else out


def accuracy(generate, tok, examples) -> float:
    """Mean arith score of `generate(prompt_ids) -> new ids` over `examples`."""
    from workloads.tasks.arith import Arith

    task = Arith()
    hits = 0.0
    for ex in examples:
        new = generate(tok.convert_tokens_to_ids(list(ex.prompt)))
        hits += task.score(ex, tok.decode(new, skip_special_tokens=True))
    return hits / max(1, len(examples))


STEPS = (1, 2, 4, 8, 16, 32)
CANVAS = 32  # covers the longest scratchpad, so one block drafts the whole completion


def quality(directory, n: int = 200, seed: int = 0) -> dict[str, float]:
    """Accuracy of each toy model and mode on `n` arith test prompts.

    Keys: `verifier/ar`, `self/ar`, `drafter/K=<k>` and `self/K=<k>` for k in STEPS
    (diffusion drafting the whole completion in k greedy confidence-ordered steps).
    """
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workloads.tasks.arith import Arith

    directory = Path(directory)
    examples = Arith().examples("test", n=n, seed=seed)
    tok = AutoTokenizer.from_pretrained(directory / "verifier")
    eos, mask = tok.eos_token_id, tok.mask_token_id
    out: dict[str, float] = {}
    for name in ("verifier", "drafter", "self"):
        model = AutoModelForCausalLM.from_pretrained(directory / name).eval()
        shifted = bool((getattr(model.config, "specsweep", None) or {}).get("shift", False))
        if name != "drafter":
            out[f"{name}/ar"] = accuracy(
                lambda p, m=model: ar_generate(m, p, CANVAS, eos), tok, examples)
        if name != "verifier":
            for k in STEPS:
                out[f"{name}/K={k}"] = accuracy(
                    lambda p, m=model, k=k, s=shifted: diffusion_generate(m, p, CANVAS, k, mask, eos, s),
                    tok, examples)
    return out


def quality_checks(acc: dict[str, float]) -> list[tuple[str, bool]]:
    """The foundation's promises about the toy pair, each with whether it holds."""
    drafter = [acc[f"drafter/K={k}"] for k in STEPS]
    return [
        ("verifier greedy accuracy >= 0.90", acc["verifier/ar"] >= 0.90),
        ("drafter one-step accuracy <= verifier - 0.15", drafter[0] <= acc["verifier/ar"] - 0.15),
        ("drafter accuracy rises with steps (K=1 < K=4 < K=32)",
         drafter[0] < drafter[2] < drafter[-1]),
        ("toy-self AR-mode accuracy >= 0.85", acc["self/ar"] >= 0.85),
    ]
