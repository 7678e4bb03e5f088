"""The fast tar walker (plain ustar members read without tarfile) must read every archive exactly as
tarfile does, and hand anything else to tarfile: same members, same refusals, same messages."""

from __future__ import annotations

import gzip
import io
import tarfile
from typing import Any

import pytest

from registry_gen import archive
from registry_gen.archive import read_archive_bytes
from registry_gen.errors import InvalidArchive
from registry_gen.settings import Limits
from tests.hostile.corpus import CASES


def outcome(data: bytes, limits: Limits) -> tuple[Any, ...]:
    try:
        r = read_archive_bytes(data, limits)
    except InvalidArchive as exc:
        return ("refused", type(exc).__name__, str(exc), vars(exc))
    return ("read", r.manifest, r.readme, r.readme_filename, r.file_count, r.unpacked_size, r.digests, r.files, r.converted)


def by_tarfile(data: bytes, limits: Limits, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    def refuse(*args: Any) -> Any:
        raise archive._NotPlain("forced")  # noqa: SLF001 - the reference reading, by tarfile alone

    with monkeypatch.context() as patch:
        patch.setattr(archive, "_iter_plain_tar", refuse)
        patch.setattr(archive, "_iter_plain_buffer", refuse)
        return outcome(data, limits)


def by_streaming_walker(data: bytes, limits: Limits, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """The reading before the whole-archive walk: the fast walker over the streaming inflate."""
    with monkeypatch.context() as patch:
        patch.setattr(archive, "_inflated_whole", lambda source, hashing, bound: None)
        return outcome(data, limits)


def ustar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return gzip.compress(raw.getvalue(), mtime=0)


def member(name: str, data: bytes | None = None, kind: bytes = tarfile.REGTYPE, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.mode = kind, mode
    info.size = len(data) if data is not None else 0
    return info, data


MANIFEST = b'{"name": "fast", "version": "1.0.0"}'
LONG_DIR = "package/" + "d" * 90 + "/" + "e" * 60  # past 100 bytes: ustar puts the head in `prefix`
PLAIN_ARCHIVES = {
    "files and folders": ustar([member("package", kind=tarfile.DIRTYPE), member("package/package.json", MANIFEST),
                                member("package/README.md", b"# fast\n" * 50), member("package/bin/x.js", b"x", mode=0o755)]),
    "ustar prefix": ustar([member("package/package.json", MANIFEST), member(LONG_DIR + "/f.js", b"1" * 700)]),
    "empty file and exact blocks": ustar([member("package/package.json", MANIFEST), member("package/e", b""),
                                          member("package/b", b"z" * 1024)]),
    "repeated member": ustar([member("package/package.json", MANIFEST), member("package/a.js", b"1"), member("package/a.js", b"22")]),
}


@pytest.mark.parametrize("name", sorted(PLAIN_ARCHIVES))
def test_plain_archives_are_read_without_tarfile_and_alike(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = PLAIN_ARCHIVES[name]
    expected = by_tarfile(data, Limits(), monkeypatch)
    assert expected[0] == "read"

    def no_tarfile(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a plain archive went to tarfile")

    monkeypatch.setattr(archive, "_iter_tar", no_tarfile)
    assert outcome(data, Limits()) == expected


@pytest.mark.parametrize("case", [c for c in CASES if c.suffix.endswith("gz")], ids=lambda c: c.id)
def test_hostile_archives_get_the_same_answer_as_from_tarfile(case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    data = case.make()
    assert outcome(data, case.limits) == by_tarfile(data, case.limits, monkeypatch)


@pytest.mark.parametrize("name", ["bad checksum", "symlink", "pax", "trailing garbage", "no end block"])
def test_what_the_walker_does_not_know_goes_to_tarfile(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = io.BytesIO()
    fmt = tarfile.PAX_FORMAT if name == "pax" else tarfile.USTAR_FORMAT
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
        info, body = member("package/package.json", MANIFEST)
        tar.addfile(info, io.BytesIO(body or b""))
        if name == "symlink":
            link = tarfile.TarInfo("package/link")
            link.type, link.linkname = tarfile.SYMTYPE, "package.json"
            tar.addfile(link)
        if name == "pax":
            info, body = member("package/ü.js", b"1")
            tar.addfile(info, io.BytesIO(body or b""))
    tar_bytes = bytearray(raw.getvalue())
    if name == "bad checksum":
        tar_bytes[0] ^= 1
    if name == "trailing garbage":
        tar_bytes += b"\x01" + bytes(511)
    if name == "no end block":
        tar_bytes = tar_bytes[: 512 + 512]
    data_gz = gzip.compress(bytes(tar_bytes), mtime=0)
    calls = []
    real = archive._iter_tar

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    expected = by_tarfile(data_gz, Limits(), monkeypatch)
    monkeypatch.setattr(archive, "_iter_tar", counted)
    assert outcome(data_gz, Limits()) == expected
    assert calls  # tarfile read it


@pytest.mark.parametrize("name", sorted(PLAIN_ARCHIVES))
def test_a_small_plain_archive_is_inflated_whole_and_read_alike(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # One zlib call over the whole archive, members sliced out of the inflated stream: no
    # streaming inflate, no block-by-block walk, and the same reading as tarfile's.
    data = PLAIN_ARCHIVES[name]
    expected = by_tarfile(data, Limits(), monkeypatch)

    def not_streamed(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a small plain archive was streamed")

    monkeypatch.setattr(archive, "_iter_plain_tar", not_streamed)
    monkeypatch.setattr(archive, "_iter_tar", not_streamed)
    assert outcome(data, Limits()) == expected


def _two_members(data: bytes) -> bytes:
    return data + gzip.compress(b"", mtime=0)


@pytest.mark.parametrize(
    "label, make, limits",
    [
        ("inflates past the bound", lambda: PLAIN_ARCHIVES["ustar prefix"], Limits(max_compression_ratio=0)),
        ("a second gzip member", lambda: _two_members(PLAIN_ARCHIVES["files and folders"]), Limits()),
        ("zero padding after the stream", lambda: PLAIN_ARCHIVES["files and folders"] + bytes(700), Limits()),
        ("bytes after the stream", lambda: PLAIN_ARCHIVES["files and folders"] + b"#!/bin/sh", Limits()),
        ("truncated stream", lambda: PLAIN_ARCHIVES["files and folders"][:-9], Limits()),
        ("just under the ratio's floor", lambda: ustar([member("package/package.json", MANIFEST), member("package/z", bytes(500_000))]),
         Limits(max_compression_ratio=8)),
        ("just over the ratio's floor", lambda: ustar([member("package/package.json", MANIFEST), member("package/z", bytes(530_000))]),
         Limits(max_compression_ratio=8)),
    ],
)
def test_the_whole_archive_walk_decides_as_the_streaming_one(label: str, make: Any, limits: Limits, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where reading whole does not apply (too big, several members, anything after the stream) the
    # streaming reader decides; where it does, no cap can decide otherwise than streaming would.
    data = make()
    assert outcome(data, limits) == by_streaming_walker(data, limits, monkeypatch) == by_tarfile(data, limits, monkeypatch)


def test_the_whole_walk_applies_only_below_every_cap() -> None:
    limits = Limits(max_compression_ratio=8, max_unpacked_bytes=1 << 30, max_archive_bytes=1 << 30)
    assert archive.whole_inflate_bound(limits) == archive.RATIO_FLOOR * 8
    assert archive.whole_inflate_bound(Limits(max_unpacked_bytes=1000)) == 1000
    assert archive.whole_inflate_bound(Limits(max_archive_bytes=10)) == 10


def _header(name: str, **fields: Any) -> bytes:
    info = tarfile.TarInfo(name)
    for field, value in fields.items():
        setattr(info, field, value)
    return info.tobuf(tarfile.USTAR_FORMAT)


def test_a_header_s_shared_number_fields_are_one_lookup_and_each_set_is_read_as_tarfile_does(monkeypatch: pytest.MonkeyPatch) -> None:
    # npm packs every member with the same uid, gid and mtime: their fields were looked up one at a
    # time (six lookups a header); one key per set of them is one.
    lookups: list[bytes] = []

    class Counting(dict[bytes, int]):
        def get(self, key: bytes, default: Any = None) -> Any:
            lookups.append(key)
            return super().get(key, default)

    monkeypatch.setattr(archive, "_SHARED_FIELDS", Counting())
    headers = [_header(f"package/f{i}.js", mtime=499162500, mode=0o644) for i in range(6)]
    assert [archive._plain_header(h) for h in headers] == [(f"package/f{i}.js", tarfile.REGTYPE, 0o644, 0) for i in range(6)]
    assert len(lookups) == len(headers)
    # Another mode or mtime is a set of its own, read again: its mode is its own, a bad number refused.
    assert archive._plain_header(_header("package/x", mtime=499162500, mode=0o755))[2] == 0o755
    bad = bytearray(_header("package/y", mtime=499162500, mode=0o644))
    bad[136:148] = b"99999999999\0"  # not octal: tarfile refuses it, so the walker sends it there
    bad[148:156] = b"%06o\0 " % (sum(bad[:148]) + 256 + sum(bad[156:]))
    with pytest.raises(archive._NotPlain, match="bad number"):
        archive._plain_header(bytes(bad))
