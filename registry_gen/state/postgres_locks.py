"""The write lock on PostgreSQL (registry_gen.state.locks): transaction-level advisory locks on a
connection held for the write, so a process that dies releases them with its connection.

Key space (two int4 keys, postgres_base): (LOCK_PACKAGE, package_key(name)) for one package,
exclusive; (LOCK_REGISTRY, TREE) shared by every package write and exclusive for a whole build.
A wait is bounded by `lock_timeout` (LockTimeout: HTTP 503, Retry-After); PostgreSQL unreachable
is StateUnavailable at once (connect_timeout), also a 503.

A restart of the server ends the lock's connection and the lock with it; the writer learns it from
`HeldPgLock.confirm` (a round trip on that connection: while it answers, its transaction, and so
the lock, has lasted), LockLost, before it stores anything or commits its build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg

from registry_gen.errors import LockLost, LockTimeout, StateUnavailable
from registry_gen.state.locks import HeldLock
from registry_gen.state.postgres_base import LOCK_PACKAGE, LOCK_REGISTRY, TREE, PgDb, package_key


class HeldPgLock:
    """The advisory locks of one write, held by the open transaction of `db`."""

    def __init__(self, db: PgDb, what: str) -> None:
        self.db = db
        self.what = what

    def confirm(self) -> None:
        """LockLost unless the lock's connection still answers in its transaction. A server restart
        after this check also ends the connection of the step that follows it (a build's commit
        fails), so a step confirmed just before it runs under the lock."""
        try:
            self.db.execute("SELECT 1")
        except StateUnavailable as exc:
            raise LockLost(
                f"this write lost its lock on {self.what} (the state database restarted); nothing of it was kept: retry shortly"
            ) from exc


class PgWriteLock:
    def __init__(self, connect: Callable[[], PgDb]) -> None:
        self.connect = connect

    def package(self, name: str, timeout: float) -> AbstractContextManager[HeldLock]:
        return self._held(timeout, f"package {name}", [(LOCK_REGISTRY, TREE, True), (LOCK_PACKAGE, package_key(name), False)])

    def whole(self, timeout: float) -> AbstractContextManager[HeldLock]:
        return self._held(timeout, "the registry", [(LOCK_REGISTRY, TREE, False)])

    @contextmanager
    def _held(self, timeout: float, what: str, keys: list[tuple[int, int, bool]]) -> Iterator[HeldLock]:
        db = self.connect()
        try:
            try:  # the transaction and its locks in one round trip
                db.begin(lock_timeout_ms=max(1, int(timeout * 1000)), locks=keys)
            except psycopg.errors.LockNotAvailable as exc:
                raise LockTimeout(f"another writer holds {what}; retry shortly") from exc
            yield HeldPgLock(db, what)
        finally:
            db.close()  # rolls back: the locks go with the transaction
