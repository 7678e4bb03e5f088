"""A full build finds every archive of content/ before it reads them (~100 MB of paths at 1M
versions): past SPOOL_HELD paths they wait in a temporary table of the state, not in the heap.
A spooled build must read the same archives, in the same order, with the same results and errors."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest

from registry_gen.build import detect
from registry_gen.build import PathSpool, run_build
from registry_gen.state.sqlite_cache import BuildState
from registry_gen.settings import Settings
from tests.support import make_tarball


def _content(content: Path) -> None:
    for index in range(16):  # 34 archives, 17 packages: read and written by worker processes
        folder = content / f"group-{index % 3}"
        make_tarball(folder, f"spool-{index:02d}", "1.0.0")
        make_tarball(folder, f"spool-{index:02d}", "1.1.0", dependencies={f"spool-{(index + 1) % 16:02d}": "^1.0.0"})
    (content / "group-1" / "broken-1.0.0.tgz").write_bytes(b"not a tarball")
    make_tarball(content / "group-2", "lonely", "1.0.0", dependencies={"spool-03": "^1.0.0", "missing-dep": "^1.0.0"})
    for index in range(5):  # meta files: spooled past SPOOL_HELD too, read in path order
        meta = content / "group-0" / f"spool-{index:02d}" / "registry-meta.json"
        meta.parent.mkdir(parents=True)
        meta.write_text(json.dumps({"name": f"spool-{index:02d}", "dist-tags": {"latest": "1.0.0"}}))
    (content / "group-1" / "lonely").mkdir()
    (content / "group-1" / "lonely" / "registry-meta.json").write_text("{ not json")


def _tree(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _archives(settings: Settings) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(settings.state_file)) as db:
        rows = db.execute("SELECT path, name, version, shasum, error FROM archives ORDER BY path").fetchall()
        return rows + db.execute("SELECT path, name, error FROM metas ORDER BY path").fetchall()


def test_a_spooled_full_build_reads_and_writes_what_a_held_one_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {}
    content = tmp_path / "content"
    _content(content)
    for held in (3, 100_000):  # spooled 3 at a time, or all held; two trees and states
        monkeypatch.setattr(detect, "SPOOL_HELD", held)
        settings = Settings(content_dir=content, out_dir=tmp_path / str(held) / "public", base_url="http://127.0.0.1:9/")
        seen: list[tuple[str, int, int]] = []
        result = run_build(settings, progress=lambda phase, done, total: seen.append((phase, done, total)))
        read_progress = [(done, total) for phase, done, total in seen if phase == "read"]
        runs[held] = (result, _tree(settings.out_dir), _archives(settings), read_progress)
    (spooled, spooled_tree, spooled_rows, spooled_progress), (held, held_tree, held_rows, held_progress) = runs.values()
    assert spooled.archives_read == held.archives_read == 34
    assert [str(e) for e in spooled.errors] == [str(e) for e in held.errors] != []
    assert (spooled.packages, spooled.versions) == (held.packages, held.versions) == (17, 33)
    assert spooled_rows == held_rows and len(spooled_rows) == 34 + 6
    assert any("group-1/lonely/registry-meta.json" in str(e) for e in spooled.errors)
    assert spooled_tree == held_tree
    assert spooled_progress == held_progress and spooled_progress[-1] == (34, 34)
    # The writing workers got the present names (as one file): a present dependency is linked, a missing one not.
    page = spooled_tree["-/web/package/lonely/index.html"].decode()
    assert 'href="../../package/spool-03/index.html"' in page
    assert "missing-dep" in page and "package/missing-dep/" not in page


def test_the_spool_hands_out_every_path_once_in_path_order_and_then_drops_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detect, "SPOOL_HELD", 4)
    paths = [f"z/{i}.tgz" for i in range(7)] + ["a/b.tgz", "a/ä.tgz", "a/c.tgz", "m.tgz"]
    state = BuildState(tmp_path / "state.sqlite3")
    try:
        for _ in range(2):  # a second spool in the same connection starts empty
            spool, metas = PathSpool(state), PathSpool(state, "spooled_metas")  # two at once, apart
            for path in paths:
                spool.append(path)
                metas.append(path + ".meta")
            assert spool.spilled and len(spool.held) < 4 and metas.spilled
            assert list(spool) == sorted(paths) and len(spool) == len(paths)
            assert list(metas) == sorted(p + ".meta" for p in paths)
            assert not state.db.execute("SELECT name FROM sqlite_temp_master WHERE name LIKE 'spooled_%'").fetchall()
    finally:
        state.close()
    small = PathSpool(None)
    for path in reversed(paths):
        small.append(path)
    assert list(small) == sorted(paths) and not small.spilled
