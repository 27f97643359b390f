"""Model pairs: a drafter + verifier, or one dual-mode network; loaded once per worker.

A pair comes from a bundled name (`toy`, `toy-self`) or a spec of local paths / hub ids:
`{"drafter": ..., "verifier": ...}` or `{"model": ...}` for a dual-mode network, with
optional `profile` (see profiles.py) and loading options for every model of the pair:
`dtype` (bfloat16 | float16 | float32), `device` (cpu, cuda, cuda:1, ...),
`attn_implementation` (eager | sdpa | flash_attention_2 ...), `trust_remote_code` (off
unless the spec asks). A local directory and a hub id go through the same
`from_pretrained` call. What can be known of a spec without loading it (its kind, its
checkpoints, whether its files load) is in pairspec.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as transformers_logging

from workloads.decoding.dspark import attach_heads, is_dspark
from workloads.decoding.eagle3 import Eagle3Model
from workloads.decoding.kinds import DFLASH, DRAFT_MODEL, DSPARK, EAGLE3, SELF, TWO_MODEL, PairKind
from workloads.models.pairspec import (
    OPTIONS,
    PairError,
    check_dflash_config,
    checkpoint_dir,
    config_dict,
    is_dflash,
    is_dflash2_config,
    is_eagle3_pair,
    looks_like_path,
    resolve_pair,
)
from workloads.models.profiles import DiffusionProfile, ProfileError, resolve

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

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


@dataclass(frozen=True)
class SelfPair:
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    profile: DiffusionProfile
    kind: ClassVar[PairKind] = SELF


@dataclass(frozen=True)
class DFlashPair(TwoModelPair):
    """A target-conditioned drafter (`dflash.model.DFlashDraftModel`) over its verifier:
    the drafter reads the verifier's hidden states and uses its embeddings and LM head."""

    kind: ClassVar[PairKind] = DFLASH


@dataclass(frozen=True)
class DSparkPair(DFlashPair):
    """A DSpark drafter: the DFlash backbone with its Markov and confidence heads attached."""

    kind: ClassVar[PairKind] = DSPARK


@dataclass(frozen=True)
class Eagle3Pair(TwoModelPair):
    """An EAGLE-3 drafter (`workloads.decoding.eagle3.Eagle3Model`) over its verifier: it reads
    three of the verifier's hidden states and uses its embeddings and LM head."""

    kind: ClassVar[PairKind] = EAGLE3


Pair = TwoModelPair | DraftModelPair | SelfPair | DFlashPair | DSparkPair | Eagle3Pair


def _options(spec: dict) -> dict:
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


def _device(spec: dict) -> torch.device:
    try:
        device = torch.device(spec.get("device", "cpu"))
    except RuntimeError:
        raise PairError(f"pair.device: not a device: {spec.get('device')!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PairError(f"pair.device: {device} requested but this machine has no CUDA device")
    return device


def _load(field: str, ref: str, options: dict | None = None, device: torch.device | None = None):
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


def _profile(field: str, model: PreTrainedModel, tokenizer, override: dict | None,
             extra_forbidden: tuple[int, ...] = ()) -> DiffusionProfile:
    try:
        profile = resolve(field, dict(getattr(model.config, "specsweep", None) or {}), override, tokenizer)
    except ProfileError as err:
        raise PairError(str(err)) from None
    if extra_forbidden:
        forbidden = tuple(sorted({*profile.forbidden, *extra_forbidden}))
        profile = dataclasses.replace(profile, forbidden=forbidden)
    return profile


def _check_tokenizers(drafter: PreTrainedTokenizerBase, verifier: PreTrainedTokenizerBase) -> tuple[int, ...]:
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


def load_tokenizer(spec: str | dict) -> PreTrainedTokenizerBase:
    """The pair's tokenizer alone (the verifier's, or the dual-mode model's)."""
    _, spec = resolve_pair(spec)
    ref = spec.get("verifier", spec.get("model"))
    try:
        return AutoTokenizer.from_pretrained(str(Path(ref).expanduser()) if looks_like_path(ref) else ref)
    except OSError as err:
        raise PairError(f"pair: cannot load the tokenizer of {ref!r} ({type(err).__name__})") from None


def load_pair(spec: str | dict) -> Pair:
    """Load a bundled pair by name or a pair spec (see module docstring)."""
    name, spec = resolve_pair(spec)
    keys = set(spec) - {"name", "profile", *OPTIONS}
    options, device = _options(spec), _device(spec)
    if keys == {"model"}:
        model, tok = _load("model", spec["model"], options, device)
        return SelfPair(name, model, tok, _profile("model", model, tok, spec.get("profile")))
    if keys == {"drafter", "verifier"} and is_eagle3_pair(spec):
        verifier, vtok = _load("verifier", spec["verifier"], options, device)
        drafter = load_eagle3(spec["drafter"], verifier, device)
        # an autoregressive chain: each row predicts the next token, and no mask is drawn
        profile = DiffusionProfile(mask_token_id=vtok.pad_token_id or 0, shifted=True)
        return Eagle3Pair(name, drafter, verifier, vtok, profile)
    if keys == {"drafter", "verifier"} and is_dflash(spec):
        verifier, vtok = _load("verifier", spec["verifier"], options, device)
        drafter = load_dflash(spec["drafter"], verifier, options, device)
        declared = {"family": "dflash", "mask_token_id": drafter.mask_token_id}
        try:
            profile = resolve("drafter", declared, spec.get("profile"), vtok)
        except ProfileError as err:
            raise PairError(str(err)) from None
        return (DSparkPair if hasattr(drafter, "markov_head") else DFlashPair)(name, drafter, verifier, vtok,
                                                                              profile)
    if keys == {"drafter", "verifier"}:
        verifier, vtok = _load("verifier", spec["verifier"], options, device)
        drafter, dtok = _load("drafter", spec["drafter"], options, device)
        only_drafter = _check_tokenizers(dtok, vtok)
        vocab = verifier.get_output_embeddings().weight.shape[0]
        beyond = tuple(range(vocab, drafter.get_output_embeddings().weight.shape[0]))
        profile = _profile("drafter", drafter, dtok, spec.get("profile"), only_drafter + beyond)
        if profile.attention != "causal":
            return TwoModelPair(name, drafter, verifier, vtok, profile)
        if not profile.shifted or beyond or only_drafter:
            raise PairError("pair.profile.attention: an autoregressive (causal) drafter predicts the next "
                            "token (shift: true) over the verifier's vocabulary, as vLLM's draft_model needs")
        return DraftModelPair(name, drafter, verifier, vtok, profile)
    raise PairError(
        f"pair: expected keys {{drafter, verifier}} or {{model}}, got {{{', '.join(sorted(keys))}}}"
    )
