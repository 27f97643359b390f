"""Two-model pairs: a diffusion drafter beside an autoregressive verifier sharing its
tokenizer, or (`profile: {attention: causal}`) a drafter run as an autoregressive LM, as vLLM's
draft_model runs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from workloads.decoding.kinds import DRAFT_MODEL, TWO_MODEL, PairKind
from workloads.models.families.family import Family
from workloads.models.loading import check_tokenizers, load_model, profile_of
from workloads.models.pairspec import PairError, config_dict
from workloads.models.profiles import DiffusionProfile


@dataclass(frozen=True)
class TwoModelPair:
    """A drafter network and a verifier network."""

    name: str
    drafter: PreTrainedModel
    verifier: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    profile: DiffusionProfile
    kind: ClassVar[PairKind] = TWO_MODEL


@dataclass(frozen=True)
class DraftModelPair(TwoModelPair):
    """A drafter run as an autoregressive LM (profile attention `causal`) and its verifier."""

    kind: ClassVar[PairKind] = DRAFT_MODEL


def is_causal_drafter(spec: dict) -> bool:
    """A two-model pair whose drafter is autoregressive: `attention: causal` in the spec's
    profile, else in its checkpoint's `specsweep` block."""
    attention = (spec.get("profile") or {}).get("attention")
    if attention is None and isinstance(spec.get("drafter"), str):
        attention = ((config_dict(spec["drafter"]) or {}).get("specsweep") or {}).get("attention")
    return attention == "causal"



class TwoModel(Family):
    kinds = (TWO_MODEL, DRAFT_MODEL)

    def kind_of(self, keys: set[str], spec: dict) -> PairKind | None:
        if keys != {"drafter", "verifier"}:
            return None
        return DRAFT_MODEL if is_causal_drafter(spec) else TWO_MODEL

    def load(self, name: str, spec: dict, options: dict, device) -> TwoModelPair:
        verifier, vtok = load_model("verifier", spec["verifier"], options, device)
        drafter, dtok = load_model("drafter", spec["drafter"], options, device)
        only_drafter = check_tokenizers(dtok, vtok)
        vocab = verifier.get_output_embeddings().weight.shape[0]
        beyond = tuple(range(vocab, drafter.get_output_embeddings().weight.shape[0]))
        profile = profile_of("drafter", drafter, dtok, spec.get("profile"), only_drafter + beyond)
        if profile.attention != "causal":
            return TwoModelPair(name, drafter, verifier, vtok, profile)
        if not profile.shifted or beyond or only_drafter:
            raise PairError("pair.profile.attention: an autoregressive (causal) drafter predicts the next "
                            "token (shift: true) over the verifier's vocabulary, as vLLM's draft_model needs")
        return DraftModelPair(name, drafter, verifier, vtok, profile)
