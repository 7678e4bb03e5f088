"""The write lock on PostgreSQL (registry_gen.state.locks): transaction-level advisory locks on a
connection held for the write, so a process that dies releases them with its connection.

Key space (two int4 keys, postgres_base): (LOCK_PACKAGE, package_key(name)) for one package,
exclusive; (LOCK_REGISTRY, TREE) shared by every package write and exclusive for a whole build.
A wait is bounded by `lock_timeout` (LockTimeout: HTTP 503, Retry-After); PostgreSQL unreachable
is StateUnavailable at once (connect_timeout), also a 503.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg

from registry_gen.errors import LockTimeout
from registry_gen.state.postgres_base import LOCK_PACKAGE, LOCK_REGISTRY, TREE, PgDb, package_key


class PgWriteLock:
    def __init__(self, connect: Callable[[], PgDb]) -> None:
        self.connect = connect

    def package(self, name: str, timeout: float) -> AbstractContextManager[None]:
        return self._held(timeout, f"package {name}", [(LOCK_REGISTRY, TREE, True), (LOCK_PACKAGE, package_key(name), False)])

    def whole(self, timeout: float) -> AbstractContextManager[None]:
        return self._held(timeout, "the registry", [(LOCK_REGISTRY, TREE, False)])

    @contextmanager
    def _held(self, timeout: float, what: str, keys: list[tuple[int, int, bool]]) -> Iterator[None]:
        db = self.connect()
        try:
            db.begin(lock_timeout_ms=max(1, int(timeout * 1000)))
            try:
                for first, second, shared in keys:
                    db.lock(first, second, shared=shared)
            except psycopg.errors.LockNotAvailable as exc:
                raise LockTimeout(f"another writer holds {what}; retry shortly") from exc
            yield
        finally:
            db.close()  # rolls back: the locks go with the transaction
