"""Target-conditioned drafting (DFlash, arXiv 2602.06036): a small block-diffusion network
that drafts a whole block from the verifier's own hidden states.

The drafter has no embedding or LM head of its own: its block rows are the verifier's input
embeddings of [last, mask × W], its logits the verifier's LM head over its output. Its
context is not token ids but *features*: the hidden states of a few target layers of the
verifier, concatenated, one row per verified token. The engine's cache convention holds
here too: the drafter's cache keeps the features of the verified prefix minus its last
token, and the last token enters as the block's anchor row.

`FeatureTap` captures those layers' outputs during the verifier's own calls (forward
hooks: only the target layers, only the rows of the latest call). `DFlashNetwork` runs the
drafter over every row of a batch; drafters.FeatureDrafter drafts with it as any drafter
does (drafting.draft): K = 1 is DFlash's one-pass draft, K > 1 refines the block with the
unmasking policies, τ as for other drafters; drafters.ChainDrafter is DFlash 2's chain. A
mask row predicts its own position (not shifted).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from transformers import PreTrainedModel

from workloads.decoding.masks import after_slots
from workloads.decoding.network import Meter
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

    def __init__(self, drafter: PreTrainedModel, verifier: PreTrainedModel, rows: int,
                 slack: float | None = None):
        self.model = drafter
        self.embed = verifier.get_input_embeddings()
        self.head = getattr(verifier, "lm_head", None) or verifier.get_output_embeddings()
        self.scale = float(_setting(drafter.config, "input_embedding_scale", 1.0))
        self.slots = SlotCache(rows, slack)
        self.device = verifier.device
        self.dtype = drafter.dtype
        self.width = len(drafter.target_layer_ids) * drafter.config.hidden_size
        self.work = Meter()  # its forward passes, their token rows (padding included) and time

    def prepare(self, context: torch.Tensor, contexts: torch.Tensor, ids: torch.Tensor, blocks: torch.Tensor):
        """The forward over every row held: context features (R, N, F), the first contexts[r]
        of them row r's newly verified tokens' (cached), and block ids (R, Q), the first
        blocks[r] of row r's block [last, canvas] (dropped). A row's block sees its valid slots, its
        own context and its own block; its context continues its cached positions. Returns
        (forward -> (logits (R, Q, V), block states (R, Q, H)), the commit of its slots)."""
        offsets, among, kept = _block_layout(tuple(contexts.tolist()), tuple(blocks.tolist()),
                                             context.shape[1], ids.shape[1])
        positions = self.slots.positions(offsets)
        cache, valid = self.slots.view()
        mask = after_slots(valid, among, self.dtype).to(self.device, self.dtype)
        ids = ids.to(self.device)

        def forward() -> tuple[torch.Tensor, torch.Tensor]:
            noise = (self.embed(ids) * self.scale).to(self.dtype)
            hidden = self.model(target_hidden=context.to(self.dtype), noise_embedding=noise,
                                position_ids=positions.to(self.device), past_key_values=cache, use_cache=True,
                                attention_mask=mask)
            return self.model.compute_logits(hidden, self.head), hidden

        return forward, lambda: self.slots.keep_first(kept)

    def close(self) -> None:
        """Nothing outlives the batch."""


def _setting(config, name: str, default=None):
    """A DFlash setting: in the config's `dflash_config`, else on the config itself."""
    return (getattr(config, "dflash_config", None) or {}).get(name, getattr(config, name, default))
