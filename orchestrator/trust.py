"""Remote code: a checkpoint's own Python, which transformers runs for a pair that asks for
`trust_remote_code`. Exports and sweep specs are files people share, so reading one never runs
code on its own say: a pair in it that asks is refused unless whoever runs the command passes
`--trust-remote-code` (docs/models.md, "Security")."""

from __future__ import annotations

import typer

TRUST = typer.Option(False, "--trust-remote-code",
                     help="Let a pair that asks for trust_remote_code run its checkpoints' own Python "
                     "(only for files and checkpoints you trust).")


def check_remote_code(pairs: dict[str, str | dict], allowed: bool, source: str) -> None:
    """ValueError naming the first pair of `pairs` (name -> pair spec) that asks for remote code
    (any value of `trust_remote_code` but false) unless `allowed`; with `allowed`, the value
    must be a boolean."""
    for name, spec in pairs.items():
        asked = spec.get("trust_remote_code", False) if isinstance(spec, dict) else False
        if asked is False:
            continue
        if not allowed:
            raise ValueError(f"{source}: pair {name}: trust_remote_code would run the checkpoint's own "
                             "Python; pass --trust-remote-code to allow it (only for files you trust)")
        if asked is not True:
            raise ValueError(f"{source}: pair {name}: trust_remote_code: {asked!r} is not true or false")
