"""Measure what the throughput model needs (paper 2610.31819, Appendix F.4) on a pair:

* d_K: mean TV distance ½Σ|p − q_K| between the verifier's p and the drafter's K-step
  proposal q_K at every drafted position, over prefixes along the verifier's own greedy
  continuations of the prompts (drafts at temperature 1, so q is the model distribution);
* c_d(K): time of one drafting round of K calls; c_v: one verifier call over B + 1 rows.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from workloads.decoding.config import DecodeConfig
from workloads.decoding.drafters import StandaloneDrafter
from workloads.decoding.drafting import DraftSettings
from workloads.decoding.engine import decode, verifier_vocab
from workloads.decoding.kinds import Pair
from workloads.decoding.layout import Call
from workloads.decoding.network import Network, sync
from workloads.decoding.rows import Rows


def _cached(rows: Rows, model, ids: list[int]) -> Network:
    """A one-row network of `model` whose cache holds `ids` (a causal prefill)."""
    network = Network(model, 1)
    if ids:
        n = torch.tensor([len(ids)])
        rows.call(network, Call(torch.tensor([ids]), network.slots.positions(np.arange(len(ids))), None,
                                n.numpy(), n))
    return network


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
    rows = Rows(DecodeConfig(schedule="linear", block=block, max_new_tokens=max_new_tokens), pair.tokenizer,
                [generator], verifier_model.device)
    width = torch.tensor([block])
    tv = {k: [] for k in steps}
    draft_s = {k: [] for k in steps}
    verify_s = []
    for prompt in prompts:
        ids = pair.tokenizer(prompt).input_ids
        out = decode(pair, prompt, DecodeConfig(schedule="ar", max_new_tokens=max_new_tokens))
        full = ids + out.token_ids
        for start in range(len(ids), len(full), block):
            prefix = full[:start]
            last = torch.tensor([prefix[-1]])
            for k in steps:
                drafter = StandaloneDrafter(_cached(rows, drafter_model, prefix[:-1]))
                drafter.verified(torch.zeros(1, 0, dtype=torch.long), None, torch.zeros(1, dtype=torch.long))
                sync(verifier_model.device)
                t0 = time.perf_counter()
                tokens, q = drafter.draft(rows, last, width, block, settings[k])
                sync(verifier_model.device)
                draft_s[k].append(time.perf_counter() - t0)
                verifier = _cached(rows, verifier_model, prefix[:-1])
                sync(verifier_model.device)
                t0 = time.perf_counter()
                ids = torch.cat([last[:, None], tokens], 1)
                call = Call(ids, verifier.slots.positions(np.arange(block + 1)), None, None, width + 1)
                logits = rows.call(verifier, call)[0]
                sync(verifier_model.device)
                verify_s.append(time.perf_counter() - t0)
                p = logits[:block].float().softmax(-1)
                tv[k] += (0.5 * (p - q[0].to(p.device)).abs().sum(-1)).tolist()
    return {
        "steps": steps,
        "d_k": [sum(tv[k]) / len(tv[k]) for k in steps],
        "draft_s": [sum(draft_s[k]) / len(draft_s[k]) for k in steps],
        "verify_s": sum(verify_s) / len(verify_s),
        "positions": len(tv[steps[0]]),
    }
