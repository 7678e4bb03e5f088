"""Reading package archives safely, and turning other archives into npm tarballs.

Everything here works on file objects handed in; nothing is written to disk. Every limit is
enforced while streaming, so a bomb costs at most the cap, never the bomb's full size (a small
archive, which no cap can refuse, is inflated whole: whole_inflate_bound).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import math
import posixpath
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from registry_gen.errors import InvalidArchive
from registry_gen.settings import Limits

# npm pack's fixed mtime (1985-10-26T08:15:00Z): reproducible tarballs, as npm itself makes them.
NPM_FIXED_MTIME = 499162500
README_NAMES = ("readme.md", "readme.markdown", "readme", "readme.txt", "readme.rst")
CHUNK = 1024 * 1024
GZIP_READ = 64 * 1024  # compressed bytes read at a time: how far a bomb gets before the caps see it
RATIO_FLOOR = 64 * 1024  # below this many compressed bytes the ratio is measured against the floor
# Per member, what a tar stream may carry besides file data (header block, padding, a short pax
# header): the cap on the inflated stream is max_unpacked_bytes plus this for every allowed member.
TAR_OVERHEAD_PER_MEMBER = 4096
# pax and GNU long-name headers are read whole into memory by tarfile, and may chain: real ones
# are a few hundred bytes, one or two in a row.
MAX_EXTENDED_HEADER_BYTES = 64 * 1024
MAX_EXTENDED_HEADER_CHAIN = 8
_EXTENDED_HEADER_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
# bzip2 and lzma inflate a few kilobytes into gigabytes in one call zipfile cannot bound.
ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
ZIP_CENTRAL_SIGNATURE = b"PK\x01\x02"


@dataclass(frozen=True)
class Digests:
    shasum: str
    integrity: str
    size: int


@dataclass(frozen=True)
class ArchiveContents:
    """What the generator needs from one archive."""

    manifest: Any  # the parsed package.json, not yet validated
    readme: str | None
    readme_filename: str | None
    file_count: int
    unpacked_size: int
    digests: Digests  # of the npm tarball that will be served
    converted: bytes | None  # the npm tarball, when the source was not servable byte for byte
    files: tuple[tuple[str, int], ...] = ()  # (path inside the package, size), by path: file_list()


def compute_digests(data: bytes) -> Digests:
    return Digests(
        shasum=hashlib.sha1(data).hexdigest(),
        integrity="sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii"),
        size=len(data),
    )


class _HashingReader(io.RawIOBase):
    """Wraps a source file: hashes and counts every byte read, refuses to read past a cap."""

    def __init__(self, raw: IO[bytes], cap: int):
        self._raw = raw
        self._cap = cap
        self.count = 0
        self.sha1 = hashlib.sha1()
        self.sha512 = hashlib.sha512()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        self.count += len(data)
        if self.count > self._cap:
            raise InvalidArchive("max-archive-size", f"archive is larger than {self._cap} bytes")
        self.sha1.update(data)
        self.sha512.update(data)
        buffer[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        while self.read(CHUNK):
            pass

    def absorb(self, data: bytes) -> None:
        """Counts and hashes bytes read from the source in one piece (the whole-archive walk)."""
        self.count += len(data)
        if self.count > self._cap:
            raise InvalidArchive("max-archive-size", f"archive is larger than {self._cap} bytes")
        self.sha1.update(data)
        self.sha512.update(data)

    def digests(self) -> Digests:
        return Digests(
            shasum=self.sha1.hexdigest(),
            integrity="sha512-" + base64.b64encode(self.sha512.digest()).decode("ascii"),
            size=self.count,
        )


def _check_expansion(inflated: int, compressed: int, limits: Limits, cap: int) -> None:
    if inflated > cap:
        raise InvalidArchive("max-unpacked-size", f"archive unpacks to more than {limits.max_unpacked_bytes} bytes")
    if inflated > max(compressed, RATIO_FLOOR) * limits.max_compression_ratio:
        raise InvalidArchive(
            "compression-ratio",
            f"archive expands more than {limits.max_compression_ratio} times (a compression bomb?)",
        )


def _refuse_unless_zeros(data: bytes, what: str) -> None:
    if data.strip(b"\x00"):
        raise InvalidArchive("trailing-data", f"archive has bytes after the end of the {what}")


class _GunzipReader(io.RawIOBase):
    """The stdlib's gzip reader, with every inflated byte counted against the caps.

    Tar headers, padding and data tarfile skips on its own all pass through here, so nothing
    escapes the budget. `gzip.GzipFile` reads several members in turn (as gunzip and Node do)
    and skips zero padding after the last one; its errors become InvalidArchive: a stream that
    ends early or fails its CRC is corrupt, anything but zeros after the last member is trailing data.
    """

    def __init__(self, source: _HashingReader, limits: Limits):
        self._source = source
        self._limits = limits
        self._cap = limits.max_unpacked_bytes + limits.max_members * TAR_OVERHEAD_PER_MEMBER
        self._gzip = gzip.GzipFile(fileobj=source, mode="rb")
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._inflate(min(len(buffer), GZIP_READ))
        if data:
            self.count += len(data)
            _check_expansion(self.count, self._source.count, self._limits, self._cap)
            buffer[: len(data)] = data
        return len(data)

    def _inflate(self, size: int) -> bytes:
        try:
            return self._gzip.read(size)
        except EOFError as exc:
            raise InvalidArchive("corrupt-archive", "gzip stream is truncated") from exc
        except gzip.BadGzipFile as exc:
            # The first member's magic was checked before: a bad one later is data after the stream.
            if str(exc).startswith("Not a gzipped file"):
                raise InvalidArchive("trailing-data", "archive has bytes after the end of the gzip stream") from exc
            raise InvalidArchive("corrupt-archive", f"gzip stream is corrupt ({exc})") from exc
        except zlib.error as exc:
            raise InvalidArchive("corrupt-archive", f"gzip stream is corrupt ({exc})") from exc


class _GuardedTarInfo(tarfile.TarInfo):
    """Refuses oversized or endlessly chained extended headers before tarfile reads them whole."""

    def _proc_member(self, tarfile_: Any) -> Any:  # tarfile's own hook, called for every header
        if self.type not in _EXTENDED_HEADER_TYPES:
            return super()._proc_member(tarfile_)
        if self.size > MAX_EXTENDED_HEADER_BYTES:
            raise InvalidArchive("member-header", f"an extended tar header of {self.size} bytes (a header bomb?)")
        chain = getattr(tarfile_, "_extended_header_chain", 0) + 1
        if chain > MAX_EXTENDED_HEADER_CHAIN:
            raise InvalidArchive("member-header", f"more than {MAX_EXTENDED_HEADER_CHAIN} extended tar headers in a row")
        tarfile_._extended_header_chain = chain
        try:
            return super()._proc_member(tarfile_)
        finally:
            tarfile_._extended_header_chain = chain - 1


def _path_problem(path: str) -> str | None:
    """Why a path read from an archive could lead outside the folder it is read from (`/x`, `C:/x`,
    `\\x`, a `..` segment with either slash, a NUL byte), or None when it cannot."""
    if "\x00" in path:
        return "contains a NUL byte"
    unified = path.replace("\\", "/")
    if unified.startswith("/") or (len(unified) > 1 and unified[1] == ":"):
        return "is absolute"
    if ".." in unified.split("/"):
        return "climbs out with '..'"
    return None


def _clean_member_path(name: str) -> str:
    """The member's path, normalised; refuses absolute paths and anything that climbs out."""
    problem = _path_problem(name)
    if problem is not None:
        raise InvalidArchive("member-path", f"member path {name!r} {problem}")
    return "/".join(p for p in name.replace("\\", "/").split("/") if p not in ("", "."))


