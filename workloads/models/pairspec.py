"""A pair spec read without loading any model: a bundled name or a mapping of local paths /
hub ids (see workloads.models.pair), its checkpoints as a serving engine loads them, its
positions, and whether its local files can be loaded (config.json and safetensors headers).
What runs before any worker loads a model: spec checks, planning, exports. Its kind is its
family's to say (workloads.models.families.pair_kind)."""

from __future__ import annotations

import json
from pathlib import Path

from workloads.decoding.kinds import least_positions

TOY_DIR = Path(__file__).parent / "toy"
BUNDLED = {
    "toy": {"drafter": str(TOY_DIR / "drafter"), "verifier": str(TOY_DIR / "verifier")},
    "toy-self": {"model": str(TOY_DIR / "self")},
    "toy-dflash": {"drafter": str(TOY_DIR / "dflash"), "verifier": str(TOY_DIR / "verifier")},
    # the toy drafter run as an autoregressive LM, as vLLM's draft_model runs it
    "toy-draft": {"drafter": str(TOY_DIR / "drafter"), "verifier": str(TOY_DIR / "verifier"),
                  "profile": {"attention": "causal"}},
    "toy-dflash2": {"drafter": str(TOY_DIR / "dflash2"), "verifier": str(TOY_DIR / "verifier")},
    "toy-dspark": {"drafter": str(TOY_DIR / "dspark"), "verifier": str(TOY_DIR / "verifier")},
    "toy-eagle3": {"drafter": str(TOY_DIR / "eagle3"), "verifier": str(TOY_DIR / "verifier")},
}


class PairError(ValueError):
    """A pair spec that cannot be loaded; the message names the offending field."""


def looks_like_path(ref: str) -> bool:
    return ref.startswith(("/", ".", "~")) or Path(ref).exists()


OPTIONS = ("dtype", "device", "attn_implementation", "trust_remote_code")


def resolve_pair(spec: str | dict) -> tuple[str, dict]:
    if not isinstance(spec, str | dict):
        raise PairError(f"pair: expected a name or a mapping, got {type(spec).__name__}")
    name = spec if isinstance(spec, str) else spec.get("name", "custom")
    if isinstance(spec, str):
        if spec not in BUNDLED:
            raise PairError(f"pair: unknown pair {spec!r}; bundled pairs: {', '.join(BUNDLED)}")
        spec = BUNDLED[spec]
    return name, spec


def checkpoint_dir(ref: str) -> Path | None:
    """A checkpoint's local directory: the path itself, or a hub id's folder in the local hub
    cache (None when not cached)."""
    return Path(ref).expanduser() if looks_like_path(ref) else cached_snapshot(ref)


def config_dict(ref: str) -> dict | None:
    """A checkpoint's config.json without loading it: a local directory's, or a hub id's
    from the local hub cache; None when neither is here."""
    path = checkpoint_dir(ref)
    try:
        return json.loads((path / "config.json").read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


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


def cached_snapshot(repo_id: str) -> Path | None:
    """The folder of `repo_id` in the local hub cache, or None (not cached or not a repo id)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # not a valid repo id: the loader names it
        return None
    return Path(found).parent if isinstance(found, str) else None


def refs(spec: str | dict) -> dict[str, str]:
    """The checkpoints of a pair spec as a serving engine loads them: `verifier` (a dual-mode
    pair's one model) and `drafter` where the pair has its own."""
    _, spec = resolve_pair(spec)
    if "model" in spec:
        return {"verifier": spec["model"]}
    return {"verifier": spec["verifier"], "drafter": spec["drafter"]}


def max_positions(spec: str | dict) -> int | None:
    """The positions every model of a pair spec has (the least `max_position_embeddings` of
    their config.json), read without loading them; None when no local config says."""
    _, spec = resolve_pair(spec)
    return least_positions([(config_dict(spec[f]) or {}).get("max_position_embeddings")
                            for f in ("drafter", "verifier", "model") if isinstance(spec.get(f), str)])


def check_drafts(name: str, spec: str | dict, drafts: int, dflash: bool) -> None:
    """PairError unless a verification of `drafts` draft tokens fits pair `name`: fewer than
    its models' positions and, drafted by its DFlash drafter (`dflash`), at most the block
    that drafter was trained on (`dflash_config.block_size`: the anchor and block_size − 1
    drafts). Read from local configs without loading; what is not here is not checked."""
    limit = max_positions(spec)
    if limit is not None and drafts >= limit:
        raise PairError(f"{drafts} drafts do not fit in pair {name}'s {limit} positions")
    _, spec = resolve_pair(spec)
    config = config_dict(spec["drafter"]) if isinstance(spec.get("drafter"), str) else None
    block = ((config or {}).get("dflash_config") or {}).get("block_size")
    if dflash and isinstance(block, int) and drafts > block - 1:
        raise PairError(f"{drafts} is more than the {block - 1} drafts pair {name}'s DFlash drafter was "
                        f"trained for (its block_size {block}); at most {block - 1}")
