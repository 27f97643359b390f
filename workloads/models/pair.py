"""Model pairs: a drafter + verifier, or one dual-mode network; loaded once per worker.

A pair comes from a bundled name (`toy`, `toy-self`) or a spec of local paths / hub ids:
`{"drafter": ..., "verifier": ...}` or `{"model": ...}` for a dual-mode network, with
optional `profile` (see profiles.py) and loading options for every model of the pair:
`dtype` (bfloat16 | float16 | float32), `device` (cpu, cuda, cuda:1, ...),
`attn_implementation` (eager | sdpa | flash_attention_2 ...), `trust_remote_code` (off
unless the spec asks). A local directory and a hub id go through the same
`from_pretrained` call.
"""

from __future__ import annotations

import dataclasses
import json
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

from workloads.decoding.kinds import DFLASH, SELF, TWO_MODEL, PairKind, least_positions
from workloads.models.profiles import DiffusionProfile, ProfileError, resolve

TOY_DIR = Path(__file__).parent / "toy"
BUNDLED = {
    "toy": {"drafter": str(TOY_DIR / "drafter"), "verifier": str(TOY_DIR / "verifier")},
    "toy-self": {"model": str(TOY_DIR / "self")},
    "toy-dflash": {"drafter": str(TOY_DIR / "dflash"), "verifier": str(TOY_DIR / "verifier")},
}


class PairError(ValueError):
    """A pair spec that cannot be loaded; the message names the offending field."""


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


Pair = TwoModelPair | SelfPair | DFlashPair


def _looks_like_path(ref: str) -> bool:
    return ref.startswith(("/", ".", "~")) or Path(ref).exists()


OPTIONS = ("dtype", "device", "attn_implementation", "trust_remote_code")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _options(spec: dict) -> dict:
    """`from_pretrained` keyword arguments from the pair spec's loading options."""
    kwargs: dict = {"trust_remote_code": bool(spec.get("trust_remote_code", False))}
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
    if _looks_like_path(ref):
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


def _resolve(spec: str | dict) -> tuple[str, dict]:
    if not isinstance(spec, str | dict):
        raise PairError(f"pair: expected a name or a mapping, got {type(spec).__name__}")
    name = spec if isinstance(spec, str) else spec.get("name", "custom")
    if isinstance(spec, str):
        if spec not in BUNDLED:
            raise PairError(f"pair: unknown pair {spec!r}; bundled pairs: {', '.join(BUNDLED)}")
        spec = BUNDLED[spec]
    return name, spec


def _config_dict(ref: str) -> dict | None:
    """A checkpoint's config.json without loading it: a local directory's, or a hub id's
    from the local hub cache; None when neither is here."""
    path = Path(ref).expanduser() if _looks_like_path(ref) else _cached_snapshot(ref)
    try:
        return json.loads((path / "config.json").read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


def _is_dflash(spec: dict) -> bool:
    """A DFlash pair: the spec says `profile: {family: dflash}`, or the drafter's config is a
    DFlash one (a `dflash_config`, or a DFlash architecture)."""
    if (spec.get("profile") or {}).get("family") == "dflash":
        return True
    config = _config_dict(spec["drafter"]) if isinstance(spec.get("drafter"), str) else None
    return bool(config) and ("dflash_config" in config
                             or any("DFlash" in a for a in config.get("architectures") or ()))


def load_dflash(ref: str, verifier: PreTrainedModel, options: dict, device: torch.device) -> PreTrainedModel:
    """A DFlash drafter with the `dflash` package's class (`DFlash2DraftModel` for a DFlash 2
    checkpoint), refused in one line when it does not fit `verifier`."""
    from dflash.model import DFlash2DraftModel, DFlashDraftModel

    config = _config_dict(ref)
    if config is None:
        raise PairError(f"pair.drafter: cannot load {ref!r}: no config.json here; offline, download it first "
                        f"(huggingface-cli download {ref}) or pass a local path")
    check_dflash_config(ref, config)
    settings = {**config, **(config.get("dflash_config") or {})}
    second = "conv_kernel_size" in settings or any("DFlash2" in a for a in config.get("architectures") or ())
    cls = DFlash2DraftModel if second else DFlashDraftModel
    path = str(Path(ref).expanduser()) if _looks_like_path(ref) else ref
    kwargs = {k: v for k, v in options.items() if k in ("dtype", "attn_implementation")}
    try:
        drafter, info = cls.from_pretrained(path, output_loading_info=True, **kwargs)
    except (OSError, ValueError) as err:
        reason = str(err).splitlines()[0]
        raise PairError(f"pair.drafter: cannot load {ref!r} as a DFlash drafter: {reason}") from None
    check_loaded("drafter", ref, info)
    check_dflash_fit(drafter, verifier)
    drafter.eval()
    return drafter.to(device) if drafter.device != device else drafter


def check_dflash_config(ref: str, config: dict) -> None:
    """A DFlash drafter's config.json counts the verifier's layers (`num_target_layers`, which
    the dflash package's model reads whatever else it says); a standalone drafter's does not."""
    if "num_target_layers" not in config:
        raise PairError(f"pair.drafter: {ref} is not a DFlash drafter (its config.json has no "
                        "num_target_layers); a standalone drafter takes no profile.family: dflash")


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


# bits per element of each safetensors dtype
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4, "F6_E2M3": 6,
              "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
              "I64": 64, "U64": 64, "F64": 64, "C64": 64}


