"""The content store's contract: what the write API (and, next, the build) asks of content/.

Keys are '/'-separated paths relative to the content root, as object names are: the same key
names the same object in a folder, in memory and in a bucket. The layout is the one the build
reads: `<pkgdir>/<bare>-<version>.tgz` and `<pkgdir>/registry-meta.json`. A key never has an
empty, `.` or `..` segment, nor one starting with a dot: dot names are the stores' own (temp
files, probes), never content, and listings leave them out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from registry_gen.errors import BrokenMeta, InvalidManifest
from registry_gen.meta import META_FILENAME, PackageMeta, dump_meta, parse_meta
from registry_gen.names import package_dir, tarball_filename
from registry_gen.writer import atomic_write_stream

SPOOL_BLOCK = 1 << 20  # bytes per read when a stream is copied to a file


def archive_key(name: str, version: str) -> str:
    """Where the API stores name@version: beside the package's meta file, npm's file name."""
    return f"{package_dir(name)}/{tarball_filename(name, version)}"


def meta_key(name: str) -> str:
    return f"{package_dir(name)}/{META_FILENAME}"


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One object as a listing sees it. `token` changes whenever the bytes change (it may change
    without them, e.g. a folder's file rewritten with the same bytes): a build compares it with
    the one it saw last time to know what to read again, without reading anything."""

    key: str
    size: int
    token: str
    modified: float | None = None  # seconds since the epoch, where the store says (a bucket's LastModified)


class ContentStorage(Protocol):
    """The content/ source of truth. Every write is durable on return; a failure raises a
    `RegistryError` (`StorageUnavailable` when retrying later may work) and leaves the object as
    it was before or as it is after, never half-written."""

    @property
    def atomic_create(self) -> bool:
        """True when `create` is exact against concurrent writers (the store checks and writes in
        one step); False when it is check-then-write, and only the caller's lock or database
        constraint decides a race (docs/deploying/object-store.md)."""
        ...

    def exists(self, key: str) -> bool: ...

    def read(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        ...

    def open(self, key: str) -> BinaryIO | None:
        """A stream of the object's bytes (the caller closes it), or None when there is none: a
        big archive is read without holding it whole."""
        ...

    def spool(self, key: str, target: Path) -> bool:
        """Copies the object into the local file `target` (atomically replaced); False when there
        is no such object."""
        ...

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        """Every object whose key starts with `prefix`, each once, in no order the contract promises
        (AWS lists in UTF-8 byte order, SeaweedFS folder by folder): a caller that needs one sorts."""
        ...

    def create(self, key: str, data: bytes) -> None:
        """Stores a new object; raises VersionConflict when the key already exists (never overwrites)."""
        ...

    def replace(self, key: str, data: bytes) -> None:
        """Stores or atomically overwrites an object."""
        ...

    def remove(self, key: str) -> bool:
        """Deletes an object; False when there was none."""
        ...


def read_meta(storage: ContentStorage, key: str) -> PackageMeta | None:
    raw = storage.read(key)
    return None if raw is None else parsed_meta(key, raw)


def parsed_meta(key: str, raw: bytes) -> PackageMeta:
    """content/'s meta at `key`; BrokenMeta (naming the file and the fix) when it does not parse."""
    try:
        return parse_meta(raw)
    except InvalidManifest as exc:
        raise BrokenMeta(key, str(exc)) from exc


def write_meta(storage: ContentStorage, key: str, meta: PackageMeta) -> None:
    storage.replace(key, dump_meta(meta))


def checked_key(key: str) -> PurePosixPath:
    """The key as a relative path; ValueError for one that could leave the root or name a store's own file."""
    path = PurePosixPath(key)
    if path.is_absolute() or not path.parts or str(path) != key or any(p.startswith(".") for p in path.parts):
        raise ValueError(f"storage key {key!r} must be a relative path without empty or dot segments")
    return path


def is_content_key(key: str) -> bool:
    """False for what a listing must leave out: the stores' own dot files and folder markers, and a
    key with an empty segment (`a//b`, put into a bucket by other means), which `checked_key`
    refuses: listed, every read of it would fail (a start's sync with it)."""
    return bool(key) and not any(not part or part.startswith(".") for part in key.split("/"))


def spool_stream(stream: BinaryIO, target: Path) -> None:
    """`stream`'s bytes into `target`, atomically (a reader sees the old file or the whole new one)."""
    atomic_write_stream(target, stream, SPOOL_BLOCK)
