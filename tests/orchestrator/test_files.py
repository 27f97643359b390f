"""Writes are whole or absent."""

import os

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