def _tensor_bytes(entry: dict) -> int:
    """The bytes a safetensors header entry's dtype and shape need (KeyError: unknown dtype)."""
    count = 1
    for size in entry["shape"]:
        count *= size
    return count * DTYPE_BITS[entry["dtype"]] // 8


def check_model_dir(field: str, path: Path) -> None:
    """A local model directory whose files can be loaded, judged without loading weights:
    config.json is a JSON object, and every safetensors file holds a readable header whose
    tensors fit in the file, each as many bytes as its dtype and shape need (a copy cut short
    or a damaged header fails here, not as a loader traceback)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise PairError(f"pair.{field}: {path / 'config.json'} is not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise PairError(f"pair.{field}: {path / 'config.json'} must hold a JSON object")
    for weights in sorted(path.glob("*.safetensors")):
        size = weights.stat().st_size
        try:
            with open(weights, "rb") as f:
                length = int.from_bytes(f.read(8), "little")
                if not 0 < length <= size - 8:
                    raise ValueError(f"header length {length} in a file of {size} bytes")
                header = json.loads(f.read(length))
            tensors = {k: t for k, t in header.items() if k != "__metadata__"}
            end = max((t["data_offsets"][1] for t in tensors.values()), default=0)
            for name, t in tensors.items():
                start, stop = t["data_offsets"]
                if stop - start != _tensor_bytes(t):
                    raise ValueError(f"tensor {name}: {t['dtype']} {t['shape']} needs {_tensor_bytes(t)} "
                                     f"bytes; its offsets hold {stop - start}")
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise PairError(f"pair.{field}: {weights} is not a readable safetensors file ({err})") from None
        if 8 + length + end > size:
            raise PairError(f"pair.{field}: {weights} is cut short ({size} bytes; its header needs "
                            f"{8 + length + end}); copy it again")


def _cached_snapshot(repo_id: str) -> Path | None:
    """The folder of `repo_id` in the local hub cache, or None (not cached or not a repo id)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # not a valid repo id: the loader names it
        return None
    return Path(found).parent if isinstance(found, str) else None


def pair_kind(spec: str | dict) -> PairKind:
    """The kind of a pair spec (workloads.decoding.kinds), checked without loading any weights:
    local paths, and hub ids already in the local hub cache, must be loadable model directories
    (`check_model_dir`) and a DFlash drafter's config a DFlash one (`check_dflash_config`);
    other hub ids are checked when loaded."""
    _, spec = _resolve(spec)
    keys = set(spec) - {"name", "profile", *OPTIONS}
    if keys not in ({"model"}, {"drafter", "verifier"}):
        raise PairError(
            f"pair: expected keys {{drafter, verifier}} or {{model}}, got {{{', '.join(sorted(keys))}}}")
    for field in sorted(keys):
        ref = spec[field]
        if not isinstance(ref, str) or not ref:
            raise PairError(f"pair.{field}: expected a local path or hub id, got {ref!r}")
        if _looks_like_path(ref):
            if not (Path(ref).expanduser() / "config.json").is_file():
                raise PairError(f"pair.{field}: {ref} is not a model directory (no config.json there)")
            check_model_dir(field, Path(ref).expanduser())
        elif (cached := _cached_snapshot(ref)) is not None:
            check_model_dir(field, cached)
    if keys == {"model"}:
        return SELF
    if not _is_dflash(spec):
        return TWO_MODEL
    if (config := _config_dict(spec["drafter"])) is not None:
        check_dflash_config(spec["drafter"], config)
    return DFLASH


