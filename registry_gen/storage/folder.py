"""content/ on a local disk: the embedded default (`content_dir`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from registry_gen.errors import VersionConflict
from registry_gen.storage.contract import StoredObject, checked_key, is_content_key
from registry_gen.writer import atomic_copy, atomic_write_bytes, create_exclusive, fsync_dir


class FolderStorage:
    """Every write is atomic and durable (registry_gen.writer): a replace renames, a create links (+ fsync of the folder)."""

    atomic_create = True  # a hard link fails when the name exists, across threads and processes alike

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*checked_key(key).parts)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def open(self, key: str) -> BinaryIO | None:
        try:
            return open(self._path(key), "rb")  # noqa: SIM115 - the caller closes it
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def spool(self, key: str, target: Path) -> bool:
        source = self._path(key)
        if not source.is_file():
            return False
        atomic_copy(source, target)
        return True

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        """Walks only the folder the prefix names (the deepest whole segment of it), in key order."""
        folder_part = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root.joinpath(*folder_part.split("/")) if folder_part else self.root
        base = f"{folder_part}/" if folder_part else ""
        for key, stat in _walk(start, base):
            if key.startswith(prefix):
                yield StoredObject(key, stat.st_size, f"{stat.st_size}-{stat.st_mtime_ns}")

    def create(self, key: str, data: bytes) -> None:
        """Links the written file to its name: the link fails if the name exists, so two writers
        (threads or processes) can never both create one key."""
        if not create_exclusive(self._path(key), data, durable=True):
            raise VersionConflict(f"{key} already exists in content/")

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


def _walk(folder: Path, base: str) -> Iterator[tuple[str, os.stat_result]]:
    """(key, stat) of every content file under `folder`, in key order: a folder's entries sort as
    `name/` (so `a-b` comes before `a/x`, as in a bucket's listing)."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    keyed = sorted(((entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name), entry) for entry in entries)
    for name, entry in keyed:
        if not is_content_key(name.rstrip("/")):
            continue
        if name.endswith("/"):
            yield from _walk(Path(entry.path), base + name)
        elif entry.is_file():
            yield base + name, entry.stat()
