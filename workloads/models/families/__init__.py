"""The drafter families, one module each, and the one place a pair spec is matched to its
family and kind: `FAMILIES`, in the order a spec is tried (a dual-mode model; an EAGLE-3, then
a DFlash drafter, both read from their configs; else a two-model pair). A new family: its
module here (its pairs, how a spec is recognised and loaded, its serving settings), a line in
`FAMILIES`, its kinds in workloads/decoding/kinds.py, and its tests; the pair-kind contract
test (tests/workloads/decoding/test_kinds.py) runs every registered kind through a bundled pair.
"""

from __future__ import annotations

from pathlib import Path

from workloads.decoding.kinds import PairKind
from workloads.models.families.dflash import DFlashFamily
from workloads.models.families.eagle3 import Eagle3Family
from workloads.models.families.family import Family
from workloads.models.families.selfspec import SelfSpec
from workloads.models.families.twomodel import TwoModel
from workloads.models.pairspec import (
    OPTIONS,
    PairError,
    cached_snapshot,
    check_model_dir,
    looks_like_path,
    resolve_pair,
)

FAMILIES: tuple[Family, ...] = (SelfSpec(), Eagle3Family(), DFlashFamily(), TwoModel())


def family_of(kind: PairKind) -> Family:
    """The family whose pairs are of `kind`."""
    return next(f for f in FAMILIES if kind in f.kinds)


def model_keys(spec: dict) -> set[str]:
    """A resolved pair spec's model keys: {drafter, verifier} or {model}; PairError otherwise."""
    keys = set(spec) - {"name", "profile", *OPTIONS}
    if keys not in ({"model"}, {"drafter", "verifier"}):
        raise PairError(
            f"pair: expected keys {{drafter, verifier}} or {{model}}, got {{{', '.join(sorted(keys))}}}")
    return keys


def detect(spec: dict) -> tuple[Family, PairKind]:
    """The family and kind of a resolved pair spec, read from the spec and local configs."""
    keys = model_keys(spec)
    return next((f, kind) for f in FAMILIES if (kind := f.kind_of(keys, spec)) is not None)


def pair_kind(spec: str | dict) -> PairKind:
    """The kind of a pair spec (workloads.decoding.kinds), checked without loading any weights:
    local paths, and hub ids already in the local hub cache, must be loadable model directories
    (`check_model_dir`) and a DFlash drafter's config a DFlash one (`check_dflash_config`);
    other hub ids are checked when loaded."""
    _, spec = resolve_pair(spec)
    for field in sorted(model_keys(spec)):
        ref = spec[field]
        if not isinstance(ref, str) or not ref:
            raise PairError(f"pair.{field}: expected a local path or hub id, got {ref!r}")
        if looks_like_path(ref):
            if not (Path(ref).expanduser() / "config.json").is_file():
                raise PairError(f"pair.{field}: {ref} is not a model directory (no config.json there)")
            check_model_dir(field, Path(ref).expanduser())
        elif (cached := cached_snapshot(ref)) is not None:
            check_model_dir(field, cached)
    return detect(spec)[1]
