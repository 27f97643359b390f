"""Files the control plane writes are either whole or absent: a crash or a full disk mid-write
leaves the previous version (or nothing), never half a spec, cache entry or export."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

# os.umask is read only by setting it: read once at import, before any thread writes files
UMASK = os.umask(0o077)
os.umask(UMASK)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, flush it to disk, then rename it over
    `path` (a rename within one directory is atomic). The file gets the mode a plain `open`
    would give it (0666 less the umask), not mkstemp's private 0600."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~UMASK)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def write_yaml(path: Path, data) -> None:
    """`data` as YAML, keys in their order and no line folded (an export's first line, its
    `serve:` command, stays one line however long), written whole (`write_atomic`)."""
    import yaml

    write_atomic(path, yaml.safe_dump(data, sort_keys=False, width=float("inf")))
