"""A corpus of hostile archives, generated in code: every case names the rule that must refuse it.

Each case builds its bytes on demand (some are megabytes of zeros), under one set of small limits
(`LIMITS`) unless the case says otherwise, so bombs trip quickly and the corpus stays cheap.
`stage` says where the refusal comes from: "archive" (read_archive raises InvalidArchive with the
rule) or "manifest" (the archive is sound, its package.json is not: validate_manifest refuses it).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import random
import tarfile
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from registry_gen.settings import Limits

KiB = 1024
MiB = 1024 * KiB
LIMITS = Limits(
    max_archive_bytes=3 * MiB,
    max_unpacked_bytes=2 * MiB,
    max_members=64,
    max_manifest_bytes=8 * KiB,
    max_readme_bytes=8 * KiB,
    max_compression_ratio=16,
)


@dataclass(frozen=True)
class Case:
    id: str
    rule: str
    make: Callable[[], bytes]
    suffix: str = ".tgz"
    stage: str = "archive"
    limits: Limits = LIMITS

    @property
    def filename(self) -> str:
        return f"{self.id}{self.suffix}"


# ---------------------------------------------------------------- building blocks


def manifest_bytes(case_id: str, **fields: Any) -> bytes:
    data = {"name": f"hostile-{case_id}", "version": "1.0.0", "description": "hostile test case"}
    data.update(fields)
    return json.dumps(data).encode()


def file_info(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    return info, data


def special_info(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def raw_tar(members: list[tuple[tarfile.TarInfo, bytes | None]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def tgz(members: list[tuple[tarfile.TarInfo, bytes | None]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    return gzip.compress(raw_tar(members, fmt), mtime=0)


def package_tgz(case_id: str, *extra: tuple[tarfile.TarInfo, bytes | None], manifest: bytes | None = None) -> bytes:
    """A normal npm tarball for `case_id` plus `extra` members."""
    return tgz([file_info("package/package.json", manifest or manifest_bytes(case_id)), *extra])


def zip_bytes(entries: list[tuple[zipfile.ZipInfo | str, bytes]], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Duplicate name": on purpose
        for entry, data in entries:
            archive.writestr(entry, data)
    return buffer.getvalue()


def package_zip(case_id: str, *extra: tuple[zipfile.ZipInfo | str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    return zip_bytes([("package.json", manifest_bytes(case_id)), *extra], method)


def zip_info(name: str, unix_mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(1985, 10, 26, 8, 15, 0))
    info.create_system = 3  # unix: the mode lives in the high 16 bits
    info.external_attr = unix_mode << 16
    return info


def seeded_bytes(size: int, seed: int = 8) -> bytes:
    """Incompressible and reproducible."""
    return random.Random(seed).randbytes(size)


def _checksum(header: bytearray) -> None:
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\x00 " % sum(header)


def sparse_tgz(case_id: str) -> bytes:
    """An old-GNU sparse member: 1 KiB of data said to stand for 1 MiB, holes filled with zeros."""
    info, data = file_info("package/holes.bin", b"x" * 1024)
    block = bytearray(info.tobuf(tarfile.GNU_FORMAT)[:512])
    block[156:157] = tarfile.GNUTYPE_SPARSE
    block[386:410] = b"%011o\x00%011o\x00" % (0, 1024)  # one region: offset 0, 1024 bytes
    block[482:483] = b"\x00"  # no extension headers
    block[483:495] = b"%011o\x00" % MiB  # the "real" size
    _checksum(block)
    head = raw_tar([file_info("package/package.json", manifest_bytes(case_id))])
    return gzip.compress(head[: _end_of_members(head)] + bytes(block) + data + b"\x00" * 1024, mtime=0)


def _end_of_members(tar: bytes) -> int:
    """Offset of the end-of-archive marker in an uncompressed tar written by tarfile."""
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
        last = archive.getmembers()[-1]
        return last.offset_data + ((last.size + 511) // 512) * 512


def gnu_longname_chain(case_id: str, links: int = 20) -> bytes:
    """One GNU long-name header after another: tarfile recurses once per header."""
    info, data = file_info("package/" + "n" * 200 + ".js", b"1")
    member = info.tobuf(tarfile.GNU_FORMAT)  # 'L' header, its data block, the real header
    long_header = member[:1024]
    real = member[1024:]
    head = raw_tar([file_info("package/package.json", manifest_bytes(case_id))])
    head = head[: _end_of_members(head)]
    return gzip.compress(head + long_header * links + real + data.ljust(512, b"\x00") + b"\x00" * 1024, mtime=0)


def multi_member_zeros(case_id: str, slices: int, slice_size: int = 16 * MiB) -> bytes:
    """A tar holding `slices * slice_size` zeros, gzipped slice by slice (a valid multi-member gzip)."""
    info, _ = file_info("package/zeros.bin", b"")
    info.size = slices * slice_size
    head = raw_tar([file_info("package/package.json", manifest_bytes(case_id))])
    head = head[: _end_of_members(head)] + info.tobuf(tarfile.PAX_FORMAT)
    zeros = gzip.compress(b"\x00" * slice_size, mtime=0)
    return gzip.compress(head, mtime=0) + zeros * slices + gzip.compress(b"\x00" * 1024, mtime=0)


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def _valid_tgz() -> bytes:
    return package_tgz("valid", file_info("package/index.js", seeded_bytes(4 * KiB)))


def _nested_json(depth: int) -> bytes:
    return b'{"name":"hostile-deep","version":"1.0.0","x":' + b"[" * depth + b"]" * depth + b"}"


# ---------------------------------------------------------------- the corpus


def _tar_cases() -> list[Case]:
    p = package_tgz
    return [
        # member paths
        Case("tar-absolute-path", "member-path", lambda: p("a", file_info("/etc/evil.js", b"1"))),
        Case("tar-dotdot", "member-path", lambda: p("b", file_info("package/../../evil.js", b"1"))),
        Case("tar-dotdot-backslash", "member-path", lambda: p("c", file_info("package\\..\\..\\evil.js", b"1"))),
        Case("tar-drive-letter", "member-path", lambda: p("d", file_info("C:/evil.js", b"1"))),
        Case("tar-outside-top-folder", "no-package-json", lambda: p("e", file_info("other/evil.js", b"1"))),
        # member types
        # Links: a symbolic link whose target stays below its own folder is hosted (links_inside_tgz);
        # any other target, a hard link, a link as package.json or in a repacked archive is not, and
        # a path both a link and another member (or below a link) is ambiguous between npm and yarn.
        Case("tar-symlink", "member-type", lambda: p("f", special_info("package/link", tarfile.SYMTYPE, "/etc/passwd"))),
        Case("tar-symlink-climbing-then-file", "member-type", lambda: p("f2", special_info("package/x", tarfile.SYMTYPE, "../../.."), file_info("package/x/pwned.js", b"1"))),
        Case("tar-symlink-backslash-climbing", "member-type", lambda: p("f5", special_info("package/lib/x", tarfile.SYMTYPE, "y\\..\\..\\..\\etc"))),
        Case("tar-symlink-drive-letter", "member-type", lambda: p("f6", special_info("package/x", tarfile.SYMTYPE, "C:/Windows/win.ini"))),
        Case("tar-symlink-unc-target", "member-type", lambda: p("f7", special_info("package/x", tarfile.SYMTYPE, "\\\\host\\share"))),
        Case("tar-symlink-nul-target", "member-type", lambda: p("f8", _pax_link("package/x", "index.js\x00/etc/passwd"))),
        Case("tar-symlink-empty-target", "member-type", lambda: p("f9", special_info("package/x", tarfile.SYMTYPE, ""))),
        # A link to its own folder: a folder cycle, and yarn 4 fails the install on it.
        Case("tar-symlink-to-its-folder", "member-type", lambda: p("f10", special_info("package/lib/here", tarfile.SYMTYPE, "./."))),
        Case("tar-symlink-as-manifest", "member-type", lambda: tgz([special_info("package/package.json", tarfile.SYMTYPE, "index.js"), file_info("package/index.js", manifest_bytes("f11"))])),
        Case("tar-symlink-as-manifest-folded", "member-type", lambda: p("f12", special_info("package/PACKAGE.JSON", tarfile.SYMTYPE, "index.js"))),
        Case("tar-symlink-without-top-folder", "member-type", lambda: tgz([file_info("package.json", manifest_bytes("f4")), file_info("index.js", b"1"), special_info("main.js", tarfile.SYMTYPE, "index.js")])),
        Case("tar-hardlink", "member-type", lambda: p("g", file_info("package/a.js", b"1"), special_info("package/copy.js", tarfile.LNKTYPE, "package/a.js"))),
        Case("tar-hardlink-outside-then-file", "member-type", lambda: p("g2", special_info("package/shadow", tarfile.LNKTYPE, "/etc/shadow"), file_info("package/shadow", b"x"))),
        Case("tar-file-then-symlink", "path-conflict", lambda: p("f3", file_info("package/index.js", b"1"), file_info("package/other.js", b"2"), special_info("package/index.js", tarfile.SYMTYPE, "other.js"))),
        Case("tar-symlink-then-file", "path-conflict", lambda: p("f13", file_info("package/other.js", b"2"), special_info("package/index.js", tarfile.SYMTYPE, "other.js"), file_info("package/index.js", b"1"))),
        Case("tar-symlink-then-file-below", "path-conflict", lambda: p("f14", file_info("package/sub/keep.js", b"k"), special_info("package/lib", tarfile.SYMTYPE, "sub"), file_info("package/lib/x.js", b"1"))),
        Case("tar-symlink-then-symlink-below", "path-conflict", lambda: p("f15", special_info("package/lib", tarfile.SYMTYPE, "sub"), special_info("package/lib/x.js", tarfile.SYMTYPE, "y.js"))),
        Case("tar-symlink-then-folder", "path-conflict", lambda: p("f16", special_info("package/lib", tarfile.SYMTYPE, "sub"), special_info("package/lib", tarfile.DIRTYPE))),
        Case("tar-symlink-then-folder-below", "path-conflict", lambda: p("f19", special_info("package/lib", tarfile.SYMTYPE, "sub"), special_info("package/lib/deeper", tarfile.DIRTYPE))),
        Case("tar-folder-then-symlink", "path-conflict", lambda: p("f17", file_info("package/lib/x.js", b"1"), special_info("package/lib", tarfile.SYMTYPE, "sub"))),
        Case("tar-symlink-twice", "path-conflict", lambda: p("f18", special_info("package/x", tarfile.SYMTYPE, "a.js"), special_info("package/x", tarfile.SYMTYPE, "a.js"))),
        Case("tar-char-device", "member-type", lambda: p("h", special_info("package/tty", tarfile.CHRTYPE))),
        Case("tar-block-device", "member-type", lambda: p("i", special_info("package/sda", tarfile.BLKTYPE))),
        Case("tar-fifo", "member-type", lambda: p("j", special_info("package/pipe", tarfile.FIFOTYPE))),
        Case("tar-sparse", "member-type", lambda: sparse_tgz("k")),
        # duplicates
        # A repeated file is extracted last-one-wins, as node-tar does (the public registry serves
        # such tarballs); a repeated package.json that differs, or a path that changes type, is not.
        Case("tar-file-then-folder", "path-conflict", lambda: p("l", file_info("package/a.js", b"1"), file_info("package/a.js/b.js", b"2"))),
        Case("tar-duplicate-normalised", "duplicate-member", lambda: p("m", file_info("package/./package.json", manifest_bytes("evil")))),
        Case("tar-duplicate-manifest", "duplicate-member", lambda: p("n", file_info("package/package.json", manifest_bytes("evil")))),
        # sizes and bombs
        Case("tar-manifest-too-big", "max-manifest-size", lambda: p("o", manifest=manifest_bytes("o", description="x" * 9000))),
        Case("tar-gzip-bomb", "compression-ratio", lambda: p("p", file_info("package/zeros.bin", b"\x00" * 16 * MiB))),
        Case("tar-unpacked-too-big", "max-unpacked-size", lambda: p("q", file_info("package/noise.bin", seeded_bytes(2 * MiB + 64 * KiB)))),
        Case("tar-too-many-members", "max-members", lambda: p("r", *[file_info(f"package/f{i}.js", b"") for i in range(80)])),
        Case("tar-pax-header-bomb", "member-header", lambda: p("s", _pax_bomb())),
        Case("tar-longname-chain", "member-header", lambda: gnu_longname_chain("t")),
        Case(
            "tar-archive-too-big",
            "max-archive-size",
            lambda: p("u", file_info("package/noise.bin", seeded_bytes(300 * KiB))),
            limits=dataclasses.replace(LIMITS, max_archive_bytes=256 * KiB),
        ),
        # truncated or corrupt
        Case("tgz-truncated-half", "corrupt-archive", lambda: _valid_tgz()[: len(_valid_tgz()) // 2]),
        Case("tgz-without-trailer", "corrupt-archive", lambda: _valid_tgz()[:-8]),
        Case("tgz-bad-crc", "corrupt-archive", lambda: _flip(_valid_tgz(), len(_valid_tgz()) - 6)),
        Case("tgz-flipped-deflate-byte", "corrupt-archive", lambda: _flip(_valid_tgz(), len(_valid_tgz()) // 2)),
        Case("tgz-garbage-after-magic", "corrupt-archive", lambda: b"\x1f\x8b" + seeded_bytes(2000)),
        Case("tgz-of-garbage", "corrupt-archive", lambda: gzip.compress(seeded_bytes(3000), mtime=0)),
        Case("tar-truncated-member", "corrupt-archive", lambda: gzip.compress(_cut_inside_member(), mtime=0)),
        Case("tgz-trailing-garbage", "trailing-data", lambda: _valid_tgz() + b"#!/bin/sh evil"),
        Case("tar-hidden-second-archive", "trailing-data", lambda: gzip.compress(_tar_then_another(), mtime=0)),
        Case("not-an-archive", "archive-format", lambda: b"#!/bin/sh\necho not an archive\n"),
        Case("empty-file", "archive-format", lambda: b""),
        # package.json
        Case("tar-no-manifest", "no-package-json", lambda: tgz([file_info("package/index.js", b"1")])),
        Case("manifest-latin1", "manifest-encoding", lambda: p("v", manifest=b'{"name":"hostile-v","version":"1.0.0","description":"caf\xe9"}')),
        Case("manifest-utf16", "manifest-encoding", lambda: p("w", manifest=manifest_bytes("w").decode().encode("utf-16"))),
        Case("manifest-lone-surrogate", "manifest-encoding", lambda: p("x", manifest=b'{"name":"hostile-x","version":"1.0.0","description":"\\ud800"}')),
        Case("manifest-invalid-json", "manifest-json", lambda: p("y", manifest=b'{"name": "hostile-y", "version": ')),
        Case("manifest-deep-nesting", "manifest-json", lambda: p("z", manifest=_nested_json(50_000)), limits=dataclasses.replace(LIMITS, max_manifest_bytes=200 * KiB)),
        Case("manifest-nan", "manifest-json", lambda: p("aa", manifest=b'{"name":"hostile-aa","version":"1.0.0","n":NaN}')),
        Case("manifest-infinite-float", "manifest-json", lambda: p("ab", manifest=b'{"name":"hostile-ab","version":"1.0.0","n":1e999}')),
        Case("manifest-huge-integer", "manifest-json", lambda: p("ac", manifest=b'{"name":"hostile-ac","version":"1.0.0","n":' + b"9" * 5000 + b"}")),
    ]


def links_inside_tgz(name: str = "hostile-links-inside") -> bytes:
    """Symbolic links whose targets stay below their own folders, in every shape that is hosted:
    chains through a linked folder, a `./` prefix, links into a sub-folder, a loop, dangling
    links, and a README.md that is a link (never read as the README: readme.txt is)."""
    def link(path: str, target: str) -> tuple[tarfile.TarInfo, None]:
        return special_info(f"package/{path}", tarfile.SYMTYPE, target)

    return tgz([
        file_info("package/package.json", json.dumps({"name": name, "version": "1.0.0", "main": "main.js"}).encode()),
        file_info("package/lib/c.js", b"module.exports = 'c';\n"), file_info("package/readme.txt", b"the real readme\n"),
        link("main.js", "linked/c.js"), link("linked", "lib"), link("lib/alias.js", "./c.js"), link("sub/deep/x", "y/z"),
        link("loop1", "loop2"), link("loop2", "loop1"), link("dangling", "nowhere.js"), link("README.md", "lib/c.js"),
    ])  # fmt: skip


LINKS_INSIDE = ("main.js", "linked", "lib/alias.js", "sub/deep/x", "loop1", "loop2", "dangling", "README.md")


def _pax_link(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    """A symbolic link whose target is given in a pax header, where (unlike the ustar field) a NUL
    byte does not end it."""
    info, _ = special_info(name, tarfile.SYMTYPE, "placeholder")
    info.pax_headers = {"linkpath": target}
    return info, None


def _pax_bomb() -> tuple[tarfile.TarInfo, bytes]:
    info, data = file_info("package/index.js", b"1")
    info.pax_headers = {"comment": "A" * (512 * KiB)}
    return info, data


def _cut_inside_member() -> bytes:
    tar = raw_tar([file_info("package/package.json", manifest_bytes("cut")), file_info("package/big.js", seeded_bytes(8 * KiB))])
    return tar[: _end_of_members(tar) - 4 * KiB]


def _tar_then_another() -> bytes:
    first = raw_tar([file_info("package/package.json", manifest_bytes("first"))])
    second = raw_tar([file_info("package/package.json", manifest_bytes("second")), file_info("package/evil.js", b"evil")])
    return first + second


def _zip_cases() -> list[Case]:
    z = package_zip
    return [
        Case("zip-absolute-path", "member-path", lambda: z("za", ("/etc/evil.js", b"1")), ".zip"),
        Case("zip-dotdot", "member-path", lambda: z("zb", ("../../evil.js", b"1")), ".zip"),
        Case("zip-dotdot-backslash", "member-path", lambda: z("zc", ("..\\..\\evil.js", b"1")), ".zip"),
        Case("zip-symlink", "member-type", lambda: z("zd", (zip_info("link", 0o120777), b"/etc/passwd")), ".zip"),
        Case("zip-fifo", "member-type", lambda: z("ze", (zip_info("pipe", 0o010644), b"")), ".zip"),
        Case("zip-char-device", "member-type", lambda: z("zf", (zip_info("tty", 0o020644), b"")), ".zip"),
        Case("zip-duplicate", "duplicate-member", lambda: z("zg", ("a.js", b"1"), ("a.js", b"2")), ".zip"),
        Case("zip-duplicate-manifest", "duplicate-member", lambda: z("zh", ("package.json", manifest_bytes("evil"))), ".zip"),
        Case("zip-manifest-too-big", "max-manifest-size", lambda: zip_bytes([("package.json", manifest_bytes("zi", description="x" * 9000))]), ".zip"),
        Case("zip-bomb", "compression-ratio", lambda: z("zj", ("zeros.bin", b"\x00" * 16 * MiB)), ".zip"),
        Case("zip-unpacked-too-big", "max-unpacked-size", lambda: z("zk", ("noise.bin", seeded_bytes(2 * MiB + 64 * KiB)), method=zipfile.ZIP_STORED), ".zip"),
        Case("zip-too-many-members", "max-members", lambda: z("zl", *[(f"f{i}.js", b"") for i in range(80)]), ".zip"),
        Case("zip-central-directory-flood", "max-members", lambda: z("zm", *[(f"d{i}/", b"") for i in range(200)]), ".zip"),
        Case("zip-too-big", "max-archive-size", lambda: z("zn", ("noise.bin", seeded_bytes(300 * KiB)), method=zipfile.ZIP_STORED), ".zip", limits=dataclasses.replace(LIMITS, max_archive_bytes=256 * KiB)),
        Case("zip-bzip2", "zip-compression", lambda: z("zo", ("a.js", b"1"), method=zipfile.ZIP_BZIP2), ".zip"),
        Case("zip-lzma", "zip-compression", lambda: z("zp", ("a.js", b"1"), method=zipfile.ZIP_LZMA), ".zip"),
        Case("zip-encrypted", "zip-encrypted", lambda: _encrypted_zip("zq"), ".zip"),
        Case("zip-truncated", "corrupt-archive", lambda: _valid_zip()[: len(_valid_zip()) // 2], ".zip"),
        Case("zip-bad-crc", "corrupt-archive", lambda: _zip_with_bad_crc(), ".zip"),
        Case("zip-garbage-after-magic", "corrupt-archive", lambda: b"PK\x03\x04" + seeded_bytes(2000), ".zip"),
        Case("zip-manifest-invalid-json", "manifest-json", lambda: zip_bytes([("package.json", b"{oops")]), ".zip"),
        Case("zip-manifest-latin1", "manifest-encoding", lambda: zip_bytes([("package.json", b'{"name":"caf\xe9"}')]), ".zip"),
    ]


def _valid_zip() -> bytes:
    return package_zip("valid-zip", ("index.js", seeded_bytes(4 * KiB)))


def _zip_with_bad_crc() -> bytes:
    data = bytearray(package_zip("zr", ("index.js", b"module.exports = 1;\n" * 50), method=zipfile.ZIP_STORED))
    at = data.index(b"module.exports")
    data[at] ^= 0x20  # stored bytes change; the CRC in both headers does not
    return bytes(data)


def _encrypted_zip(case_id: str) -> bytes:
    data = bytearray(package_zip(case_id, ("secret.js", b"1"), method=zipfile.ZIP_STORED))
    # Set the "encrypted" flag bit in the local and central headers of every entry.
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = 0
        while (start := data.find(signature, start)) != -1:
            data[start + flag_at] |= 0x01
            start += 4
    return bytes(data)


# Names and versions that try to reach outside the tree, or that URLs cannot carry.
HOSTILE_NAMES = {
    "name-dotdot": "../x",
    "name-scoped-dotdot": "@scope/../x",
    "name-dotdot-only": "..",
    "name-dot-leading": ".hidden",
    "name-encoded-slash": "a%2fb",
    "name-scope-encoded-slash": "@scope%2fx",
    "name-question-mark": "a?b",
    "name-hash": "a#b",
    "name-space": "a b",
    "name-colon": "a:b",
    "name-backslash": "a\\b",
    "name-slash": "a/b",
    "name-deep-scope": "@scope/x/y",
    "name-absolute": "/etc/passwd",
    "name-crlf": "a\r\nSet-Cookie: x",
    "name-nul": "a\x00b",
    "name-empty": "",
    "name-dash-reserved": "-",
    "name-node-modules": "node_modules",
    "name-too-long": "a" * 215,
}
HOSTILE_VERSIONS = {
    "version-dotdot": "1.0.0/../../x",
    "version-leading-dotdot": "../1.0.0",
    "version-slash": "1.0.0-a/b",
    "version-not-semver": "latest",
}


def _manifest_cases() -> list[Case]:
    cases = [
        Case(key, "name-valid", (lambda n=name: package_tgz("unused", manifest=json.dumps({"name": n, "version": "1.0.0"}).encode())), stage="manifest")
        for key, name in HOSTILE_NAMES.items()
    ]
    cases.append(
        Case(
            "name-and-version-too-long",
            "version-length",  # each valid alone; together longer than a file name may be
            lambda: package_tgz("unused", manifest=json.dumps({"name": "a" * 200, "version": "1.0.0-" + "b" * 100}).encode()),
            stage="manifest",
        )
    )
    cases += [
        Case(key, "version-semver", (lambda k=key, v=version: package_tgz("unused", manifest=manifest_bytes(k, version=v))), stage="manifest")
        for key, version in HOSTILE_VERSIONS.items()
    ]
    return cases


CASES: list[Case] = _tar_cases() + _zip_cases() + _manifest_cases()