# Why an ambiguous tree is refused: npm and pnpm skip links, yarn creates them (RATIONALE.md §7).
_CLIENTS_DISAGREE = "npm and yarn would install different trees"


class _Budget:
    """Running totals checked against the limits as members stream by, and the paths seen so far:
    files, folders (named or implied by a member below them) and symbolic links (path → target)."""

    def __init__(self, limits: Limits, archive_size_hint: int | None):
        self.limits = limits
        self.members = 0
        self.unpacked = 0
        self.files: set[str] = set()
        self.folders: set[str] = set()
        self.links: dict[str, str] = {}
        self.size_hint = archive_size_hint

    def member(self, path: str) -> bool:
        """Counts a file member; True when its path came before (the caller decides what that means)."""
        self._count()
        if path in self.folders:
            raise InvalidArchive("path-conflict", f"member {path!r} is both a file and a folder")
        if path in self.links:
            raise InvalidArchive("path-conflict", f"member {path!r} is both a symbolic link and a file ({_CLIENTS_DISAGREE})")
        self._refuse_below_file_or_link(path)
        repeated = path in self.files
        self.files.add(path)
        return repeated

    def link(self, path: str, target: str) -> None:
        """A symbolic link member (its target already checked): one path, one type, nothing below it."""
        self._count()
        earlier = "a folder" if path in self.folders else "a file" if path in self.files else "a link" if path in self.links else ""
        if earlier:
            raise InvalidArchive("path-conflict", f"member {path!r} is a symbolic link and, earlier in the archive, {earlier} ({_CLIENTS_DISAGREE})")
        self._refuse_below_file_or_link(path)
        self.links[path] = target

    def folder(self, path: str) -> None:
        """A folder entry: a file or a link of the same path would change that path's type."""
        if path in self.files:
            raise InvalidArchive("path-conflict", f"member {path!r} is both a file and a folder")
        if path in self.links:
            raise InvalidArchive("path-conflict", f"member {path!r} is both a symbolic link and a folder ({_CLIENTS_DISAGREE})")
        self._refuse_below_file_or_link(path)
        self.folders.add(path)

    def _count(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise InvalidArchive("max-members", f"archive has more than {self.limits.max_members} members")

    def _refuse_below_file_or_link(self, path: str) -> None:
        """A member below a file changes that file's type; one below a link is written into a real
        folder by npm and through the link by yarn: either way the clients install different trees."""
        parent = path.rpartition("/")[0]
        if not parent or parent in self.folders:
            # A known folder's own parents are folders too, and none of them is a file or a link
            # (each of those checks refuses that): nothing to look at again for its next member.
            return
        parents = _parents(path)
        if any(parent in self.files for parent in parents):
            raise InvalidArchive("path-conflict", f"member {path!r} lies below a file of the same name")
        link = next((parent for parent in parents if parent in self.links), None)
        if link is not None:
            raise InvalidArchive("path-conflict", f"member {path!r} lies below the symbolic link {link!r} ({_CLIENTS_DISAGREE})")
        self.folders.update(parents)

    def bytes(self, count: int, compressed_so_far: int) -> None:
        self.unpacked += count
        if self.unpacked > self.limits.max_unpacked_bytes:
            raise InvalidArchive(
                "max-unpacked-size", f"archive unpacks to more than {self.limits.max_unpacked_bytes} bytes"
            )
        floor = max(compressed_so_far, 64 * 1024)
        if self.unpacked > floor * self.limits.max_compression_ratio:
            raise InvalidArchive(
                "compression-ratio",
                f"archive expands more than {self.limits.max_compression_ratio} times (a compression bomb?)",
            )


@dataclass
class _Member:
    path: str
    mode: int
    data: bytes | None  # kept only for package.json, README and (when converting) every file
    size: int = 0


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _refuse_ambiguous_duplicate(previous: _Member, member: _Member) -> None:
    """A repeated tar member: node-tar (npm, pnpm, yarn) extracts the last one over the first,
    and the public registry serves such tarballs (agent-base@7). Only a second package.json
    that says something else is refused: the build and the client would read different manifests."""
    if posixpath.basename(member.path).lower() == "package.json" and previous.data != member.data:
        raise InvalidArchive("duplicate-member", f"member {member.path!r} appears twice with different contents")


def _last_wins(members: Iterator[_Member]) -> dict[str, _Member]:
    """Members by path, a repeated path holding its last copy, as node-tar extracts it."""
    by_path: dict[str, _Member] = {}
    for member in members:
        previous = by_path.pop(member.path, None)
        if previous is not None:
            _refuse_ambiguous_duplicate(previous, member)
        by_path[member.path] = member
    return by_path


def _read_capped(stream: IO[bytes], size: int, budget: _Budget, compressed: Any, keep: int | None) -> bytes | None:
    """Reads a member fully (to count it), holding at most `keep` bytes of it (None: all, 0: none)."""
    kept = bytearray() if keep != 0 else None
    while True:
        block = stream.read(min(CHUNK, max(size, 1)))
        if not block:
            break
        budget.bytes(len(block), compressed())
        if kept is not None and (keep is None or len(kept) < keep):
            kept += block if keep is None else block[: keep - len(kept)]
    return bytes(kept) if kept is not None else None


def _bytes_to_keep(path: str, keep_all: bool, limits: Limits) -> int | None:
    """Only package.json (one byte past its cap, to see it is too big) and the README are held."""
    if keep_all:
        return None
    if not _is_interesting(path):
        return 0
    if posixpath.basename(path).lower() == "package.json":
        return limits.max_manifest_bytes + 1
    return limits.max_readme_bytes


def _link_target(info: tarfile.TarInfo) -> str:
    """The target of a symbolic link member that stays inside its package for every client, or
    InvalidArchive. npm and pnpm skip links; yarn 1 creates them with the target joined below the
    link's folder, yarn 4 with the target as it is (RATIONALE.md §7). A relative target without
    `..` resolves below the link's own folder, and so does every link it leads through."""
    target = info.linkname
    problem = _path_problem(target)
    if problem is None and not [part for part in target.replace("\\", "/").split("/") if part not in ("", ".")]:
        # `.` makes a folder cycle (anything walking node_modules loops), and yarn 4 fails on it.
        problem = "is empty or names the link's own folder"
    if problem is not None:
        raise InvalidArchive(
            "member-type",
            f"member {info.name!r} is a symbolic link to {target[:200]!r}, whose target {problem}"
            " (a link is hosted only when its relative target stays below the link's folder)",
        )
    return target


def _hard_link_refusal(info: tarfile.TarInfo) -> str:
    """Why a hard link member is refused, wherever it points: npm, pnpm and yarn 4 skip it, yarn 1
    creates it from the target joined below the link's folder (RATIONALE.md §7): the file is there
    for one client and missing for the others, and in a sub-folder yarn 1 fails the install."""
    return f"member {info.name!r} is a hard link to {info.linkname[:200]!r} ({_CLIENTS_DISAGREE}: npm skips it, yarn 1 creates it)"


def _iter_tar(source: _HashingReader, budget: _Budget, keep_all: bool) -> Iterator[_Member]:
    inflated = _GunzipReader(source, budget.limits)
    try:
        with tarfile.open(fileobj=inflated, mode="r|", tarinfo=_GuardedTarInfo) as tar:  # type: ignore[call-overload]
            for info in tar:
                path = _clean_member_path(info.name)
                if info.isdir():
                    if path:
                        budget.folder(path)
                    continue
                if not path:
                    raise InvalidArchive("member-path", f"member path {info.name!r} is empty")
                if info.issym():
                    budget.link(path, _link_target(info))
                    continue
                if info.islnk():
                    raise InvalidArchive("member-type", _hard_link_refusal(info))
                if not info.isfile():
                    raise InvalidArchive("member-type", f"member {info.name!r} is not a regular file")
                if info.sparse is not None:
                    # tarfile fills the holes with zeros, npm's tar does not: two readings of one file.
                    raise InvalidArchive("member-type", f"member {info.name!r} is a sparse file")
                budget.member(path)
                stream = tar.extractfile(info)
                assert stream is not None
                data = _read_capped(stream, info.size, budget, lambda: source.count, _bytes_to_keep(path, keep_all, budget.limits))
                yield _Member(path, info.mode, data, info.size)
            # Past the end-of-archive block only zeros may follow: anything else is a second,
            # hidden archive that another tar reader might see instead of this one.
            # Reading to the end also takes the gzip stream to its end, which checks its CRC.
            while rest := tar.fileobj.read(CHUNK):
                _refuse_unless_zeros(rest, "tar archive")
        source.drain()
    except InvalidArchive:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error, gzip.BadGzipFile, ValueError, RecursionError) as exc:
        raise InvalidArchive("corrupt-archive", f"tar.gz archive is truncated or corrupt: {exc}") from exc


