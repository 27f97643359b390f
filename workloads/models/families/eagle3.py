"""EAGLE-3 pairs: a drafter (workloads/decoding/eagle3.py) reading three of its verifier's
hidden states, chained one token a step."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from transformers import PreTrainedModel

from workloads.decoding.eagle3 import Eagle3Model, is_eagle3
from workloads.decoding.kinds import EAGLE3, PairKind
from workloads.models.families.family import Family
from workloads.models.families.twomodel import TwoModelPair
from workloads.models.loading import load_model
from workloads.models.pairspec import PairError, config_dict, looks_like_path
from workloads.models.profiles import DiffusionProfile


@dataclass(frozen=True)
class Eagle3Pair(TwoModelPair):
    """An EAGLE-3 drafter (`workloads.decoding.eagle3.Eagle3Model`) over its verifier: it reads
    three of the verifier's hidden states and uses its embeddings and LM head."""

    kind: ClassVar[PairKind] = EAGLE3


def is_eagle3_pair(spec: dict) -> bool:
    """An EAGLE-3 pair: the drafter's config is an EAGLE-3 one (it names the verifier layers it
    reads, or an Eagle3 architecture)."""
    config = config_dict(spec["drafter"]) if isinstance(spec.get("drafter"), str) else None
    return bool(config) and is_eagle3(config)


def load_eagle3(ref: str, verifier: PreTrainedModel, device: torch.device) -> Eagle3Model:
    """An EAGLE-3 drafter from a local checkpoint, refused in one line when it does not fit
    `verifier` (hidden size, the layers it reads)."""
    if not looks_like_path(ref) or not (Path(ref).expanduser() / "config.json").is_file():
        raise PairError(f"pair.drafter: an EAGLE-3 drafter loads from a local directory with config.json; "
                        f"got {ref!r} (download it first: huggingface-cli download {ref})")
    try:
        drafter = Eagle3Model.load(Path(ref).expanduser())
    except (OSError, ValueError, KeyError) as err:
        raise PairError(f"pair.drafter: cannot load {ref!r} as an EAGLE-3 drafter: {err}") from None
    v = verifier.config
    if drafter.config["hidden_size"] != v.hidden_size:
        raise PairError(f"pair.drafter: EAGLE-3 hidden size {drafter.config['hidden_size']} does not fit the "
                        f"verifier's {v.hidden_size}")
    if not all(1 <= k < v.num_hidden_layers for k in drafter.layer_ids):
        raise PairError(f"pair.drafter: EAGLE-3 reads layers {drafter.layer_ids}; the verifier has "
                        f"{v.num_hidden_layers} (ids 1 to {v.num_hidden_layers - 1})")
    return drafter.to(device=device, dtype=verifier.dtype)



class Eagle3Family(Family):
    kinds = (EAGLE3,)

    def kind_of(self, keys: set[str], spec: dict) -> PairKind | None:
        return EAGLE3 if keys == {"drafter", "verifier"} and is_eagle3_pair(spec) else None

    def load(self, name: str, spec: dict, options: dict, device) -> Eagle3Pair:
        verifier, vtok = load_model("verifier", spec["verifier"], options, device)
        drafter = load_eagle3(spec["drafter"], verifier, device)
        # an autoregressive chain: each row predicts the next token, and no mask is drawn
        profile = DiffusionProfile(mask_token_id=vtok.pad_token_id or 0, shifted=True)
        return Eagle3Pair(name, drafter, verifier, vtok, profile)
