"""Dual-mode pairs: one network that drafts (diffusion) and verifies (autoregressive) itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from workloads.decoding.kinds import SELF, PairKind
from workloads.models.families.family import Family
from workloads.models.loading import load_model, profile_of
from workloads.models.profiles import DiffusionProfile


@dataclass(frozen=True)
class SelfPair:
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    profile: DiffusionProfile
    kind: ClassVar[PairKind] = SELF


class SelfSpec(Family):
    kinds = (SELF,)

    def kind_of(self, keys: set[str], spec: dict) -> PairKind | None:
        return SELF if keys == {"model"} else None

    def load(self, name: str, spec: dict, options: dict, device) -> SelfPair:
        model, tok = load_model("model", spec["model"], options, device)
        return SelfPair(name, model, tok, profile_of("model", model, tok, spec.get("profile")))
