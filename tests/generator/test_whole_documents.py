"""-/all and -/search.json list every package (tens of MB at 1M versions), so the build streams
them from the state to their files and gzip siblings instead of holding them whole. The streamed
bytes must be the ones the in-memory join made (and gzip_bytes over them), and a rebuild that
changes nothing in them must leave them alone."""

from __future__ import annotations

import contextlib
import gzip
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen import writer
from registry_gen.build import run_build
from registry_gen.settings import Settings
from registry_gen.writer import gzip_bytes, write_streams_if_changed
from tests.support import make_tarball

DOCUMENTS = ("-/all/index.html", "-/search.json")


def _in_memory_documents(settings: Settings) -> dict[str, bytes]:
    """What the build wrote before it streamed: every fragment read at once and joined in memory."""
    with contextlib.closing(sqlite3.connect(settings.state_file)) as db:
        (stamp,) = db.execute("SELECT MAX(NULLIF(modified, '')) FROM listings").fetchone()  # one row per listed package
        rows = db.execute("SELECT all_fragment, search_fragment FROM packages WHERE listed ORDER BY name").fetchall()
    stamp_json = json.dumps(stamp or "1970-01-01T00:00:00.000Z").encode()
    members = b",".join(row[0] for row in rows)
    searches = [row[1] for row in rows]
    return {
        "-/all/index.html": b'{"_updated":' + stamp_json + (b"," + members if members else b"") + b"}",
        "-/search.json": b'{"objects":[' + b",".join(searches) + b'],"total":' + str(len(searches)).encode() + b',"time":' + stamp_json + b"}",
    }


def _registry(settings: Settings, count: int) -> None:
    for index in range(count):
        make_tarball(
            settings.content_dir,
            f"demo-{index:03d}" if index % 3 else f"@scope/pkg-{index:03d}",
            "1.0.0",
            description=f"package {index} ☃ \"quoted\" line\nbreak",
            keywords=["ünïcode", f"k{index}"],
        )


def test_streamed_documents_are_the_bytes_the_in_memory_join_made(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "_BLOCK", 97)  # many blocks per document, cut mid-fragment
    _registry(settings, 40)
    result = run_build(settings)
    assert result.errors == []
    expected = _in_memory_documents(settings)
    for relative in DOCUMENTS:
        data = (settings.out_dir / relative).read_bytes()
        assert data == expected[relative]
        assert (settings.out_dir / (relative + ".gz")).read_bytes() == gzip_bytes(expected[relative])
        assert {relative, relative + ".gz"} <= set(result.written)
    search = json.loads((settings.out_dir / "-/search.json").read_bytes())
    assert search["total"] == len(search["objects"]) == 40
    assert len(json.loads((settings.out_dir / "-/all/index.html").read_bytes())) == 41  # and _updated


def test_a_rewrite_with_the_same_bytes_leaves_the_documents_alone(settings: Settings) -> None:
    _registry(settings, 5)
    run_build(settings)
    paths = [settings.out_dir / relative for relative in DOCUMENTS]
    paths += [path.with_name(path.name + ".gz") for path in paths]
    before = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in paths}
    again = run_build(settings, full=True)  # every package written again, so both documents too
    assert again.errors == []
    assert not {str(path.relative_to(settings.out_dir)) for path in paths} & set(again.written)
    assert {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in paths} == before
    assert not list(settings.out_dir.rglob("*.tmp"))

    make_tarball(settings.content_dir, "demo-001", "1.1.0", description="changed")
    changed = run_build(settings)
    assert {relative + suffix for relative in DOCUMENTS for suffix in ("", ".gz")} <= set(changed.written)
    assert json.loads((settings.out_dir / "-/all/index.html").read_bytes())["demo-001"]["description"] == "changed"


def test_no_listed_package_streams_the_empty_documents(settings: Settings) -> None:
    settings.content_dir.joinpath("README.txt").write_text("no archives yet")
    run_build(settings)
    assert _in_memory_documents(settings) == {relative: (settings.out_dir / relative).read_bytes() for relative in DOCUMENTS}
    assert json.loads((settings.out_dir / "-/search.json").read_bytes())["total"] == 0


def test_streams_equal_their_whole_bytes_and_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "_BLOCK", 1000)
    pieces = [f'"piece {i}" {"x" * (i % 50)} ☃'.encode() for i in range(2000)]
    other = [b"short"]
    first, second = tmp_path / "deep" / "one.json", tmp_path / "two.json"
    written = write_streams_if_changed({first: iter(pieces), second: iter(other)}, gzip_level=9)
    assert written == [first, first.with_name("one.json.gz"), second, second.with_name("two.json.gz")]
    assert first.read_bytes() == b"".join(pieces)
    assert first.with_name("one.json.gz").read_bytes() == gzip_bytes(b"".join(pieces))
    assert gzip.decompress(second.with_name("two.json.gz").read_bytes()) == b"short"
    assert oct(first.stat().st_mode & 0o777) == "0o644"
    assert write_streams_if_changed({first: iter(pieces), second: [b"sh", b"ort"]}, gzip_level=9) == []
    assert write_streams_if_changed({second: [b"longer"]}) == [second]
    assert second.read_bytes() == b"longer"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["one.json", "one.json.gz", "two.json", "two.json.gz"]


def test_a_failing_stream_keeps_every_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    first, second = tmp_path / "one.json", tmp_path / "two.json"
    write_streams_if_changed({first: [b"old one"], second: [b"old two"]}, gzip_level=9)

    def broken() -> Iterator[bytes]:
        yield b"new"
        raise OSError("state unreadable")

    with pytest.raises(OSError, match="state unreadable"):
        write_streams_if_changed({first: [b"new one"], second: broken()}, gzip_level=9)
    assert (first.read_bytes(), second.read_bytes()) == (b"old one", b"old two")
    assert gzip.decompress(first.with_name("one.json.gz").read_bytes()) == b"old one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.json", "one.json.gz", "two.json", "two.json.gz"]


def test_a_failing_replace_keeps_every_old_file_and_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "one.json"
    write_streams_if_changed({target: [b"old"]}, gzip_level=9)

    def broken_replace(source: object, destination: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(writer.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_streams_if_changed({target: [b"new ", b"bytes"]}, gzip_level=9)
    assert target.read_bytes() == b"old" and gzip.decompress(target.with_name("one.json.gz").read_bytes()) == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.json", "one.json.gz"]
