"""User-facing errors: one line naming the offending field, exit code 2, no traceback."""

from __future__ import annotations

import difflib
import functools
import math
import sys
from collections.abc import Callable
from typing import TypeVar

import typer

F = TypeVar("F", bound=Callable)

# ValueError covers PairError, task and config validation errors from the data plane.
USER_ERRORS = (ValueError, FileNotFoundError)


class RunFailure(RuntimeError):
    """Valid input whose run failed for a reason outside the tool (a lost Ray node): one line,
    exit code 1."""


def user_errors(fn: F) -> F:
    """Turn the data plane's validation errors into `error: <message>` and exit code 2, and a
    serving engine or Ray cluster that failed under valid input (EngineFailure, RunFailure)
    into the same line and exit code 1."""
    from workloads.serving.config import EngineFailure

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as err:
            print(f"error: {err}", file=sys.stderr)
            raise typer.Exit(2) from None
        except (EngineFailure, RunFailure) as err:
            print(f"error: {err}", file=sys.stderr)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def did_you_mean(word: str, known) -> str:
    """` (did you mean 'x'?)` for the closest of `known` to a misspelt `word`, else ''."""
    close = difflib.get_close_matches(word, [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def misplaced(key: str, where: str, model) -> str:
    """For a key a file of `model` (a pydantic model) may not hold at dotted path `where`: where
    that key belongs when the model holds it elsewhere (` (it belongs at serving.slo)`), else
    the closest key it holds (`did_you_mean`)."""
    paths = field_paths(model)
    elsewhere = [p for p in paths if p.rpartition(".")[2] == key and p != where]
    if elsewhere:
        return f" (it belongs at {' or '.join(sorted(elsewhere))})"
    return did_you_mean(key, {p.rpartition(".")[2] for p in paths})


def field_paths(model, prefix: str = "") -> set[str]:
    """The dotted path of every key a pydantic `model` holds, at any depth (the models nested in
    its fields)."""
    from pydantic import BaseModel

    paths = set()
    for name, field in model.model_fields.items():
        paths.add(prefix + name)
        for kind in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                paths |= field_paths(kind, f"{prefix}{name}.")
    return paths


def count_text(n: float) -> str:
    """A count for a message: 1,000,001; 1e+20 past what a message should spell out."""
    return f"{n:,.0f}" if n < 1e15 else f"{n:.3g}" if math.isfinite(n) else "over 1e+308"


def shorten(text: str, limit: int = 200) -> str:
    """A message cut to `limit` characters (a value's repr can be long)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
