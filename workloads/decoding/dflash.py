"""Target-conditioned drafting (DFlash, arXiv 2602.06036): a small block-diffusion network
that drafts a whole block from the verifier's own hidden states.

The drafter has no embedding or LM head of its own: its block rows are the verifier's input
embeddings of [last, mask × W], its logits the verifier's LM head over its output. Its
context is not token ids but *features*: the hidden states of a few target layers of the
verifier, concatenated, one row per verified token. The engine's cache convention holds
here too: the drafter's cache keeps the features of the verified prefix minus its last
token, and the last token enters as the block's anchor row.

`FeatureTap` captures those layers' outputs during the verifier's own calls (forward
hooks: only the target layers, only the rows of the latest call). `DFlashDrafter` is a
drafter of the speculative loop (`schedules.Drafter`): it reads the verifier's features of
each verified row, and its `block` call has the interface of `CachedModel.block`, so
`drafting.diffusion_draft` runs it unchanged: K = 1 is DFlash's one-pass draft, K > 1 refines
the block with the unmasking policies, τ as for other drafters. A mask row predicts its own
position (not shifted).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel

from workloads.decoding.acceptance import draw
from workloads.decoding.batch import Batch, Call
from workloads.decoding.calls import Meter, timed
from workloads.decoding.drafting import Draft, DraftSettings, diffusion_draft, slot_logits
from workloads.decoding.masks import after_slots
from workloads.decoding.sampling import distribution, point_mass
from workloads.decoding.slots import SlotCache


def decoder_layers(model: PreTrainedModel) -> torch.nn.ModuleList:
    """The decoder layers of a causal LM (`model.model.layers` in Llama, Qwen and kin)."""
    base = getattr(model, "model", None) or getattr(model, model.base_model_prefix)
    return base.layers


def is_dflash2(drafter) -> bool:
    """A DFlash 2 drafter: it proposes through a candidate selector."""
    return hasattr(drafter, "candidate_selector")


class FeatureTap:
    """The outputs of `layer_ids` of `model` during its latest forward call, concatenated:
    `features` (b, q, len(layer_ids) · H)."""

    def __init__(self, model: PreTrainedModel, layer_ids: list[int]):
        self._latest: dict[int, torch.Tensor] = {}
        layers = decoder_layers(model)
        self._order = list(layer_ids)
        self._hooks = [layers[i].register_forward_hook(self._keeper(i)) for i in layer_ids]

    def _keeper(self, i: int):
        def keep(module, args, output):
            self._latest[i] = output[0] if isinstance(output, tuple) else output

        return keep

    @property
    def features(self) -> torch.Tensor:
        return torch.cat([self._latest[i] for i in self._order], dim=-1)

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()


@dataclass
class Block:
    """What one row asks of a DFlash drafter: context `features` (n, F) of newly verified
    tokens (cached afterwards) and the block `ids` (q,) = [last, canvas], from position `start`."""

    features: torch.Tensor
    ids: torch.Tensor
    start: int
    meter: Meter


@functools.lru_cache(maxsize=4096)
def _block_layout(contexts: tuple[int, ...], blocks: tuple[int, ...], n: int, width: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A drafting call's layout (DFlashNetwork.prepare), built once per shape: position
    offsets (R, N + Q) from each row's cached length (context column c at c, block slot j at
    contexts[r] + j), among (R, Q, N + Q) (a block row sees its own context and block; a
    padding row itself) and kept (R,) (its own context only: the first contexts[r] slots)."""
    contexts, blocks = torch.tensor(contexts), torch.tensor(blocks)
    column, slot = torch.arange(n), torch.arange(width)
    offsets = torch.cat([column.expand(len(contexts), -1), contexts[:, None] + slot], 1).numpy()
    present = slot < blocks[:, None]  # (R, Q)
    sees_context = present[:, :, None] & (column < contexts[:, None])[:, None, :]
    sees_block = (present[:, :, None] & present[:, None, :]) | torch.eye(width, dtype=torch.bool)
    among = torch.cat([sees_context, sees_block], 2)
    return offsets, among.numpy(), contexts.numpy()


