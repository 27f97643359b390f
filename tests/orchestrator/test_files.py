"""Writes are whole or absent."""

import os
import stat

import pytest

from orchestrator import files
from orchestrator.files import write_atomic


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "spec.yaml"
    write_atomic(path, "old")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, "new " * 1000)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["spec.yaml"]


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "routes.yaml"
    write_atomic(path, "a")
    write_atomic(path, "b")
    assert path.read_text() == "b" and os.listdir(tmp_path) == ["routes.yaml"]



def test_a_write_gets_the_mode_a_plain_open_gives_not_a_private_one(tmp_path):
    """Exports are read by others (a serving config, a route table): 0666 less the umask."""
    plain = tmp_path / "plain"
    plain.write_text("a")
    written = tmp_path / "routes.yaml"
    write_atomic(written, "a")
    assert stat.S_IMODE(written.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