def refs(spec: str | dict) -> dict[str, str]:
    """The checkpoints of a pair spec as a serving engine loads them: `verifier` (a dual-mode
    pair's one model) and `drafter` where the pair has its own."""
    _, spec = _resolve(spec)
    if "model" in spec:
        return {"verifier": spec["model"]}
    return {"verifier": spec["verifier"], "drafter": spec["drafter"]}


def max_positions(spec: str | dict) -> int | None:
    """The positions every model of a pair spec has (the least `max_position_embeddings` of
    their config.json), read without loading them; None when no local config says."""
    _, spec = _resolve(spec)
    return least_positions([(_config_dict(spec[f]) or {}).get("max_position_embeddings")
                            for f in ("drafter", "verifier", "model") if isinstance(spec.get(f), str)])


def check_drafts(name: str, spec: str | dict, drafts: int, dflash: bool) -> None:
    """PairError unless a verification of `drafts` draft tokens fits pair `name`: fewer than
    its models' positions and, drafted by its DFlash drafter (`dflash`), at most the block
    that drafter was trained on (`dflash_config.block_size`: the anchor and block_size − 1
    drafts). Read from local configs without loading; what is not here is not checked."""
    limit = max_positions(spec)
    if limit is not None and drafts >= limit:
        raise PairError(f"{drafts} drafts do not fit in pair {name}'s {limit} positions")
    _, spec = _resolve(spec)
    config = _config_dict(spec["drafter"]) if isinstance(spec.get("drafter"), str) else None
    block = ((config or {}).get("dflash_config") or {}).get("block_size")
    if dflash and isinstance(block, int) and drafts > block - 1:
        raise PairError(f"{drafts} is more than the {block - 1} drafts pair {name}'s DFlash drafter was "
                        f"trained for (its block_size {block}); at most {block - 1}")


def load_tokenizer(spec: str | dict) -> PreTrainedTokenizerBase:
    """The pair's tokenizer alone (the verifier's, or the dual-mode model's)."""
    _, spec = _resolve(spec)
    ref = spec.get("verifier", spec.get("model"))
    try:
        return AutoTokenizer.from_pretrained(str(Path(ref).expanduser()) if _looks_like_path(ref) else ref)
    except OSError as err:
        raise PairError(f"pair: cannot load the tokenizer of {ref!r} ({type(err).__name__})") from None


def load_pair(spec: str | dict) -> Pair:
    """Load a bundled pair by name or a pair spec (see module docstring)."""
    name, spec = _resolve(spec)
    keys = set(spec) - {"name", "profile", *OPTIONS}
    options, device = _options(spec), _device(spec)
    if keys == {"model"}:
        model, tok = _load("model", spec["model"], options, device)
        return SelfPair(name, model, tok, _profile("model", model, tok, spec.get("profile")))
    if keys == {"drafter", "verifier"} and _is_dflash(spec):
        verifier, vtok = _load("verifier", spec["verifier"], options, device)
        drafter = load_dflash(spec["drafter"], verifier, options, device)
        declared = {"family": "dflash", "mask_token_id": drafter.mask_token_id}
        try:
            profile = resolve("drafter", declared, spec.get("profile"), vtok)
        except ProfileError as err:
            raise PairError(str(err)) from None
        return DFlashPair(name, drafter, verifier, vtok, profile)
    if keys == {"drafter", "verifier"}:
        verifier, vtok = _load("verifier", spec["verifier"], options, device)
        drafter, dtok = _load("drafter", spec["drafter"], options, device)
        only_drafter = _check_tokenizers(dtok, vtok)
        vocab = verifier.get_output_embeddings().weight.shape[0]
        beyond = tuple(range(vocab, drafter.get_output_embeddings().weight.shape[0]))
        return TwoModelPair(name, drafter, verifier, vtok,
                            _profile("drafter", drafter, dtok, spec.get("profile"), only_drafter + beyond))
    raise PairError(
        f"pair: expected keys {{drafter, verifier}} or {{model}}, got {{{', '.join(sorted(keys))}}}"
    )
