"""The write lock's contract: what a writer holds while it reads, changes content/ and builds.

    lock.package(name, timeout)   one package's write (publish, dist-tag, unpublish...)
    lock.whole(timeout)           every package at once (a whole build, an import batch)

On the embedded default both are the tree's file lock (`Settings.lock_file`, shared by
`registry-gen build`, watch mode and the API): one writer at a time. On PostgreSQL
(registry_gen.state.postgres_locks) a package's writes take that package's advisory lock, so
writes of different packages run side by side on any number of processes and machines, and a
whole build takes the registry's lock exclusively. Either way a wait is bounded: past `timeout`
seconds it is LockTimeout (HTTP 503 with Retry-After), never a hang.

Each yields a `HeldLock`: `confirm()` raises LockLost when the lock is no longer held. A writer
confirms before each step that makes its write visible (storing content/, its build's commit):
a PostgreSQL lock goes with its connection when the server restarts, while the writer, whose
other steps reconnect, would otherwise go on beside the next holder.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

from registry_gen.errors import LockTimeout


class HeldLock(Protocol):
    def confirm(self) -> None: ...


class WriteLock(Protocol):
    def package(self, name: str, timeout: float) -> AbstractContextManager[HeldLock]: ...
    def whole(self, timeout: float) -> AbstractContextManager[HeldLock]: ...


class HeldFile:
    """The file lock, held: it is this process's open file, so it lasts as long as the process."""

    def confirm(self) -> None:
        return None


class FileWriteLock:
    """The embedded default's lock: the tree's lock file, for a package's write as for the whole."""

    def __init__(self, lock_file: Path) -> None:
        from filelock import FileLock  # loaded by a writer only (registry_gen.buildlock says why)

        lock_file.parent.mkdir(parents=True, exist_ok=True)
        self.path = lock_file
        self.lock = FileLock(str(lock_file))

    def package(self, name: str, timeout: float) -> AbstractContextManager[HeldLock]:
        return self.whole(timeout)

    @contextmanager
    def whole(self, timeout: float) -> Iterator[HeldLock]:
        from filelock import Timeout

        try:
            self.lock.acquire(timeout=timeout)
        except Timeout as exc:
            raise LockTimeout(f"another build holds {self.path}; retry shortly") from exc
        try:
            yield HeldFile()
        finally:
            self.lock.release()