class DFlashNetwork:
    """A DFlash drafter serving the rows of one batch: the verifier's embeddings and LM head,
    and the rows' cached context slots."""

    def __init__(self, drafter: PreTrainedModel, verifier: PreTrainedModel, batch: Batch):
        self.model, self.batch = drafter, batch
        self.embed = verifier.get_input_embeddings()
        self.head = getattr(verifier, "lm_head", None) or verifier.get_output_embeddings()
        self.scale = float(_setting(drafter.config, "input_embedding_scale", 1.0))
        self.slots = SlotCache(batch.size, batch.slack)
        self.device = verifier.device
        self.dtype = drafter.dtype
        self.width = len(drafter.target_layer_ids) * drafter.config.hidden_size
        self.work = Meter()  # its forward passes, their token rows (padding included) and time

    def run(self, calls: list[Call]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One forward over the rows of `calls`: context (R, N, F) and block rows (R, Q, E),
        padded; the block rows of a row see its valid slots, its own context and its own
        block. Returns each row's (logits (q, V), block states (q, H))."""
        requests: list[Block] = [c.request for c in calls]
        rows = [c.row for c in calls]
        n = max(r.features.shape[0] for r in requests)
        width = max(r.ids.shape[0] for r in requests)
        context = torch.zeros(len(rows), n, self.width, device=self.device, dtype=self.dtype)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(requests):
            context[i, :r.features.shape[0]] = r.features.to(self.dtype)
            ids[i, :r.ids.shape[0]] = r.ids.cpu()
        contexts = torch.tensor([r.features.shape[0] for r in requests])
        blocks = torch.tensor([r.ids.shape[0] for r in requests])
        forward, commit = self.prepare(rows, context, contexts, ids, blocks)
        logits, hidden = timed(self, requests, forward, width)
        commit()
        return [(logits[i, :r.ids.shape[0]], hidden[i, :r.ids.shape[0]]) for i, r in enumerate(requests)]

    def prepare(self, rows: list[int], context: torch.Tensor, contexts: torch.Tensor, ids: torch.Tensor,
                blocks: torch.Tensor):
        """The forward over `rows`: context features (R, N, F), the first contexts[r] of them
        row r's newly verified tokens' (cached), and block ids (R, Q), the first blocks[r] of
        row r's block [last, canvas] (dropped). A row's block sees its valid slots, its
        own context and its own block; its context continues its cached positions. Returns
        (forward -> (logits (R, Q, V), block states (R, Q, H)), the commit of its slots)."""
        offsets, among, kept = _block_layout(tuple(contexts.tolist()), tuple(blocks.tolist()),
                                             context.shape[1], ids.shape[1])
        positions = self.slots.positions(offsets) if rows == self.slots.rows else torch.from_numpy(
            np.array([self.slots.length(r) for r in rows])[:, None] + offsets)
        cache, valid = self.slots.view(rows)
        mask = after_slots(valid, among, self.dtype).to(self.device, self.dtype)
        ids = ids.to(self.device)

        def forward() -> tuple[torch.Tensor, torch.Tensor]:
            noise = (self.embed(ids) * self.scale).to(self.dtype)
            hidden = self.model(target_hidden=context.to(self.dtype), noise_embedding=noise,
                                position_ids=positions.to(self.device), past_key_values=cache, use_cache=True,
                                attention_mask=mask)
            return self.model.compute_logits(hidden, self.head), hidden

        return forward, lambda: self.slots.commit(rows, cache, kept)

    def release(self, row: int) -> None:
        self.slots.release(row)

    def close(self) -> None:
        """Nothing outlives the batch."""


class DFlashDrafter:
    """One row's view of a `DFlashNetwork`. Built from the models alone, it is the only row of
    its own batch."""

    def __init__(self, drafter: PreTrainedModel, verifier: PreTrainedModel, meter: Meter, *,
                 network: DFlashNetwork | None = None, row: int = 0):
        self.network = network or DFlashNetwork(drafter, verifier, Batch(1))
        self.model, self.meter, self.row = drafter, meter, row
        self.pending: list[torch.Tensor] = []
        self.device = self.network.device
        self.dtype = self.network.dtype

    @property
    def length(self) -> int:  # verified tokens whose features are cached
        return self.network.slots.length(self.row)

    def verified(self, verifier, rows: int) -> None:
        """Queue the verifier's features (`verifier`, a tapped CachedModel) of the first `rows`
        rows of its latest call, now verified: the next `block` call caches them."""
        self.pending.append(verifier.features[:rows])

    def draft(self, pending: list[int], last: int, width: int, settings: DraftSettings,
              generator: torch.Generator) -> Draft:
        """A draft of `width` tokens: DFlash's block pass (K steps or τ), or DFlash 2's chain."""
        drafting = chain_draft if is_dflash2(self.model) else diffusion_draft
        return drafting(self, pending, last, width, settings, generator)

    def block(self, pending: list[int], last: int, canvas: torch.Tensor) -> torch.Tensor:
        """One drafting call over the queued context features (one per id in `pending`,
        cached afterwards) and the block [last, canvas]; returns the block rows' logits
        (W + 1, V), dropping the block from the cache."""
        context = torch.cat(self.pending) if self.pending else torch.zeros(0, self.network.width,
                                                                           device=self.device)
        if context.shape[0] != len(pending):
            raise RuntimeError(f"dflash: {context.shape[0]} context features for {len(pending)} tokens")
        ids = torch.cat([torch.tensor([last]), canvas.cpu()])
        logits, self.hidden = self.network.batch.call(self.network, self.row,
                                                      Block(context, ids, self.length, self.meter))
        self.pending = []
        return logits  # self.hidden: the block rows' states, for DFlash 2's candidate chain


def chain_draft(drafter: DFlashDrafter, pending: list[int], last: int, width: int, settings: DraftSettings,
                generator: torch.Generator) -> Draft:
    """DFlash 2's one-pass draft: each slot keeps its top-k candidates by logit, and the
    candidate selector scores a candidate c after the token chosen before it, t, as
    s(c) = logit(c) + ⟨pred(t) ⊙ W h, succ(c)⟩ (codebooks pred, succ; h the slot's state).
    Slots are drawn left to right from q = softmax(s / T) over the candidates (argmax at a
    point-mass setting); q, scattered over the vocabulary, is what verification divides by,
    and each token is drawn from its own q given the tokens before it, so lossless stays
    exact."""
    selector = drafter.model.candidate_selector
    canvas = torch.full((width,), settings.mask_token_id, dtype=torch.long, device=drafter.device)
    if width == 0:
        return Draft(canvas, torch.zeros(0, 1, device=drafter.device), 0)
    logits = slot_logits(drafter.block(pending, last, canvas), settings)  # (W, V), mask excluded
    unary, candidates = logits.topk(selector.top_k, dim=-1)
    states = selector.hidden_projection(drafter.hidden[1:].to(selector.hidden_projection.weight.dtype))
    successors = selector.successor_codebook(candidates)  # (W, k, r)
    before = torch.tensor(last, device=drafter.device)
    tokens, q = [], torch.zeros_like(logits)
    for i in range(width):
        scores = unary[i] + successors[i] @ (selector.predecessor_codebook(before) * states[i]).float()
        if point_mass(settings.temperature, settings.top_k):
            chosen = scores.argmax()
            q[i, candidates[i, chosen]] = 1.0
        else:
            weights = distribution(scores, settings.temperature)
            chosen = draw(weights, torch.empty_like(weights).exponential_(generator=generator))
            q[i, candidates[i]] = weights
        before = candidates[i, chosen]
        tokens.append(before)
    return Draft(torch.stack(tokens), q, 1)


def _setting(config, name: str, default=None):
    """A DFlash setting: in the config's `dflash_config`, else on the config itself."""
    return (getattr(config, "dflash_config", None) or {}).get(name, getattr(config, name, default))
