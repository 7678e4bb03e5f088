"""An in-memory ContentStorage, shipped for tests and experiments (the build cannot read it)."""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from registry_gen.errors import VersionConflict
from registry_gen.storage.contract import StoredObject, checked_key, spool_stream


class MemoryStorage:
    atomic_create = True  # check and write under one lock

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def exists(self, key: str) -> bool:
        return str(checked_key(key)) in self.objects

    def read(self, key: str) -> bytes | None:
        return self.objects.get(str(checked_key(key)))

    def open(self, key: str) -> BinaryIO | None:
        data = self.read(key)
        return None if data is None else io.BytesIO(data)

    def spool(self, key: str, target: Path) -> bool:
        stream = self.open(key)
        if stream is None:
            return False
        spool_stream(stream, target)
        return True

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        with self._lock:
            found = sorted((k, v) for k, v in self.objects.items() if k.startswith(prefix))
        for key, data in found:
            yield StoredObject(key, len(data), f"{len(data)}-{hashlib.md5(data).hexdigest()}")

    def create(self, key: str, data: bytes) -> None:
        normal = str(checked_key(key))
        with self._lock:
            if normal in self.objects:
                raise VersionConflict(f"{key} already exists")
            self.objects[normal] = bytes(data)

    def replace(self, key: str, data: bytes) -> None:
        normal = str(checked_key(key))
        with self._lock:
            self.objects[normal] = bytes(data)

    def remove(self, key: str) -> bool:
        normal = str(checked_key(key))
        with self._lock:
            return self.objects.pop(normal, None) is not None