class _NotPlain(Exception):
    """The fast tar walker met something only tarfile reads right: the archive is read again by it."""


_USTAR_MAGIC = b"ustar\x0000"
_PLAIN_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)
_PLAIN_HEADER_TYPES = frozenset((*_PLAIN_FILE_TYPES, tarfile.DIRTYPE))
_SHARED_NUMBER_FIELDS = ((108, 116), (116, 124), (136, 148), (329, 337), (337, 345))  # uid, gid, mtime, devices


def _octal(field: bytes) -> int:
    """A tar number field as tarfile's nti reads a plain octal one; anything else is not plain."""
    if field[:1] in (b"\x80", b"\xff"):
        raise _NotPlain("base-256 number")
    end = field.find(b"\0")
    try:
        return int((field if end < 0 else field[:end]).strip() or b"0", 8)
    except ValueError:
        raise _NotPlain("bad number") from None


_SHARED_FIELDS: dict[bytes, int] = {}  # a header's mode, uid, gid, mtime and device fields -> its mode
_SHARED_FIELDS_MAX = 4096


def _shared_mode(block: bytes) -> int:
    """The mode of a header whose number fields most members of an archive share (npm packs every
    member with the same uid, gid and mtime, and few modes), all read as tarfile would: looked up
    as one key once read (one lookup a header, not six). Sizes and checksums are not kept."""
    fields = block[100:124] + block[136:148] + block[329:345]
    mode = _SHARED_FIELDS.get(fields)
    if mode is None:
        mode = _octal(block[100:108])
        for start, end in _SHARED_NUMBER_FIELDS:
            _octal(block[start:end])
        if len(_SHARED_FIELDS) < _SHARED_FIELDS_MAX:
            _SHARED_FIELDS[fields] = mode
    return mode


