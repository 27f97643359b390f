"""A spec file read into a SweepSpec: read as a bounded document (orchestrator.documents),
then parsed and checked (spec.parse_spec)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.documents import DocumentError, read_document
from orchestrator.spec.sweep import SpecError, SweepSpec, parse_spec


def load_spec(path: str | Path) -> SweepSpec:
    try:
        data = read_document(path, "spec")
    except DocumentError as err:
        raise SpecError(str(err)) from None
    return parse_spec(data, str(path))
