"""Model pairs: a drafter + verifier, or one dual-mode network; loaded once per worker.

A pair comes from a bundled name (`toy`, `toy-self`) or a spec of local paths / hub ids:
`{"drafter": ..., "verifier": ...}` or `{"model": ...}` for a dual-mode network.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

TOY_DIR = Path(__file__).parent / "toy"
BUNDLED = {
    "toy": {"drafter": str(TOY_DIR / "drafter"), "verifier": str(TOY_DIR / "verifier")},
    "toy-self": {"model": str(TOY_DIR / "self")},
}


class PairError(ValueError):
    """A pair spec that cannot be loaded; the message names the offending field."""


@dataclass(frozen=True)
class DiffusionProfile:
    """How a network drafts in diffusion mode.

    shifted: Dream-style, the row at position i - 1 predicts token i; otherwise (LLaDA,
    Nemotron) a mask row predicts its own position.
    any_order: the diffusion mode is trained as an any-order verifier (SetDLM-style), so
    `verify_order: confidence` may use it.
    """

    mask_token_id: int
    shifted: bool
    any_order: bool = False


@dataclass(frozen=True)
class TwoModelPair:
    name: str
    drafter: PreTrainedModel
    verifier: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    profile: DiffusionProfile


@dataclass(frozen=True)
class SelfPair:
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    profile: DiffusionProfile


Pair = TwoModelPair | SelfPair


def _looks_like_path(ref: str) -> bool:
    return ref.startswith(("/", ".", "~")) or Path(ref).exists()


def _load(field: str, ref: str):
    """Load (model, tokenizer) from a local directory or a hub id, or raise PairError."""
    if not isinstance(ref, str) or not ref:
        raise PairError(f"pair.{field}: expected a local path or hub id, got {ref!r}")
    if _looks_like_path(ref):
        path = Path(ref).expanduser()
        if not (path / "config.json").is_file():
            raise PairError(f"pair.{field}: {ref} is not a model directory (no config.json there)")
        ref = str(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(ref)
        tokenizer = AutoTokenizer.from_pretrained(ref)
    except OSError as err:
        raise PairError(
            f"pair.{field}: cannot load {ref!r} ({type(err).__name__}); offline, download it "
            f"first (huggingface-cli download {ref}) or pass a local path"
        ) from None
    model.eval()
    return model, tokenizer


def _profile(field: str, model: PreTrainedModel, tokenizer, override: dict | None) -> DiffusionProfile:
    declared = dict(getattr(model.config, "specsweep", None) or {})
    declared.update(override or {})
    mask = declared.get("mask_token_id", tokenizer.mask_token_id)
    if mask is None:
        raise PairError(f"pair.{field}: no mask token; set profile.mask_token_id in the pair spec")
    if "shift" not in declared:
        raise PairError(f"pair.{field}: say whether logits are shifted (profile.shift: true|false)")
    return DiffusionProfile(mask_token_id=int(mask), shifted=bool(declared["shift"]),
                            any_order=bool(declared.get("any_order", False)))


def _check_tokenizers(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase) -> None:
    if a.get_vocab() != b.get_vocab():
        raise PairError("pair: drafter and verifier tokenizers differ in vocabulary; they must match")
    for name in ("eos_token_id", "pad_token_id"):
        if getattr(a, name) != getattr(b, name):
            raise PairError(f"pair: drafter and verifier tokenizers differ in {name}")


def _resolve(spec: str | dict) -> tuple[str, dict]:
    if not isinstance(spec, str | dict):
        raise PairError(f"pair: expected a name or a mapping, got {type(spec).__name__}")
    name = spec if isinstance(spec, str) else spec.get("name", "custom")
    if isinstance(spec, str):
        if spec not in BUNDLED:
            raise PairError(f"pair: unknown pair {spec!r}; bundled pairs: {', '.join(BUNDLED)}")
        spec = BUNDLED[spec]
    return name, spec


def pair_kind(spec: str | dict) -> str:
    """`self` or `two-model` for a pair spec, checked without loading any weights: local
    paths must be model directories; hub ids are only checked when loaded."""
    _, spec = _resolve(spec)
    keys = set(spec) - {"name", "profile"}
    if keys not in ({"model"}, {"drafter", "verifier"}):
        raise PairError(
            f"pair: expected keys {{drafter, verifier}} or {{model}}, got {{{', '.join(sorted(keys))}}}")
    for field in sorted(keys):
        ref = spec[field]
        if not isinstance(ref, str) or not ref:
            raise PairError(f"pair.{field}: expected a local path or hub id, got {ref!r}")
        if _looks_like_path(ref) and not (Path(ref).expanduser() / "config.json").is_file():
            raise PairError(f"pair.{field}: {ref} is not a model directory (no config.json there)")
    return "self" if keys == {"model"} else "two-model"


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
    keys = set(spec) - {"name", "profile"}
    if keys == {"model"}:
        model, tok = _load("model", spec["model"])
        return SelfPair(name, model, tok, _profile("model", model, tok, spec.get("profile")))
    if keys == {"drafter", "verifier"}:
        verifier, vtok = _load("verifier", spec["verifier"])
        drafter, dtok = _load("drafter", spec["drafter"])
        _check_tokenizers(dtok, vtok)
        return TwoModelPair(name, drafter, verifier, vtok,
                            _profile("drafter", drafter, dtok, spec.get("profile")))
    raise PairError(
        f"pair: expected keys {{drafter, verifier}} or {{model}}, got {{{', '.join(sorted(keys))}}}"
    )
