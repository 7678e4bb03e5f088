"""Atomic writes: readers see the old file or the new one, never half of one, and no temp file stays."""

from __future__ import annotations

import errno
import io
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from registry_gen import writer
from registry_gen.writer import (
    TEMP_FOLDER,
    atomic_copy,
    atomic_write_bytes,
    atomic_write_stream,
    create_exclusive,
    remove_tree,
    sweep_temp_files,
    write_if_changed,
    write_streams_if_changed,
)


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

    def broken_replace(source: object, destination: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "disk full")

    monkeypatch.setattr(writer.os, "replace", broken_replace)
    monkeypatch.setattr(writer.os, "link", broken_replace)  # a new file is linked, not renamed, to its name
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


# The file systems a tree is written to here: the disk (ext4 on this machine) and a tmpfs.
_TMPFS = Path("/dev/shm")


@pytest.fixture(params=["disk", "tmpfs"])
def folder(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    if request.param == "disk":
        yield tmp_path
        return
    if not _TMPFS.is_dir():
        pytest.skip("no tmpfs at /dev/shm")
    with tempfile.TemporaryDirectory(dir=_TMPFS, prefix="writer-test-") as name:
        yield Path(name)


class _Calls:
    """The writer's os calls that name a file (the real calls still run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.created: list[str] = []  # paths opened with O_CREAT (a named new file)
        self.renamed: list[tuple[str, str]] = []
        self.linked: list[str] = []
        real_open, real_replace, real_link = os.open, os.replace, os.link

        def spy_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & os.O_CREAT:
                self.created.append(os.path.basename(path))
            return real_open(path, flags, *args, **kwargs)

        def spy_replace(source: Any, target: Any, **kwargs: Any) -> None:
            self.renamed.append((os.path.basename(source), os.path.basename(target)))
            real_replace(source, target, **kwargs)

        def spy_link(source: Any, target: Any, **kwargs: Any) -> None:
            self.linked.append(os.path.basename(target))
            real_link(source, target, **kwargs)

        monkeypatch.setattr(writer.os, "open", spy_open)
        monkeypatch.setattr(writer.os, "replace", spy_replace)
        monkeypatch.setattr(writer.os, "link", spy_link)


def test_a_new_file_appears_under_its_name_with_no_temp_name(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # O_TMPFILE + linkat: one directory entry per new file, no temp name, no rename.
    source = folder / "source.tgz"
    source.write_bytes(b"tarball bytes")
    calls = _Calls(monkeypatch)
    atomic_write_bytes(folder / "a" / "doc.json", b"{}")
    assert write_if_changed(folder / "a" / "b" / "index.html", b"<p>")
    atomic_copy(source, folder / "c" / "x.tgz", durable=True)
    assert (calls.created, calls.renamed) == ([], [])
    assert calls.linked == ["doc.json", "index.html", "x.tgz"]
    assert (folder / "a" / "doc.json").read_bytes() == b"{}"
    assert (folder / "a" / "b" / "index.html").read_bytes() == b"<p>"
    assert (folder / "c" / "x.tgz").read_bytes() == b"tarball bytes"
    for path in (folder / "a" / "doc.json", folder / "a" / "b" / "index.html", folder / "c" / "x.tgz"):
        assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in (folder / "a").iterdir()) == ["b", "doc.json"]


def test_a_replacement_goes_through_a_temp_name_and_a_rename(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = folder / "doc.json"
    target.write_bytes(b"old")
    calls = _Calls(monkeypatch)
    assert write_if_changed(target, b"new")
    atomic_write_bytes(target, b"newer")  # not told the file exists: its link is refused, then renamed
    assert [renamed for _, renamed in calls.renamed] == ["doc.json", "doc.json"]
    assert all(writer._OUR_TEMP.match(temp) for temp, _ in calls.renamed)
    assert target.read_bytes() == b"newer"
    assert sorted(p.name for p in folder.iterdir()) == ["doc.json"]


@pytest.mark.parametrize("refusal", [errno.EOPNOTSUPP, errno.EISDIR])
def test_a_file_system_refusing_o_tmpfile_gets_temp_and_rename(
    folder: Path, monkeypatch: pytest.MonkeyPatch, refusal: int
) -> None:
    real_open = os.open

    def no_tmpfile(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & writer._O_TMPFILE == writer._O_TMPFILE:
            raise OSError(refusal, os.strerror(refusal), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(writer.os, "open", no_tmpfile)
    calls: list[str] = []
    real_replace = os.replace
    monkeypatch.setattr(writer.os, "replace", lambda s, t: (calls.append(os.path.basename(t)), real_replace(s, t)))
    atomic_write_bytes(folder / "new" / "doc.json", b"one", durable=True)
    assert write_if_changed(folder / "new" / "other.json", b"two")
    assert calls == ["doc.json", "other.json"]
    assert (folder / "new" / "doc.json").read_bytes() == b"one"
    assert oct((folder / "new" / "other.json").stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in (folder / "new").iterdir()) == ["doc.json", "other.json"]


def test_a_system_without_proc_links_nothing_and_writes_through_a_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # /proc/self/fd/N is how the unnamed file is named; without /proc the link finds no source.
    def no_proc(source: Any, target: Any, **kwargs: Any) -> None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", source)

    monkeypatch.setattr(writer.os, "link", no_proc)
    synced: list[Path] = []
    real_fsync_dir = writer.fsync_dir
    monkeypatch.setattr(writer, "fsync_dir", lambda folder: (synced.append(folder), real_fsync_dir(folder))[1])
    atomic_write_bytes(tmp_path / "f" / "doc.json", b"bytes", durable=True)
    assert synced == [tmp_path / "f"]
    assert (tmp_path / "f" / "doc.json").read_bytes() == b"bytes"
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["doc.json"]


def test_a_reader_never_sees_a_partial_file(folder: Path) -> None:
    # New files (linked) and replacements (renamed) of 2 MB each, read as fast as possible meanwhile.
    size, target = 2 << 20, folder / "big.tgz"
    seen: list[bytes] = []
    stop = threading.Event()

    def read_all() -> None:
        while not stop.is_set():
            try:
                data = target.read_bytes()
            except FileNotFoundError:
                continue
            if len(data) != size or data.count(data[:1]) != size:
                seen.append(data[:16] + b"... %d bytes" % len(data))

    reader = threading.Thread(target=read_all)
    reader.start()
    try:
        for round in range(12):
            if round % 2 == 0:
                target.unlink(missing_ok=True)  # the next write makes a new file
            atomic_write_bytes(target, bytes([65 + round]) * size)
            assert target.read_bytes()[:1] == bytes([65 + round])
    finally:
        stop.set()
        reader.join(timeout=60)
    assert not reader.is_alive()
    assert seen == []


_UMASK_PROBE = """
import os, sys
os.umask(int(sys.argv[2], 8))
from pathlib import Path
from registry_gen import writer
fchmods = []
real = os.fchmod
os.fchmod = lambda fd, mode: (fchmods.append(mode), real(fd, mode))[1]
root = Path(sys.argv[1])
writer.atomic_write_bytes(root / "new" / "doc.json", b"1")
writer.write_if_changed(root / "new" / "doc.json", b"2")
print(len(fchmods), *(oct(p.stat().st_mode & 0o777) for p in sorted((root / "new").iterdir())))
"""


@pytest.mark.parametrize(("umask", "fchmods"), [("022", 0), ("077", 2)])
def test_files_are_0644_with_an_fchmod_only_where_the_umask_narrows_it(folder: Path, umask: str, fchmods: int) -> None:
    # The umask is read once per process: a process of its own for each.
    done = subprocess.run(
        [sys.executable, "-c", _UMASK_PROBE, str(folder), umask], capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(fchmods), "0o644"]


def test_new_folders_cost_a_mkdir_each_and_no_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A new package's folders: mkdir first, the parents only when it says they are missing
    # (os.makedirs stats every parent before each mkdir).
    (tmp_path / "flat").write_bytes(b"a file in the way")
    attempts: list[str] = []
    stats: list[str] = []
    real_mkdir, real_stat = os.mkdir, os.stat
    monkeypatch.setattr(os, "mkdir", lambda path, *a, **k: (attempts.append(os.path.relpath(path, tmp_path)), real_mkdir(path, *a, **k))[1])
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: (stats.append(str(path)), real_stat(path, *a, **k))[1])
    atomic_write_bytes(tmp_path / "-" / "web" / "p" / "v" / "1.0.0" / "index.html", b"<p>")
    atomic_write_bytes(tmp_path / "-" / "web" / "p" / "index.html", b"<p>")
    assert stats == []
    assert attempts == ["-/web/p/v/1.0.0", "-/web/p/v", "-/web/p", "-/web", "-", "-/web", "-/web/p", "-/web/p/v", "-/web/p/v/1.0.0"]
    with pytest.raises(NotADirectoryError):
        atomic_write_bytes(tmp_path / "flat" / "doc.json", b"{}")
    assert (tmp_path / "flat").read_bytes() == b"a file in the way"


# The start's sweep (issue 29 restarts): named temp files live in one folder per root.


def _tree(root: Path, folders: int) -> None:
    for index in range(folders):
        (root / f"p{index}" / "-").mkdir(parents=True)
        (root / f"p{index}" / "-" / "doc.json").write_bytes(b"{}")


def _listed_by(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    listed: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": (listed.append(str(path)), real_scandir(path))[1])
    return listed


def test_a_start_sweep_lists_one_folder_per_marked_root_however_big_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    roots = [tmp_path / "content", tmp_path / "public"]
    for root in roots:
        _tree(root, 40)
    assert sweep_temp_files(*roots) == []  # the first start: each root marked, then walked once
    assert all((root / TEMP_FOLDER).is_dir() for root in roots)
    listed = _listed_by(monkeypatch)
    assert sweep_temp_files(*roots, tmp_path / "absent") == []
    assert sorted(listed) == sorted(str(root / TEMP_FOLDER) for root in roots)


def test_an_unmarked_root_is_walked_once_for_what_older_versions_left_beside_their_targets(tmp_path: Path) -> None:
    root = tmp_path / "public"
    _tree(root, 3)
    old = root / "p1" / "-" / ".doc.json.0a1b2c3d.tmp"
    old.write_bytes(b"{half")
    assert sweep_temp_files(root) == [old]
    assert not old.exists() and (root / "p1" / "-" / "doc.json").read_bytes() == b"{}"
    old.write_bytes(b"{half")  # not something any write names once the root is marked: not looked for
    assert sweep_temp_files(root) == []


def _named_temp_folders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folder of every temp file renamed or linked into place."""
    folders: list[str] = []
    for name in ("replace", "link"):
        real = getattr(os, name)

        def moved(source: Any, target: Any, *args: Any, real: Any = real, **kwargs: Any) -> None:
            if str(source).endswith(".tmp"):
                folders.append(os.path.dirname(source))
            real(source, target, *args, **kwargs)

        monkeypatch.setattr(writer.os, name, moved)
    return folders


def test_every_named_temp_file_under_a_marked_root_is_in_its_temp_folder(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = folder / "public"
    (root / "a" / "b").mkdir(parents=True)
    sweep_temp_files(root)
    atomic_write_bytes(root / "a" / "b" / "doc.json", b"one")
    moved = _named_temp_folders(monkeypatch)
    assert write_if_changed(root / "a" / "b" / "doc.json", b"two")  # a replacement: temp + rename
    atomic_write_bytes(root / "a" / "b" / "doc.json", b"three")  # unnamed, then a link refused: temp + rename
    assert write_streams_if_changed({root / "a" / "all.json": [b"[", b"]"]}, gzip_level=9)  # streamed: temp + rename
    assert moved == [str(root / TEMP_FOLDER)] * 4
    assert (root / "a" / "b" / "doc.json").read_bytes() == b"three" and (root / "a" / "all.json").read_bytes() == b"[]"
    assert list((root / TEMP_FOLDER).iterdir()) == []


def test_a_temp_folder_removed_with_its_root_sends_temp_files_beside_their_targets(tmp_path: Path) -> None:
    root = tmp_path / "public"
    root.mkdir()
    sweep_temp_files(root)
    write_if_changed(root / "doc.json", b"one")
    assert write_if_changed(root / "doc.json", b"two")  # the temp folder is known now
    shutil.rmtree(root)
    atomic_write_bytes(root / "doc.json", b"new")
    assert write_if_changed(root / "doc.json", b"newer")
    assert (root / "doc.json").read_bytes() == b"newer"
    assert sorted(p.name for p in root.iterdir()) == ["doc.json"]  # no temp folder made again: only a sweep marks a root


def test_a_new_folder_under_a_marked_root_is_made_for_a_temp_file_renamed_into_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "public"
    root.mkdir()
    sweep_temp_files(root)
    real_open = os.open

    def no_tmpfile(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & writer._O_TMPFILE == writer._O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "no O_TMPFILE", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(writer.os, "open", no_tmpfile)
    atomic_write_bytes(root / "new" / "deep" / "doc.json", b"one", durable=True)
    assert create_exclusive(root / "other" / "key.tgz", b"two", durable=True)
    assert not create_exclusive(root / "other" / "key.tgz", b"three")
    assert (root / "new" / "deep" / "doc.json").read_bytes() == b"one" and (root / "other" / "key.tgz").read_bytes() == b"two"
    assert list((root / TEMP_FOLDER).iterdir()) == []


def test_create_exclusive_links_an_unnamed_file_and_never_replaces(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    named: list[str] = []
    real_open = os.open
    monkeypatch.setattr(writer.os, "open", lambda path, flags, *a, **k: (named.append(str(path)) if flags & os.O_CREAT else None, real_open(path, flags, *a, **k))[1])
    assert create_exclusive(folder / "p" / "p-1.0.0.tgz", b"first", durable=True)
    assert not create_exclusive(folder / "p" / "p-1.0.0.tgz", b"second")
    assert (folder / "p" / "p-1.0.0.tgz").read_bytes() == b"first"
    assert named == [] and sorted(p.name for p in (folder / "p").iterdir()) == ["p-1.0.0.tgz"]


def test_a_stream_is_written_whole_even_where_it_must_go_through_a_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without /proc the unnamed file cannot be linked: its bytes are copied, as a stream cannot be read twice.
    def no_proc(source: Any, target: Any, **kwargs: Any) -> None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", source)

    monkeypatch.setattr(writer.os, "link", no_proc)
    atomic_write_stream(tmp_path / "f" / "a.tgz", io.BytesIO(b"x" * 300_000), block=4096)
    assert (tmp_path / "f" / "a.tgz").read_bytes() == b"x" * 300_000
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["a.tgz"]
