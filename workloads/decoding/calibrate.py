"""Measure what the throughput model needs (paper 2610.31819, Appendix F.4) on a pair:

* d_K: mean TV distance ½Σ|p − q_K| between the verifier's p and the drafter's K-step
  proposal q_K at every drafted position, over prefixes along the verifier's own greedy
  continuations of the prompts (drafts at temperature 1, so q is the model distribution);
* c_d(K): time of one drafting round of K calls; c_v: one verifier call over B + 1 rows.
"""

from __future__ import annotations

import time

import torch

from workloads.decoding.calls import CachedModel, Meter, sync
from workloads.decoding.config import DecodeConfig
from workloads.decoding.drafting import DraftSettings, diffusion_draft
from workloads.decoding.engine import decode, verifier_vocab
from workloads.decoding.kinds import Pair


@torch.inference_mode()
def calibrate(
    pair: Pair, prompts: list[str], steps: list[int], block: int, max_new_tokens: int = 64, seed: int = 0
) -> dict:
    """{"steps", "d_k", "draft_s" (per K: mean round time), "verify_s", "positions"}."""
    drafter_model, verifier_model = pair.kind.models(pair)
    generator = torch.Generator(device=verifier_model.device).manual_seed(seed)
    settings = {k: DraftSettings(steps=k, threshold=None, unmask="ltr", temperature=1.0, top_k=0, top_p=1.0,
                                 mask_token_id=pair.profile.mask_token_id, shifted=pair.profile.shifted,
                                 vocab=verifier_vocab(pair), forbidden=pair.profile.forbidden)
                for k in steps}
    tv = {k: [] for k in steps}
    draft_s = {k: [] for k in steps}
    verify_s = []
    for prompt in prompts:
        ids = pair.tokenizer(prompt).input_ids
        out = decode(pair, prompt, DecodeConfig(schedule="ar", max_new_tokens=max_new_tokens))
        full = ids + out.token_ids
        for start in range(len(ids), len(full), block):
            prefix = full[:start]
            for k in steps:
                drafter = CachedModel(drafter_model, Meter())
                drafter.causal(prefix[:-1])
                sync(drafter.device)
                t0 = time.perf_counter()
                draft = diffusion_draft(drafter, [], prefix[-1], block, settings[k], generator)
                sync(drafter.device)
                draft_s[k].append(time.perf_counter() - t0)
                verifier = CachedModel(verifier_model, Meter())
                verifier.causal(prefix[:-1])
                sync(verifier.device)
                t0 = time.perf_counter()
                logits = verifier.causal(torch.cat([torch.tensor([prefix[-1]]), draft.tokens.cpu()]))
                sync(verifier.device)
                verify_s.append(time.perf_counter() - t0)
                p = logits[:block].float().softmax(-1)
                tv[k] += (0.5 * (p - draft.q.to(p.device)).abs().sum(-1)).tolist()
    return {
        "steps": steps,
        "d_k": [sum(tv[k]) / len(tv[k]) for k in steps],
        "draft_s": [sum(draft_s[k]) / len(draft_s[k]) for k in steps],
        "verify_s": sum(verify_s) / len(verify_s),
        "positions": len(tv[steps[0]]),
    }