def _plain_header(block: bytes) -> tuple[str, bytes, int, int] | None:
    """(name, type, mode, size) of a POSIX ustar header with an ASCII name, exactly as
    tarfile.TarInfo.frombuf reads it; None for the all-zero end block. Raises _NotPlain for any
    other header (pax, GNU, links, sparse, bad checksum, odd numbers): tarfile reads those."""
    if len(block) != tarfile.BLOCKSIZE:
        raise _NotPlain("short header")
    if block.count(0) == tarfile.BLOCKSIZE:  # no copy, as strip() made
        return None
    if block[257:265] != _USTAR_MAGIC or block[156:157] not in _PLAIN_HEADER_TYPES:
        raise _NotPlain("not a plain ustar member")
    if _octal(block[148:156]) != sum(block) - sum(block[148:156]) + 256:  # the unsigned checksum
        raise _NotPlain("checksum")
    # Every number field is read, as tarfile does: one it would refuse sends the archive to it.
    mode, size = _shared_mode(block), _octal(block[124:136])
    raw_name, raw_prefix = block[0:100].split(b"\0", 1)[0], block[345:500].split(b"\0", 1)[0]
    if not (raw_name.isascii() and raw_prefix.isascii()):
        raise _NotPlain("non-ASCII name")
    name, kind = raw_name.decode("ascii"), block[156:157]
    if kind == tarfile.AREGTYPE and name.endswith("/"):
        kind = tarfile.DIRTYPE
    if kind == tarfile.DIRTYPE:
        name = name.rstrip("/")
    if raw_prefix:
        name = raw_prefix.decode("ascii") + "/" + name
    return name, kind, mode, size


