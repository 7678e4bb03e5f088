"""Atomic writes: readers see the old file or the new one, never half of one, and no temp file stays."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from registry_gen import writer
from registry_gen.writer import atomic_copy, atomic_write_bytes, remove_tree, write_if_changed


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "file.json"
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.json"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_a_failed_write_keeps_the_old_file_and_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "file.json"
    target.write_bytes(b"old")

    def broken_replace(source: object, destination: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(writer.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"new")
    with pytest.raises(OSError, match="disk full"):
        atomic_copy(target, tmp_path / "copy.tgz")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.json"]


def test_write_if_changed_keeps_identity_of_unchanged_files(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    assert write_if_changed(target, b"{}")
    before = target.stat()
    assert not write_if_changed(target, b"{}")
    after = target.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert write_if_changed(target, b"[]")
    assert target.read_bytes() == b"[]"


def test_remove_tree_prunes_empty_parents_but_never_leaves_root(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_bytes(b"x")
    (tmp_path / "keep").write_bytes(b"x")
    assert remove_tree(tmp_path, "a/b/f")
    assert sorted(os.listdir(tmp_path)) == ["keep"]
    assert not remove_tree(tmp_path, "a/b/f")
    with pytest.raises(ValueError, match="outside"):
        remove_tree(tmp_path, "../elsewhere")


def test_remove_tree_of_an_absent_path_touches_nothing(tmp_path: Path) -> None:
    # A publish asks this of leaf folders that are usually absent: no parent is listed or pruned.
    (tmp_path / "search" / "empty").mkdir(parents=True)
    assert not remove_tree(tmp_path, "search/empty/leaf")
    assert (tmp_path / "search" / "empty").is_dir()
    (tmp_path / "search" / "empty" / "leaf").write_bytes(b"x")
    assert remove_tree(tmp_path, "search/empty/leaf")
    assert not (tmp_path / "search").exists()
