"""The incremental build never reopens an archive it has already read (issue 7, acceptance 3).

Counts every `open()` of a file under content/ (the reader's and the tarball copy's alike) while
a build runs: a correctness test, not a timing. The speed itself is measured by `make bench`.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from registry_gen.build import run_build
from registry_gen.state import open_state
from registry_gen.settings import Settings
from tests.support import make_tarball

OLD_NS = 1_600_000_000 * 10**9


class OpenCounter:
    """Records the archives of content/ that get opened, by path relative to content/."""

    def __init__(self, content_dir: Path):
        self.root = str(content_dir.resolve()) + os.sep
        self.opened: list[str] = []

    def __call__(self, real_open: Any) -> Any:
        def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, (str, os.PathLike)):
                path = os.path.abspath(os.fspath(file))
                if path.startswith(self.root) and path.endswith((".tgz", ".zip", ".tar.gz")):
                    self.opened.append(path[len(self.root) :].replace(os.sep, "/"))
            return real_open(file, *args, **kwargs)

        return counting_open


@pytest.fixture
def counter(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenCounter]:
    counting = OpenCounter(settings.content_dir)
    monkeypatch.setattr(builtins, "open", counting(builtins.open))
    yield counting


def _age(path: Path, ns: int = OLD_NS) -> Path:
    os.utime(path, ns=(ns, ns))
    return path


def _registry(settings: Settings) -> list[Path]:
    """Six packages, three versions each, one scoped, one with a meta file."""
    archives = []
    for index in range(6):
        name = f"@demo/pkg{index}" if index == 0 else f"demo-pkg{index}"
        for minor in range(3):
            archives.append(_age(make_tarball(settings.content_dir / name.lstrip("@"), name, f"1.{minor}.0")))
    meta = settings.content_dir / "demo-pkg1" / "registry-meta.json"
    meta.write_text(json.dumps({"name": "demo-pkg1", "dist-tags": {"latest": "1.1.0"}}))
    _age(meta)
    return archives


def _tree(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and ".registry-gen" not in p.relative_to(out).parts
    }


def test_a_new_archive_is_the_only_archive_opened(settings: Settings, counter: OpenCounter) -> None:
    archives = _registry(settings)
    first = run_build(settings)
    assert first.archives_read == len(archives) == 18
    counter.opened.clear()

    new = _age(make_tarball(settings.content_dir / "demo-pkg2", "demo-pkg2", "2.0.0"), OLD_NS + 10**9)
    result = run_build(settings)

    assert result.errors == []
    assert result.archives_read == 1
    assert result.rebuilt_packages == ["demo-pkg2"]
    # Opened twice: once to read it, once to copy it into the tree. No other archive at all.
    assert set(counter.opened) == {new.relative_to(settings.content_dir).as_posix()}
    assert len(counter.opened) == 2


def test_a_build_with_nothing_changed_opens_no_archive(settings: Settings, counter: OpenCounter) -> None:
    _registry(settings)
    run_build(settings)
    counter.opened.clear()
    result = run_build(settings)
    assert (result.archives_read, result.written, result.rebuilt_packages) == (0, [], [])
    assert counter.opened == []


def test_touching_one_archive_reopens_that_one_only(settings: Settings, counter: OpenCounter) -> None:
    archives = _registry(settings)
    run_build(settings)
    counter.opened.clear()
    touched = _age(archives[7], OLD_NS + 5 * 10**9)
    result = run_build(settings)
    assert result.archives_read == 1
    assert counter.opened == [touched.relative_to(settings.content_dir).as_posix()]
    assert result.written == []  # same bytes: nothing to rewrite


def test_a_meta_change_and_a_removal_open_no_archive(settings: Settings, counter: OpenCounter) -> None:
    archives = _registry(settings)
    run_build(settings)
    counter.opened.clear()
    (settings.content_dir / "demo-pkg1" / "registry-meta.json").write_text(json.dumps({"name": "demo-pkg1"}))
    archives[-1].unlink()  # demo-pkg5@1.2.0
    result = run_build(settings)
    assert counter.opened == []
    assert result.archives_read == 0
    assert sorted(result.rebuilt_packages) == ["demo-pkg1", "demo-pkg5"]
    assert "demo-pkg5/-/demo-pkg5-1.2.0.tgz" in result.removed


def test_a_hinted_build_looks_only_at_the_hinted_paths(
    settings: Settings, counter: OpenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    _registry(settings)
    run_build(settings)
    counter.opened.clear()
    new = _age(make_tarball(settings.content_dir / "demo-pkg3", "demo-pkg3", "2.0.0"), OLD_NS + 10**9)

    real_scandir = os.scandir
    content = str(settings.content_dir.resolve())

    def no_walk(path: Any = ".") -> Any:
        if os.path.abspath(os.fspath(path)).startswith(content):
            raise AssertionError("a hinted build must not walk content/")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", no_walk)
    result = run_build(settings, changed=[new])
    assert result.archives_read == 1
    assert set(counter.opened) == {new.relative_to(settings.content_dir).as_posix()}
    assert result.rebuilt_packages == ["demo-pkg3"]
    monkeypatch.undo()
    # The hint and a full stat walk agree: nothing is left for the walk to find.
    again = run_build(settings)
    assert (again.archives_read, again.written) == (0, [])


def test_incremental_builds_end_with_the_tree_a_fresh_build_makes(settings: Settings, tmp_path: Path) -> None:
    archives = _registry(settings)
    run_build(settings)
    _age(make_tarball(settings.content_dir / "demo-pkg2", "demo-pkg2", "2.0.0"), OLD_NS + 10**9)
    run_build(settings)
    archives[0].unlink()
    (settings.content_dir / "demo-pkg1" / "registry-meta.json").write_text(json.dumps({"name": "demo-pkg1"}))
    run_build(settings)
    _age(make_tarball(settings.content_dir / "late", "demo-late", "0.1.0", dependencies={"demo-pkg2": "^2.0.0"}))
    run_build(settings)

    fresh = settings.with_updates(out_dir=tmp_path / "fresh")
    run_build(fresh)
    assert _tree(settings.out_dir) == _tree(fresh.out_dir)


def test_index_documents_joined_from_pieces_are_the_bytes_dumps_makes() -> None:
    """The build keeps each package's serialised piece of -/all and -/v1/search and streams them,
    so an incremental build does not serialise every package again: same bytes required."""
    from registry_gen.packument import (
        all_index,
        all_index_chunks,
        all_index_fragment,
        dumps,
        search_document,
        search_document_chunks,
        search_fragment,
        search_object,
    )

    summaries = [
        {
            "name": name,
            "description": description,
            "version": "1.0.0",
            "dist-tags": {"latest": "1.0.0"},
            "keywords": ["ünïcode", "a\"quote"],
            "maintainers": [{"name": "zoë", "email": "z@example.org"}],
            "modified": "2020-01-01T00:00:00.000Z",
            "date": "2020-01-01T00:00:00.000Z",
            "license": "MIT",
            "versions": 1,
            "deprecated": None,
        }
        for name, description in (("@scope/a", "snow ☃"), ("b", ""), ("c-d", "line\nbreak"))
    ]
    base_url = "http://127.0.0.1:9/"
    stamp = "2021-02-03T04:05:06.000Z"
    joined = b"".join(all_index_chunks(stamp, map(all_index_fragment, summaries)))
    assert joined == dumps({"_updated": stamp, **all_index(summaries)})
    objects = [search_object(s, base_url) for s in summaries]
    pieces = (search_fragment(s, base_url) for s in summaries)  # a generator: total is counted as they go by
    assert b"".join(search_document_chunks(pieces, stamp)) == dumps(search_document(objects, stamp))
    assert b"".join(all_index_chunks(stamp, [])) == dumps({"_updated": stamp})
    assert b"".join(search_document_chunks([], stamp)) == dumps(search_document([], stamp))


def test_the_manifest_cache_forgets_removed_archives(settings: Settings) -> None:
    archives = _registry(settings)
    run_build(settings)
    def cached(shasum: str) -> bool:
        cache = open_state(settings).manifests(readonly=True)
        try:
            return cache.manifest(shasum) is not None
        finally:
            cache.close()

    gone = hashlib.sha1(archives[4].read_bytes()).hexdigest()
    assert cached(gone)
    archives[4].unlink()
    run_build(settings)
    assert not cached(gone)
    assert cached(hashlib.sha1(archives[5].read_bytes()).hexdigest())