def _admitted(header: tuple[str, bytes, int, int], budget: _Budget) -> tuple[str, int, int] | None:
    """A plain header's member (path, mode, size) once the budget admits it; None for a folder
    (counted against the budget, not yielded)."""
    name, kind, mode, size = header
    path = _clean_member_path(name)
    if kind == tarfile.DIRTYPE:
        if path:
            budget.folder(path)
        return None
    if not path:
        raise _NotPlain("empty path")
    budget.member(path)
    return path, mode, size


def _iter_plain_tar(source: _HashingReader, budget: _Budget) -> Iterator[_Member]:
    """What _iter_tar yields, for archives of plain ustar members only, without tarfile's
    per-member Python overhead (most of the time of reading an archive after the inflate)."""
    stream = io.BufferedReader(_GunzipReader(source, budget.limits), CHUNK)
    while (header := _plain_header(stream.read(tarfile.BLOCKSIZE))) is not None:
        admitted = _admitted(header, budget)
        if admitted is None:
            continue
        path, mode, size = admitted
        keep = _bytes_to_keep(path, False, budget.limits)
        kept, left = bytearray(), size
        while left:
            block = stream.read(min(CHUNK, left))
            if not block:
                raise _NotPlain("truncated member")
            left -= len(block)
            budget.bytes(len(block), source.count)
            if keep is None or len(kept) < keep:
                kept += block if keep is None else block[: keep - len(kept)]
        if len(stream.read(-size % tarfile.BLOCKSIZE)) != -size % tarfile.BLOCKSIZE:
            raise _NotPlain("truncated padding")
        yield _Member(path, mode, bytes(kept) if keep != 0 else None, size)
    while rest := stream.read(CHUNK):
        if rest.strip(b"\0"):
            raise _NotPlain("data after the end of the archive")
    source.drain()


