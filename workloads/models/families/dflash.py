"""DFlash pairs: a target-conditioned block drafter (the `dflash` package's DFlashDraftModel,
or DFlash2DraftModel for a DFlash 2 checkpoint) reading its verifier's hidden states; and
DSpark pairs, the DFlash backbone with its Markov and confidence heads attached
(workloads/decoding/dspark.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from transformers import PreTrainedModel
from transformers.utils import logging as transformers_logging

from workloads.decoding.dspark import attach_heads, is_dspark
from workloads.decoding.kinds import DFLASH, DSPARK, PairKind
from workloads.models.families.family import Family
from workloads.models.families.twomodel import TwoModelPair
from workloads.models.loading import check_loaded, load_model
from workloads.models.pairspec import PairError, checkpoint_dir, config_dict, looks_like_path
from workloads.models.profiles import ProfileError, resolve


@dataclass(frozen=True)
class DFlashPair(TwoModelPair):
    """A target-conditioned drafter (`dflash.model.DFlashDraftModel`) over its verifier:
    the drafter reads the verifier's hidden states and uses its embeddings and LM head."""

    kind: ClassVar[PairKind] = DFLASH


@dataclass(frozen=True)
class DSparkPair(DFlashPair):
    """A DSpark drafter: the DFlash backbone with its Markov and confidence heads attached."""

    kind: ClassVar[PairKind] = DSPARK


def is_dflash(spec: dict) -> bool:
    """A DFlash pair: the spec says `profile: {family: dflash}`, or the drafter's config is a
    DFlash one (a `dflash_config`, or a DFlash architecture); a DSpark drafter is one too,
    with heads of its own."""
    if (spec.get("profile") or {}).get("family") == "dflash":
        return True
    config = config_dict(spec["drafter"]) if isinstance(spec.get("drafter"), str) else None
    return bool(config) and ("dflash_config" in config
                             or any("DFlash" in a for a in config.get("architectures") or ()))


def is_dflash2_config(config: dict) -> bool:
    """A DFlash 2 drafter's config.json: its convolutions' settings, or a DFlash 2 architecture."""
    settings = {**config, **(config.get("dflash_config") or {})}
    return "conv_kernel_size" in settings or any("DFlash2" in a for a in config.get("architectures") or ())


def is_dflash2(drafter: str | None) -> bool:
    """Whether the checkpoint `drafter` (a path or hub id; its config.json read where it is
    here) is a DFlash 2 drafter."""
    return drafter is not None and is_dflash2_config(config_dict(drafter) or {})


def check_dflash_config(ref: str, config: dict) -> None:
    """A DFlash drafter's config.json counts the verifier's layers (`num_target_layers`, which
    the dflash package's model reads whatever else it says); a standalone drafter's does not."""
    if "num_target_layers" not in config:
        raise PairError(f"pair.drafter: {ref} is not a DFlash drafter (its config.json has no "
                        "num_target_layers); a standalone drafter takes no profile.family: dflash")


def load_dflash(ref: str, verifier: PreTrainedModel, options: dict, device: torch.device) -> PreTrainedModel:
    """A DFlash drafter with the `dflash` package's class (`DFlash2DraftModel` for a DFlash 2
    checkpoint), refused in one line when it does not fit `verifier`."""
    from dflash.model import DFlash2DraftModel, DFlashDraftModel

    config = config_dict(ref)
    if config is None:
        raise PairError(f"pair.drafter: cannot load {ref!r}: no config.json here; offline, download it first "
                        f"(huggingface-cli download {ref}) or pass a local path")
    check_dflash_config(ref, config)
    cls = DFlash2DraftModel if is_dflash2_config(config) else DFlashDraftModel
    path = str(Path(ref).expanduser()) if looks_like_path(ref) else ref
    kwargs = {k: v for k, v in options.items() if k in ("dtype", "attn_implementation")}
    said = transformers_logging.get_verbosity()
    if is_dspark(config):  # its heads' weights are not the backbone class's: attached below, not unexpected
        transformers_logging.set_verbosity_error()
    try:
        drafter, info = cls.from_pretrained(path, output_loading_info=True, **kwargs)
    except (OSError, ValueError) as err:
        reason = str(err).splitlines()[0]
        raise PairError(f"pair.drafter: cannot load {ref!r} as a DFlash drafter: {reason}") from None
    finally:
        transformers_logging.set_verbosity(said)
    check_loaded("drafter", ref, info)
    check_dflash_fit(drafter, verifier)
    if is_dspark(config):
        try:
            attach_heads(drafter, checkpoint_dir(ref), config)
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            reason = str(err).splitlines()[0]
            raise PairError(f"pair.drafter: cannot load {ref!r}'s DSpark heads: {reason}") from None
    drafter.eval()
    return drafter.to(device) if drafter.device != device else drafter


