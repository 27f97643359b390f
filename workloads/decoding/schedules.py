"""The left-to-right schedules of docs/glossary.md over every row of a batch at once (rows.Rows), one
flat function each:

* `ar`: the verifier alone, one token a row a call.
* `diffusion`: the drafter alone, block by block (K steps or threshold τ per block).
* `speculative`: `linear` (draft from the newest prefix, then verify; paper 2610.31819,
  Algorithm 1) or `packed` (one call ahead: the draft verified at iteration t + 1 was
  computed from the prefix at the start of iteration t, while iteration t verified; on a GPU
  the drafter's calls run on a second CUDA stream, overlapping the verifier's). A packed
  draft's first A_t slots (the tokens iteration t emitted) are dropped; the rest is the next
  draft.

Every speculative loop starts the same way: the verifier prefills the prompts and each row's
first token is sampled from its last prompt row. A drafter's context is filled lazily:
verified tokens it has not cached ride along as causal rows of its next call
(drafters.py), and a target-conditioned drafter reads the verifier's rows instead.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from workloads.decoding.drafters import Drafter, StandaloneDrafter
from workloads.decoding.drafting import DraftSettings
from workloads.decoding.layout import Call
from workloads.decoding.network import Network, side_stream
from workloads.decoding.rows import Rows, staying
from workloads.decoding.verifying import verify_finish, verify_forward


def ar(rows: Rows, verifier: Network, prompts: list[list[int]]) -> None:
    """`ar` over the batch: the verifier prefills every prompt (padded to the longest) and
    then takes one token a row a call."""
    logits, _ = prefill(rows, verifier, prompts)
    single = torch.ones(len(prompts), dtype=torch.long)
    while True:
        tokens = rows.sample(logits)
        rows.iterated()
        stay = rows.leave(rows.emit(tokens[:, None], single), [verifier])
        if rows.done:
            return
        tokens, single = staying(stay, tokens, single)
        step = Call(tokens[:, None], verifier.slots.positions(0), None, single.numpy(), single)
        logits = rows.call(verifier, step)[:, -1]


def padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts padded to the longest (L, P) with 0, and their lengths (L,): one numpy
    array filled at once (a tensor a prompt costs a dozen times more at batch 64)."""
    lengths = np.fromiter(map(len, prompts), dtype=np.int64, count=len(prompts))
    ids = np.zeros((len(prompts), int(lengths.max())), dtype=np.int64)
    ids[np.arange(ids.shape[1]) < lengths[:, None]] = np.fromiter(
        itertools.chain.from_iterable(prompts), dtype=np.int64, count=int(lengths.sum()))
    return torch.from_numpy(ids), torch.from_numpy(lengths)


def prefill(rows: Rows, verifier: Network, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The verifier over every prompt, padded to the longest: (each row's logits at its last
    prompt token (L, V), the prompts padded (L, P))."""
    ids, lengths = padded(prompts)
    positions = torch.arange(ids.shape[1]).expand(len(prompts), -1)
    logits = rows.call(verifier, Call(ids, positions, None, lengths.numpy(), lengths))
    return logits[torch.arange(len(prompts)), (lengths - 1).to(logits.device)], ids


def speculative(rows: Rows, drafter: Drafter, verifier: Network, prompts: list[list[int]],
                     settings: DraftSettings, width: int) -> None:
    """`linear` or `packed` (rows.config.schedule) over the batch, `width` tokens drafted per
    iteration by `drafter` (drafters.py; a target-conditioned one reads the features the
    verifier's tap caught). Under `packed` the
    draft verified at iteration t + 1 was drafted from the prefix at the start of t, beside
    t's verification (on a GPU on a second stream); its first A_t slots are dropped."""
    packed = rows.config.schedule == "packed"
    logits, ids = prefill(rows, verifier, prompts)
    last = rows.sample(logits).cpu()
    drafter.verified(ids, _features(verifier), torch.tensor([len(p) for p in prompts]))
    networks = [verifier, drafter.network]
    stay = rows.leave(rows.emit(last[:, None], torch.ones_like(last)), networks)
    last, = staying(stay, last)
    drafter.keep(stay)
    full = torch.full_like(last, width)
    if packed and not rows.done:
        tokens, q = drafter.draft(rows, last, full, width, settings)
        have = full
    while not rows.done:
        room = rows.remaining() - 1  # a recovered or bonus token follows
        if packed:
            widths = torch.minimum(have, room)
            logits = verify_forward(rows, verifier, last, tokens, widths)
            features = _features(verifier)
            with side_stream(verifier.device):
                fresh, fresh_q = drafter.draft(rows, last, full, width, settings)
        else:
            widths = room.clamp(max=width)
            tokens, q = drafter.draft(rows, last, widths, width, settings)
            logits = verify_forward(rows, verifier, last, tokens, widths)
            features = _features(verifier)
        accepted, token = verify_finish(rows, verifier, logits, tokens, q, widths)
        checked = torch.cat([last[:, None], tokens[:, :logits.shape[1] - 1]], 1)  # the verifier's ids
        drafter.verified(checked, features, accepted + 1)
        emitted = torch.cat([tokens[:, :width], torch.zeros_like(last)[:, None]], 1)
        emitted[torch.arange(last.shape[0]), accepted] = token
        stay = rows.leave(rows.emit(emitted, accepted + 1), networks)
        last, full, accepted = staying(stay, token, full, accepted)
        drafter.keep(stay)
        if packed:  # the slots the verifier just filled are dropped from the next draft
            tokens, q, have = _shifted(*staying(stay, fresh, fresh_q), accepted + 1)


def _shifted(tokens: torch.Tensor, q: torch.Tensor | None, keep: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each row's draft (L, W) and q (L, W, V) (None: one-hot at the draft, still) without
    its first keep[i] slots, left-aligned, and how many slots remain (L,)."""
    width = tokens.shape[1]
    index = (keep[:, None] + torch.arange(width)).clamp(max=max(width - 1, 0))
    moved_q = None if q is None else q.gather(1, index.to(q.device)[..., None].expand(-1, -1, q.shape[-1]))
    return tokens.gather(1, index), moved_q, (width - keep).clamp(min=0)


def diffusion(rows: Rows, drafter: StandaloneDrafter, prompts: list[list[int]], settings: DraftSettings
              ) -> None:
    """`diffusion` over the batch: the drafter alone, block by block."""
    ids, lengths = padded(prompts)
    last = ids[torch.arange(len(prompts)), lengths - 1]
    drafter.verified(ids, None, lengths - 1)  # the prompt but its last token waits to be cached
    block = rows.config.block
    while not rows.done:
        widths = rows.remaining().clamp(max=block)
        tokens, _ = drafter.draft(rows, last, widths, block, settings)
        rows.iterated()
        drafter.verified(torch.cat([last[:, None], tokens], 1), None, widths)
        ends = tokens.gather(1, (widths - 1)[:, None])[:, 0]
        stay = rows.leave(rows.emit(tokens, widths), [drafter.network])
        last, = staying(stay, ends)
        drafter.keep(stay)


def _features(verifier: Network) -> torch.Tensor | None:
    """The features (L, Q, F) the verifier's tap caught in its latest call, if it has one."""
    return verifier.tap.features if verifier.tap is not None else None
