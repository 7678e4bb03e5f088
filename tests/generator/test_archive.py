"""The archive reader: byte-for-byte npm tarballs, deterministic repacking, refusal of unsafe archives."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Callable

import pytest

from registry_gen.archive import NPM_FIXED_MTIME, build_npm_tarball, compute_digests, read_archive_bytes
from registry_gen.errors import InvalidArchive
from registry_gen.settings import Limits
from tests.demo_packages import deterministic_zip, npm_tarball

MANIFEST = {"name": "demo-pkg", "version": "1.0.0", "description": "x"}
FILES = {
    "index.js": "module.exports = 1;\n",
    "README.md": "# demo-pkg\n\nHello.\n",
    "bin/run.js": "#!/usr/bin/env node\n",
}


def _members(tarball: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        return tar.getmembers()


def _member_bytes(tarball: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        handle = tar.extractfile(name)
        assert handle is not None
        return handle.read()


def _raw_tgz(entries: list[tuple[str, bytes]], *, mtime: int = 1_700_000_000) -> bytes:
    """A tarball as other tools make it (any prefix, real mtimes), not through build_npm_tarball."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = mtime
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _expected_digests(data: bytes) -> tuple[str, str]:
    return hashlib.sha1(data).hexdigest(), "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def test_npm_tarball_is_served_byte_for_byte() -> None:
    tarball = npm_tarball(MANIFEST, FILES, executables=["bin/run.js"])
    contents = read_archive_bytes(tarball)
    assert contents.converted is None
    assert (contents.digests.shasum, contents.digests.integrity) == _expected_digests(tarball)
    assert contents.digests.size == len(tarball)
    assert contents.manifest == MANIFEST
    assert contents.readme == FILES["README.md"]
    assert contents.readme_filename == "README.md"
    assert contents.file_count == 4
    manifest_size = len((json.dumps(MANIFEST, indent=2) + "\n").encode())
    assert contents.unpacked_size == manifest_size + sum(len(v.encode()) for v in FILES.values())


def test_tarball_with_another_top_folder_is_served_as_is() -> None:
    # GitHub-style archives put everything under "<repo>-<sha>/": npm strips any single top folder.
    tarball = _raw_tgz([("thing-abc123/package.json", json.dumps(MANIFEST).encode()), ("thing-abc123/index.js", b"1")])
    contents = read_archive_bytes(tarball)
    assert contents.converted is None
    assert contents.digests.shasum == hashlib.sha1(tarball).hexdigest()
    assert contents.manifest["name"] == "demo-pkg"


def test_compute_digests_matches_hashlib() -> None:
    data = b"some bytes"
    digests = compute_digests(data)
    assert (digests.shasum, digests.integrity, digests.size) == (*_expected_digests(data), len(data))


def test_build_npm_tarball_is_deterministic_sorted_and_fixed() -> None:
    files = [("z.js", 0o600, b"z"), ("bin/cli", 0o700, b"#!"), ("a.js", 0o644, b"a")]
    first = build_npm_tarball(files)
    assert first == build_npm_tarball(list(reversed(files)))
    members = _members(first)
    assert [m.name for m in members] == ["package/a.js", "package/bin/cli", "package/z.js"]
    assert {m.mtime for m in members} == {NPM_FIXED_MTIME}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    assert [oct(m.mode) for m in members] == ["0o644", "0o755", "0o644"]
    header = gzip.GzipFile(fileobj=io.BytesIO(first))
    header.read()
    assert header.mtime == 0  # no build time in the gzip header


def test_zip_is_repacked_into_a_deterministic_npm_tarball() -> None:
    archive = deterministic_zip(MANIFEST, {**FILES, "lib/deep/x.js": "x"})
    contents = read_archive_bytes(archive)
    assert contents.converted is not None
    assert read_archive_bytes(archive).converted == contents.converted  # same bytes on every build
    assert (contents.digests.shasum, contents.digests.integrity) == _expected_digests(contents.converted)
    members = _members(contents.converted)
    names = [m.name for m in members]
    assert names == sorted(names)
    assert names == [
        "package/README.md",
        "package/bin/run.js",
        "package/index.js",
        "package/lib/deep/x.js",
        "package/package.json",
    ]
    assert {m.mtime for m in members} == {NPM_FIXED_MTIME}
    assert _member_bytes(contents.converted, "package/index.js") == FILES["index.js"].encode()
    assert contents.manifest == MANIFEST
    assert contents.readme_filename == "README.md"
    assert contents.file_count == 5