def check_dflash_fit(drafter: PreTrainedModel, verifier: PreTrainedModel) -> None:
    """The drafter reads the verifier's hidden states and shares its embeddings and LM head:
    hidden sizes, target layers and vocabularies must agree."""
    d, v = drafter.config, verifier.config
    if d.hidden_size != v.hidden_size:
        raise PairError(f"pair.drafter: DFlash hidden size {d.hidden_size} does not fit the verifier's "
                        f"{v.hidden_size}")
    layers = v.num_hidden_layers
    wanted = getattr(d, "num_target_layers", layers)
    if wanted != layers or max(drafter.target_layer_ids) >= layers:
        raise PairError(f"pair.drafter: DFlash target layers {list(drafter.target_layer_ids)} (of "
                        f"{wanted}) do not fit the verifier's {layers} layers")
    vocab = verifier.get_input_embeddings().weight.shape[0]
    if getattr(d, "vocab_size", vocab) != vocab or not 0 <= (drafter.mask_token_id or 0) < vocab:
        raise PairError(f"pair.drafter: DFlash vocabulary {d.vocab_size} (mask token "
                        f"{drafter.mask_token_id}) does not fit the verifier's {vocab}")


class DFlashFamily(Family):
    kinds = (DFLASH, DSPARK)

    def kind_of(self, keys: set[str], spec: dict) -> PairKind | None:
        if keys != {"drafter", "verifier"} or not is_dflash(spec):
            return None
        if (config := config_dict(spec["drafter"])) is not None:
            check_dflash_config(spec["drafter"], config)
            if is_dspark(config):
                return DSPARK
        return DFLASH

    def load(self, name: str, spec: dict, options: dict, device) -> DFlashPair:
        verifier, vtok = load_model("verifier", spec["verifier"], options, device)
        drafter = load_dflash(spec["drafter"], verifier, options, device)
        declared = {"family": "dflash", "mask_token_id": drafter.mask_token_id}
        try:
            profile = resolve("drafter", declared, spec.get("profile"), vtok)
        except ProfileError as err:
            raise PairError(str(err)) from None
        cls = DSparkPair if hasattr(drafter, "markov_head") else DFlashPair
        return cls(name, drafter, verifier, vtok, profile)

    def vllm_settings(self, kind: PairKind, config: dict) -> dict:
        """DSpark's draft top-k is vLLM's `dspark_draft_topk`."""
        if kind is DSPARK and config.get("draft_top_k"):
            return {"dspark_draft_topk": config["draft_top_k"]}
        return {}

    def sglang_gap(self, kind: PairKind, config: dict) -> str | None:
        return "SGLang's DSPARK has no draft top-k" if self.vllm_settings(kind, config) else None

    def specsweep_only(self, config: dict, drafter: str | None) -> list[str]:
        """A DFlash 2 slot's candidates narrowed by a draft top-k: vLLM reads them from the
        checkpoint (`selector_top_k`)."""
        if config.get("draft_top_k") and is_dflash2(drafter):
            return [f"draft_top_k {config['draft_top_k']} (DFlash 2's candidates a slot: its checkpoint's "
                    "selector_top_k in vLLM)"]
        return []

    def cpu_port(self, method: str, drafter: str | None) -> str | None:
        if method == DSPARK.serving_method:
            return "DSpark"
        return "DFlash 2" if method == DFLASH.serving_method and is_dflash2(drafter) else None
