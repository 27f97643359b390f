"""Writes are whole or absent."""

import os

import pytest

from orchestrator import files
from orchestrator.files import write_atomic
from orchestrator.sweep.driver import Driver


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


def test_an_unreadable_shard_cache_entry_is_decoded_again(tmp_path):
    half = tmp_path / "shard.json"
    half.write_text('{"records": [{"ind')  # what a crash mid-write once left
    assert Driver._read_cache(half) is None
    assert Driver._read_cache(tmp_path / "absent.json") is None
    write_atomic(half, '{"records": []}')
    assert Driver._read_cache(half) == {"records": []}