def whole_inflate_bound(limits: Limits) -> int:
    """The largest archive, compressed or inflated, read in one piece (`_inflated_whole`): up to
    here no expansion or unpacked-size check of the streaming reader can fire (each compares
    with at least RATIO_FLOOR compressed bytes), so reading it whole decides exactly as streaming."""
    return min(RATIO_FLOOR * limits.max_compression_ratio, limits.max_unpacked_bytes, limits.max_archive_bytes)


def _inflated_whole(source: IO[bytes], hashing: _HashingReader, bound: int) -> bytes | None:
    """The tar stream of a small single-member gzip archive, inflated by one zlib object fed
    GZIP_READ bytes at a time (a bomb is dropped once it passes `bound`, as streaming would drop
    it), the source hashed as it is read; None for anything else (more than `bound` bytes in or
    out, several members, bytes after the stream, a zlib error), which the streaming reader decides
    from the source's start (with a new hashing reader: this one has taken what was read)."""
    inflater = zlib.decompressobj(wbits=31)  # the gzip wrapper: zlib checks the header, CRC-32 and length
    inflated: list[bytes] = []
    size = 0
    try:
        while not inflater.eof and size <= bound and hashing.count <= bound and (chunk := source.read(GZIP_READ)):
            hashing.absorb(chunk)
            inflated.append(inflater.decompress(chunk, bound + 1 - size))
            size += len(inflated[-1])
    except zlib.error:
        return None
    if inflater.eof and size <= bound and _only_zeros_follow(source, inflater.unused_data, hashing, bound):
        return b"".join(inflated)
    return None


def _only_zeros_follow(source: IO[bytes], unused: bytes, hashing: _HashingReader, bound: int) -> bool:
    """Whether nothing but zero padding follows the gzip stream, reading (and hashing) it until the
    first other byte (another member, trailing data) or past `bound` bytes in all."""
    if unused.strip(b"\0"):
        return False
    while hashing.count <= bound and (chunk := source.read(GZIP_READ)):
        hashing.absorb(chunk)
        if chunk.strip(b"\0"):
            return False
    return hashing.count <= bound


def _iter_plain_buffer(tar: bytes, budget: _Budget, compressed: int) -> Iterator[_Member]:
    """_iter_plain_tar over a tar stream held whole (`_inflated_whole`): members sliced out of it
    instead of read block by block; the same headers, checks and refusals."""
    pos, end = 0, len(tar)
    while (header := _plain_header(tar[pos : pos + tarfile.BLOCKSIZE])) is not None:
        pos += tarfile.BLOCKSIZE
        admitted = _admitted(header, budget)
        if admitted is None:
            continue
        path, mode, size = admitted
        keep = _bytes_to_keep(path, False, budget.limits) or 0  # never None: not keep_all
        if pos + size > end:
            raise _NotPlain("truncated member")
        budget.bytes(size, compressed)
        data = tar[pos : pos + min(size, keep)] if keep else None
        pos += size + -size % tarfile.BLOCKSIZE
        if pos > end:
            raise _NotPlain("truncated padding")
        yield _Member(path, mode, data, size)
    if tar[pos + tarfile.BLOCKSIZE :].strip(b"\0"):
        raise _NotPlain("data after the end of the archive")


def _read_tar_members(source: IO[bytes], limits: Limits) -> tuple[dict[str, _Member], _Budget, _HashingReader]:
    """The archive's members, read by the fast walker when every member is plain (over the whole
    inflated stream when the archive is small, `_inflated_whole`; else streaming), else (and on
    any refusal, so that what is refused and why never depends on the walker) by tarfile."""
    budget, hashing = _Budget(limits, None), _HashingReader(source, limits.max_archive_bytes)
    try:
        tar = _inflated_whole(source, hashing, whole_inflate_bound(limits))
        if tar is not None:
            return _last_wins(_iter_plain_buffer(tar, budget, hashing.count)), budget, hashing
        source.seek(0)
        hashing = _HashingReader(source, limits.max_archive_bytes)
        return _last_wins(_iter_plain_tar(hashing, budget)), budget, hashing
    except (_NotPlain, InvalidArchive, EOFError, OSError, zlib.error, gzip.BadGzipFile, ValueError):
        source.seek(0)
    budget, hashing = _Budget(limits, None), _HashingReader(source, limits.max_archive_bytes)
    return _last_wins(_iter_tar(hashing, budget, keep_all=False)), budget, hashing