def test_zip_keeps_the_executable_bit() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("package.json", json.dumps(MANIFEST))
        info = zipfile.ZipInfo("bin/run", date_time=(2020, 1, 1, 0, 0, 0))
        info.create_system = 3
        info.external_attr = 0o100755 << 16
        archive.writestr(info, "#!/bin/sh\n")
    modes = {m.name: m.mode for m in _members(read_archive_bytes(buffer.getvalue()).converted or b"")}
    assert modes == {"package/bin/run": 0o755, "package/package.json": 0o644}


def test_zip_with_a_single_top_folder_is_stripped() -> None:
    archive = deterministic_zip(MANIFEST, {"index.js": "1"}, top="demo-pkg-main/")
    contents = read_archive_bytes(archive)
    assert [m.name for m in _members(contents.converted or b"")] == ["package/index.js", "package/package.json"]
    assert contents.manifest["version"] == "1.0.0"


def test_zip_dates_do_not_leak_into_the_tarball() -> None:
    def zipped(date: tuple[int, int, int, int, int, int]) -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, data in (("package.json", json.dumps(MANIFEST)), ("index.js", "1")):
                archive.writestr(zipfile.ZipInfo(name, date_time=date), data)
        return buffer.getvalue()

    assert (
        read_archive_bytes(zipped((2001, 1, 1, 0, 0, 0))).converted
        == read_archive_bytes(zipped((2024, 5, 5, 5, 5, 6))).converted
    )


def test_tgz_with_package_json_at_its_root_is_repacked_under_package() -> None:
    # npm strips the first path component when unpacking: served as is, index.js would be lost.
    tarball = _raw_tgz([("package.json", json.dumps(MANIFEST).encode()), ("index.js", b"1"), ("lib/a.js", b"a")])
    contents = read_archive_bytes(tarball)
    assert contents.converted is not None
    assert [m.name for m in _members(contents.converted)] == [
        "package/index.js",
        "package/lib/a.js",
        "package/package.json",
    ]
    assert contents.digests.shasum == hashlib.sha1(contents.converted).hexdigest()
    assert (
        contents.converted
        == read_archive_bytes(
            _raw_tgz([("index.js", b"1"), ("package.json", json.dumps(MANIFEST).encode()), ("lib/a.js", b"a")], mtime=5)
        ).converted
    )


def test_readme_is_found_case_insensitively_at_the_package_root_only() -> None:
    contents = read_archive_bytes(npm_tarball(MANIFEST, {"docs/README.md": "nested", "Readme.markdown": "top"}))
    assert (contents.readme, contents.readme_filename) == ("top", "Readme.markdown")
    assert read_archive_bytes(npm_tarball(MANIFEST, {"docs/README.md": "nested"})).readme is None


