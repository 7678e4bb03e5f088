"""Where the write API keeps what it is given: archives and registry-meta.json files in content/.

The interface is key based (keys are '/'-separated paths relative to the content root, as
object names are), so an object-store implementation can follow the folder one. Keys follow
the layout the build reads: `<pkgdir>/<bare>-<version>.tgz` and `<pkgdir>/registry-meta.json`.
"""

from __future__ import annotations

import threading
from pathlib import Path, PurePosixPath
from typing import Protocol

from registry_gen.errors import VersionConflict
from registry_gen.meta import META_FILENAME, PackageMeta, dump_meta, parse_meta
from registry_gen.names import package_dir, tarball_filename
from registry_gen.writer import atomic_write_bytes, fsync_dir


def archive_key(name: str, version: str) -> str:
    """Where the API stores name@version: beside the package's meta file, npm's file name."""
    return f"{package_dir(name)}/{tarball_filename(name, version)}"


def meta_key(name: str) -> str:
    return f"{package_dir(name)}/{META_FILENAME}"


class ContentStorage(Protocol):
    """The content/ source of truth, as the write API sees it. Every write is durable on return."""

    def exists(self, key: str) -> bool: ...

    def read(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
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
    return None if raw is None else parse_meta(raw)


def write_meta(storage: ContentStorage, key: str, meta: PackageMeta) -> None:
    storage.replace(key, dump_meta(meta))


def _checked_key(key: str) -> PurePosixPath:
    path = PurePosixPath(key)
    if path.is_absolute() or not path.parts or any(p in ("", ".", "..") or p.startswith(".") for p in path.parts):
        raise ValueError(f"storage key {key!r} must be a relative path without dot segments")
    return path


class FolderStorage:
    """content/ on a local disk: temp file + fsync + rename + fsync of the folder for every write."""

    def __init__(self, root: Path):
        self.root = Path(root)
        # create() must be check-and-write at once; the build lock already serialises writers
        # across processes, this covers threads that call create() without holding it.
        self._create_lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*_checked_key(key).parts)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def create(self, key: str, data: bytes) -> None:
        path = self._path(key)
        with self._create_lock:
            if path.exists():
                raise VersionConflict(f"{key} already exists in content/")
            atomic_write_bytes(path, data, durable=True)

    def replace(self, key: str, data: bytes) -> None:
        atomic_write_bytes(self._path(key), data, durable=True)

    def remove(self, key: str) -> bool:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        fsync_dir(path.parent)
        self._prune(path.parent)
        return True

    def _prune(self, folder: Path) -> None:
        """Drops folders left empty (an unpublished scope), never the root itself."""
        root = self.root.resolve()
        current = folder.resolve()
        while current != root and root in current.parents:
            try:
                current.rmdir()
            except OSError:
                break
            current = current.parent
        fsync_dir(current)


class MemoryStorage:
    """An in-memory ContentStorage, shipped for tests and experiments (the build cannot read it)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def exists(self, key: str) -> bool:
        return str(_checked_key(key)) in self.objects

    def read(self, key: str) -> bytes | None:
        return self.objects.get(str(_checked_key(key)))

    def create(self, key: str, data: bytes) -> None:
        with self._lock:
            normal = str(_checked_key(key))
            if normal in self.objects:
                raise VersionConflict(f"{key} already exists")
            self.objects[normal] = bytes(data)

    def replace(self, key: str, data: bytes) -> None:
        self.objects[str(_checked_key(key))] = bytes(data)

    def remove(self, key: str) -> bool:
        return self.objects.pop(str(_checked_key(key)), None) is not None
