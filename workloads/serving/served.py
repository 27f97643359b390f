"""What a started vLLM server says it runs with, held to what it was asked to run with.

vLLM's API server logs the arguments that differ from its defaults once it has parsed them
(`non-default args: {...}`, a Python literal), from the command line and from a
`--config FILE` alike. `vllm serve --config` drops a false boolean whose `--no-` form the
top-level parser does not know (`enable-prefix-caching: false` is ignored; the `no-` key is
read), so an export is served as measured only if every option it writes reaches these
arguments: `differences` names each one that did not."""

from __future__ import annotations

import ast
import re

_LOGGED = re.compile(r"non-default args: (\{.*\})\s*$", re.MULTILINE)
_PLACE = ("host", "port")  # where it listens: not an engine setting
_MISSING = object()


def logged_args(log: str) -> dict | None:
    """The non-default arguments a server's log shows (where it listens left out); None when
    the log holds no such line or it does not parse."""
    found = _LOGGED.search(log)
    if found is None:
        return None
    try:
        args = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        return None
    return {k: v for k, v in args.items() if k not in _PLACE} if isinstance(args, dict) else None


def option_args(options: dict) -> dict:
    """`vllm serve --config` options (long option names; `no-X: true` for a false X) as the
    arguments vLLM logs them: `a-b` -> `a_b`, `no-a-b: true` -> `a_b: False`."""
    args = {}
    for key, value in options.items():
        if key.startswith("no-") and value is True:
            args[key.removeprefix("no-").replace("-", "_")] = False
        else:
            args[key.replace("-", "_")] = value
    return args


def differences(wanted: dict, served: dict) -> list[str]:
    """Each argument of `wanted` that `served` lacks or holds otherwise: `name: wanted W,
    served S`."""
    return [f"{key}: wanted {value!r}, served {served[key]!r}" if key in served
            else f"{key}: wanted {value!r}, served vLLM's default" for key, value in wanted.items()
            if served.get(key, _MISSING) != value]