def _iter_zip(source: IO[bytes], budget: _Budget, limits: Limits) -> Iterator[_Member]:
    size = source.seek(0, io.SEEK_END)
    source.seek(0)
    if size > limits.max_archive_bytes:
        raise InvalidArchive("max-archive-size", f"archive is larger than {limits.max_archive_bytes} bytes")
    # zipfile builds one object per central-directory entry before anything can count them.
    if _count_central_entries(source) > 2 * limits.max_members:
        raise InvalidArchive("max-members", f"archive has more than {limits.max_members} members")
    compressed_total = 0
    try:
        with zipfile.ZipFile(source) as archive:
            for info in sorted(archive.infolist(), key=lambda i: i.filename):
                compressed_total += info.compress_size
                path = _clean_member_path(info.filename)
                if info.is_dir():
                    if path:
                        budget.folder(path)
                    continue
                unix_mode = info.external_attr >> 16
                # Python's zipfile (and some other tools) store bare permission bits (0o600) with
                # no file-type bits: only a stated type other than "regular" is refused.
                if stat.S_ISLNK(unix_mode):
                    raise InvalidArchive("member-type", f"member {info.filename!r} is a symbolic link in a zip (repacking would drop or alter it)")
                if stat.S_IFMT(unix_mode) and not stat.S_ISREG(unix_mode):
                    raise InvalidArchive("member-type", f"member {info.filename!r} is not a regular file")
                if not path:
                    raise InvalidArchive("member-path", f"member path {info.filename!r} is empty")
                if info.flag_bits & 0x1:
                    raise InvalidArchive("zip-encrypted", f"member {info.filename!r} is encrypted")
                if info.compress_type not in ZIP_METHODS:
                    raise InvalidArchive(
                        "zip-compression", f"member {info.filename!r} uses compression method {info.compress_type}"
                    )
                if budget.member(path):
                    # Unzip tools disagree on which copy wins: a repeated zip member is ambiguous.
                    raise InvalidArchive("duplicate-member", f"member {path!r} appears twice")
                with archive.open(info) as stream:
                    # Declared sizes can lie (overlapping entries share bytes): the budget counts the
                    # bytes actually inflated, against no more than the archive's real size.
                    data = _read_capped(stream, info.file_size, budget, lambda: min(compressed_total, size), None)
                yield _Member(path, unix_mode or 0o644, data, len(data or b""))
    except InvalidArchive:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error, NotImplementedError, ValueError) as exc:
        raise InvalidArchive("corrupt-archive", f"zip archive is truncated or corrupt: {exc}") from exc


def _count_central_entries(source: IO[bytes]) -> int:
    """At least as many as zipfile will parse: every central-directory entry starts with this signature."""
    count, tail = 0, b""
    source.seek(0)
    while block := source.read(CHUNK):
        window = tail + block
        count += window.count(ZIP_CENTRAL_SIGNATURE)
        tail = window[-(len(ZIP_CENTRAL_SIGNATURE) - 1) :]
    source.seek(0)
    return count


def _is_interesting(path: str) -> bool:
    base = posixpath.basename(path).lower()
    depth = path.count("/")
    return depth <= 1 and (base == "package.json" or base in README_NAMES)


def _package_root(paths: list[str]) -> str:
    """'' when package.json sits at the root, else the single top folder holding everything."""
    if "package.json" in paths:
        return ""
    tops = {p.split("/", 1)[0] for p in paths}
    if len(tops) == 1 and all("/" in p for p in paths):
        return tops.pop() + "/"
    raise InvalidArchive("no-package-json", "no package.json at the root or in a single top folder")


def _refuse_links_not_served_as_published(links: dict[str, str], root: str) -> None:
    """Links are hosted only in a tarball served byte for byte, and never as the manifest. A
    tarball without a top folder is repacked (as a zip is), which would drop or alter its links;
    a link named package.json is not a manifest (the case is folded: on macOS and Windows
    `PACKAGE.JSON` is the same file), and the build never follows a link to read one."""
    for path, target in links.items():
        if not root:
            raise InvalidArchive(
                "member-type",
                f"member {path!r} is a symbolic link in an archive without a top folder (repacking would drop or alter it)",
            )
        if path[len(root):].lower() == "package.json":
            raise InvalidArchive("member-type", f"member {path!r} is a symbolic link to {target[:200]!r}: package.json must be a regular file")


