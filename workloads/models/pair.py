"""Model pairs: a drafter + verifier, or one dual-mode network; loaded once per worker.

A pair comes from a bundled name (`toy`, `toy-self`) or a spec of local paths / hub ids:
`{"drafter": ..., "verifier": ...}` or `{"model": ...}` for a dual-mode network, with
optional `profile` (see profiles.py) and loading options for every model of the pair:
`dtype` (bfloat16 | float16 | float32), `device` (cpu, cuda, cuda:1, ...),
`attn_implementation` (eager | sdpa | flash_attention_2 ...), `trust_remote_code` (off
unless the spec asks). A local directory and a hub id go through the same
`from_pretrained` call (loading.py). Which family a spec's pair is of, and how that family
loads it, is families/'s; what can be known of a spec without loading it is pairspec.py's.
"""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from workloads.models.families import detect
from workloads.models.families.dflash import DFlashPair, DSparkPair
from workloads.models.families.eagle3 import Eagle3Pair
from workloads.models.families.selfspec import SelfPair
from workloads.models.families.twomodel import DraftModelPair, TwoModelPair
from workloads.models.loading import device_of, options_of
from workloads.models.pairspec import PairError, looks_like_path, resolve_pair

Pair = TwoModelPair | DraftModelPair | SelfPair | DFlashPair | DSparkPair | Eagle3Pair


def load_tokenizer(spec: str | dict) -> PreTrainedTokenizerBase:
    """The pair's tokenizer alone (the verifier's, or the dual-mode model's)."""
    _, spec = resolve_pair(spec)
    ref = spec.get("verifier", spec.get("model"))
    try:
        return AutoTokenizer.from_pretrained(str(Path(ref).expanduser()) if looks_like_path(ref) else ref)
    except OSError as err:
        raise PairError(f"pair: cannot load the tokenizer of {ref!r} ({type(err).__name__})") from None


def load_pair(spec: str | dict) -> Pair:
    """Load a bundled pair by name or a pair spec (see module docstring), as its family loads it."""
    name, spec = resolve_pair(spec)
    family, _ = detect(spec)
    return family.load(name, spec, options_of(spec), device_of(spec))
