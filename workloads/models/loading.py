"""Loading a pair's models, whatever its family: `from_pretrained` options from a pair spec,
the device, a model and its tokenizer from a local directory or a hub id (refused in one
line when it cannot load or lacks weights), a drafter's profile, and the tokenizer check of
a two-model pair. Each family (families/) loads its pairs with these."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from workloads.models.pairspec import PairError, looks_like_path
from workloads.models.profiles import DiffusionProfile, ProfileError, resolve

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def options_of(spec: dict) -> dict:
    """`from_pretrained` keyword arguments from the pair spec's loading options."""
    # only a true boolean: a string such as "false" is not a request to run code
    kwargs: dict = {"trust_remote_code": spec.get("trust_remote_code") is True}
    if "dtype" in spec:
        if spec["dtype"] not in DTYPES:
            raise PairError(f"pair.dtype: must be one of {', '.join(DTYPES)}; got {spec['dtype']!r}")
        kwargs["dtype"] = DTYPES[spec["dtype"]]
    if "attn_implementation" in spec:
        kwargs["attn_implementation"] = spec["attn_implementation"]
    return kwargs


def device_of(spec: dict) -> torch.device:
    try:
        device = torch.device(spec.get("device", "cpu"))
    except RuntimeError:
        raise PairError(f"pair.device: not a device: {spec.get('device')!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PairError(f"pair.device: {device} requested but this machine has no CUDA device")
    return device


def load_model(field: str, ref: str, options: dict | None = None, device: torch.device | None = None):
    """Load (model, tokenizer) from a local directory or a hub id, or raise PairError."""
    if not isinstance(ref, str) or not ref:
        raise PairError(f"pair.{field}: expected a local path or hub id, got {ref!r}")
    if looks_like_path(ref):
        path = Path(ref).expanduser()
        if not (path / "config.json").is_file():
            raise PairError(f"pair.{field}: {ref} is not a model directory (no config.json there)")
        ref = str(path)
    options = options or {"trust_remote_code": False}
    try:
        try:
            model, info = AutoModelForCausalLM.from_pretrained(ref, output_loading_info=True, **options)
        except ValueError:  # remote-code diffusion LMs (Dream, LLaDA) register AutoModel only
            if not options["trust_remote_code"]:
                raise
            model, info = AutoModel.from_pretrained(ref, output_loading_info=True, **options)
        tokenizer = AutoTokenizer.from_pretrained(ref, trust_remote_code=options["trust_remote_code"])
    except OSError as err:
        raise PairError(
            f"pair.{field}: cannot load {ref!r} ({type(err).__name__}); offline, download it "
            f"first (huggingface-cli download {ref}) or pass a local path"
        ) from None
    except ValueError as err:  # e.g. an architecture that needs trust_remote_code
        raise PairError(f"pair.{field}: cannot load {ref!r}: {str(err).splitlines()[0]}") from None
    check_loaded(field, ref, info)
    model.eval()
    if device is not None and model.device != device:
        model.to(device)
    return model, tokenizer


def check_loaded(field: str, ref: str, info: dict) -> None:
    """Refuse a checkpoint that lacks some of the model's weights: transformers would start
    them at random and only warn, and the pair would decode noise."""
    missing = sorted(info["missing_keys"])
    if missing:
        raise PairError(f"pair.{field}: {ref} lacks {len(missing)} of the model's weights (e.g. "
                        f"{missing[0]}); its safetensors files do not hold this model")


def profile_of(field: str, model: PreTrainedModel, tokenizer, override: dict | None,
             extra_forbidden: tuple[int, ...] = ()) -> DiffusionProfile:
    try:
        profile = resolve(field, dict(getattr(model.config, "specsweep", None) or {}), override, tokenizer)
    except ProfileError as err:
        raise PairError(str(err)) from None
    if extra_forbidden:
        forbidden = tuple(sorted({*profile.forbidden, *extra_forbidden}))
        profile = dataclasses.replace(profile, forbidden=forbidden)
    return profile


def check_tokenizers(drafter: PreTrainedTokenizerBase, verifier: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """Refuse a pair whose tokenizers disagree: every verifier token must have the same id
    in the drafter, and the special tokens must match. Tokens only the drafter has (a mask
    token added for diffusion, say) are returned: they may never be proposed."""
    ours, theirs = drafter.get_vocab(), verifier.get_vocab()
    differ = sorted(t for t, i in theirs.items() if ours.get(t) != i)
    if differ:
        raise PairError(f"pair: drafter and verifier tokenizers differ in vocabulary ({len(differ)} verifier "
                        f"tokens, e.g. {differ[0]!r}, have another id or none in the drafter); they must "
                        f"match")
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if getattr(drafter, name) != getattr(verifier, name):
            raise PairError(f"pair: drafter and verifier tokenizers differ in {name} "
                            f"({getattr(drafter, name)} vs {getattr(verifier, name)})")
    return tuple(sorted(i for t, i in ours.items() if t not in theirs))