def _parse_manifest(data: bytes, limits: Limits) -> Any:
    if len(data) > limits.max_manifest_bytes:
        raise InvalidArchive("max-manifest-size", f"package.json is larger than {limits.max_manifest_bytes} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidArchive("manifest-encoding", f"package.json is not UTF-8: {exc}") from exc
    try:
        manifest = json.loads(text, parse_constant=_refuse_non_json_number, parse_float=_finite_float)
    except RecursionError:
        raise InvalidArchive("manifest-json", "package.json nests too deeply") from None
    except ValueError as exc:  # also Python's cap on the digits of an integer
        raise InvalidArchive("manifest-json", f"package.json is not valid JSON: {exc}") from exc
    try:
        # A lone surrogate escape ("\ud800") parses, but no UTF-8 document can carry it back out.
        json.dumps(manifest, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArchive("manifest-encoding", f"package.json holds an unpaired surrogate: {exc}") from exc
    return manifest


def _refuse_non_json_number(word: str) -> Any:
    raise ValueError(f"{word} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} does not fit a double")
    return value


def _pick_readme(members: dict[str, _Member], root: str, limits: Limits) -> tuple[str | None, str | None]:
    candidates = {
        m.path[len(root):].lower(): m
        for m in members.values()
        if m.path.startswith(root) and "/" not in m.path[len(root):]
    }
    for wanted in README_NAMES:
        member = candidates.get(wanted)
        if member is not None and member.data is not None:
            text = member.data[: limits.max_readme_bytes].decode("utf-8", errors="replace")
            return text, member.path[len(root):]
    return None, None


def file_list(sizes: dict[str, int], root: str) -> tuple[tuple[str, int], ...]:
    """(path below the package root, size) of every file, by path (where the site looks for bundled types)."""
    return tuple(sorted((path[len(root):], size) for path, size in sizes.items() if path.startswith(root)))


def build_npm_tarball(files: list[tuple[str, int, bytes]]) -> bytes:
    """A deterministic npm tarball: `package/` prefix, sorted entries, fixed mtimes and owners."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path, mode, data in sorted(files, key=lambda f: f[0]):
                info = tarfile.TarInfo("package/" + path)
                info.size = len(data)
                info.mtime = NPM_FIXED_MTIME
                info.mode = 0o755 if mode & 0o111 else 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sniff_format(head: bytes) -> str:
    if head.startswith(b"\x1f\x8b"):
        return "tgz"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    raise InvalidArchive("archive-format", "not a gzip-compressed tar or a zip archive")


def read_archive(source: IO[bytes], limits: Limits | None = None) -> ArchiveContents:
    """Reads one archive (tar.gz or zip, sniffed from its bytes) safely and completely.

    An npm-style tarball (everything under one top folder) is served byte for byte, so its
    digests are those of the source. Anything else is repacked into a deterministic npm tarball.
    """
    limits = limits or Limits()
    head = source.read(4)
    source.seek(0)
    kind = sniff_format(head)
    if kind == "tgz":
        members, budget, hashing = _read_tar_members(source, limits)
    else:
        budget, hashing = _Budget(limits, None), _HashingReader(source, limits.max_archive_bytes)
        members = _last_wins(_iter_zip(source, budget, limits))
    root = _package_root([*members, *budget.links])
    _refuse_links_not_served_as_published(budget.links, root)
    manifest_member = members.get(root + "package.json")
    if manifest_member is None or manifest_member.data is None:
        raise InvalidArchive("no-package-json", "no package.json found")
    manifest = _parse_manifest(manifest_member.data, limits)
    readme, readme_filename = _pick_readme(members, root, limits)
    file_count = len(members)
    listing = file_list({m.path: m.size for m in members.values()}, root)
    if kind == "tgz" and root:
        return ArchiveContents(manifest, readme, readme_filename, file_count, budget.unpacked, hashing.digests(), None, listing)
    if kind == "tgz":
        # Files at the root: npm strips one folder when unpacking, so repack under package/.
        source.seek(0)
        rebudget = _Budget(limits, None)
        members = _last_wins(_iter_tar(_HashingReader(source, limits.max_archive_bytes), rebudget, True))
    files = [(m.path[len(root):], m.mode, m.data or b"") for m in members.values()]
    tarball = build_npm_tarball(files)
    return ArchiveContents(
        manifest, readme, readme_filename, file_count, budget.unpacked, compute_digests(tarball), tarball, listing
    )


def read_archive_bytes(data: bytes, limits: Limits | None = None) -> ArchiveContents:
    return read_archive(io.BytesIO(data), limits)