def _tar_with(info: tarfile.TarInfo, data: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        manifest = json.dumps(MANIFEST).encode()
        head = tarfile.TarInfo("package/package.json")
        head.size = len(manifest)
        tar.addfile(head, io.BytesIO(manifest))
        tar.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def _symlink() -> tarfile.TarInfo:
    info = tarfile.TarInfo("package/link")
    info.type = tarfile.SYMTYPE
    info.linkname = "/etc/passwd"
    return info


def _fifo() -> tarfile.TarInfo:
    info = tarfile.TarInfo("package/fifo")
    info.type = tarfile.FIFOTYPE
    return info


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


@pytest.mark.parametrize(
    ("archive", "rule"),
    [
        (lambda: _tar_with(_file("package/../../escape.js"), b"x"), "member-path"),
        (lambda: _tar_with(_file("/etc/passwd"), b"x"), "member-path"),
        (lambda: _tar_with(_symlink()), "member-type"),
        (lambda: _tar_with(_fifo()), "member-type"),
        (lambda: _tar_with(_file("package/package.json"), b"x"), "duplicate-member"),
        (lambda: _raw_tgz([("package/index.js", b"1")]), "no-package-json"),
        (lambda: _raw_tgz([("a/package.json", b"{}"), ("b/index.js", b"1")]), "no-package-json"),
        (lambda: npm_tarball(MANIFEST, FILES)[:-40], "corrupt-archive"),
        (lambda: b"\x1f\x8bnot really gzip", "corrupt-archive"),
        (lambda: b"just some text", "archive-format"),
        (lambda: b"PK\x03\x04broken zip", "corrupt-archive"),
        (lambda: build_npm_tarball([("package.json", 0o644, b"{not json")]), "manifest-json"),
        (lambda: build_npm_tarball([("package.json", 0o644, b"\xff\xfe\x00")]), "manifest-encoding"),
    ],
)
def test_unsafe_or_broken_archives_are_refused_with_a_rule(archive: Callable[[], bytes], rule: str) -> None:
    with pytest.raises(InvalidArchive) as caught:
        read_archive_bytes(archive())
    assert caught.value.rule == rule


def test_limits_are_enforced_while_streaming() -> None:
    big = npm_tarball(MANIFEST, {"zeros.bin": "0" * 2_000_000})
    with pytest.raises(InvalidArchive) as bomb:
        read_archive_bytes(big, Limits(max_compression_ratio=10))
    assert bomb.value.rule == "compression-ratio"
    with pytest.raises(InvalidArchive) as unpacked:
        read_archive_bytes(big, Limits(max_unpacked_bytes=100_000))
    assert unpacked.value.rule == "max-unpacked-size"
    with pytest.raises(InvalidArchive) as members:
        read_archive_bytes(npm_tarball(MANIFEST, FILES), Limits(max_members=2))
    assert members.value.rule == "max-members"
    with pytest.raises(InvalidArchive) as size:
        read_archive_bytes(big, Limits(max_archive_bytes=100))
    assert size.value.rule == "max-archive-size"


def test_zip_made_by_pythons_zipfile_is_accepted() -> None:
    # writestr(name, ...) stores 0o600 without file-type bits: that is a regular file, not a device.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("package.json", json.dumps(MANIFEST))
        archive.writestr("index.js", "1")
    assert read_archive_bytes(buffer.getvalue()).file_count == 2


def test_zip_symlink_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("package.json", json.dumps(MANIFEST))
        link = zipfile.ZipInfo("evil")
        link.create_system = 3
        link.external_attr = 0o120777 << 16
        archive.writestr(link, "/etc/passwd")
    with pytest.raises(InvalidArchive) as caught:
        read_archive_bytes(buffer.getvalue())
    assert caught.value.rule == "member-type"


def test_zip_member_climbing_out_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("package.json", json.dumps(MANIFEST))
        archive.writestr("../../evil.js", "1")
    with pytest.raises(InvalidArchive) as caught:
        read_archive_bytes(buffer.getvalue())
    assert caught.value.rule == "member-path"


def test_the_file_list_names_every_file_below_the_package_root_with_its_size() -> None:
    manifest = json.dumps(MANIFEST).encode()
    tgz = _raw_tgz([("package/package.json", manifest), ("package/lib/b.js", b"12345"), ("package/a.js", b"")])
    assert read_archive_bytes(tgz).files == (("a.js", 0), ("lib/b.js", 5), ("package.json", len(manifest)))
    zipped = read_archive_bytes(deterministic_zip(MANIFEST, {"src/x.js": "abc"}, top="demo-pkg-main/"))
    assert [(path, size) for path, size in zipped.files if path != "package.json"] == [("src/x.js", 3)]
    assert zipped.file_count == len(zipped.files)


def test_gzip_members_padding_and_what_may_follow() -> None:
    """Several gzip members read as one stream (as gunzip and Node do), zero padding after the last
    is accepted, anything else after it is refused as trailing data."""
    tar = gzip.decompress(npm_tarball(MANIFEST, FILES))
    split = len(tar) // 3
    members = gzip.compress(tar[:split], mtime=0) + gzip.compress(tar[split:], mtime=0)
    assert read_archive_bytes(members).manifest["name"] == "demo-pkg"
    assert read_archive_bytes(members + b"\x00" * 700).manifest["name"] == "demo-pkg"
    for tail in (b"\x00" * 10 + b"x", b"P", gzip.compress(b"junk", mtime=0)[:5]):
        with pytest.raises(InvalidArchive) as caught:
            read_archive_bytes(members + tail)
        assert caught.value.rule in ("trailing-data", "corrupt-archive"), tail
    with pytest.raises(InvalidArchive) as caught:
        read_archive_bytes(members + b"MZ evil")
    assert caught.value.rule == "trailing-data"
