"""What every PostgreSQL piece of the state shares: connections (pooled per process), the
placeholder style, the errors, and the advisory lock keys.

The SQL of the SQLite classes is kept portable (standard upserts, no SQLite-only functions in what
the PostgreSQL classes inherit), so the two stores share one body of SQL: `PgDb` runs it with
psycopg's `%s` placeholders in place of SQLite's `?`, and the PostgreSQL classes override only
what differs (temporary tables, transactions, the pins' check, the journal's ordering lock).

Advisory locks use PostgreSQL's two-int4 key space (kept apart from the one-bigint key space, which
user_api's schema lock uses): the first key is a class below, the second an object in it.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import select
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg.pq import TransactionStatus

from registry_gen.errors import StateUnavailable

CONNECT_TIMEOUT_SECONDS: Final = 3  # PostgreSQL down: a write gets its 503 in this time, never a hang
POOL_IDLE_AT_MOST: Final = 8  # idle connections kept per database in one process
# Advisory lock classes (first key); their second key:
LOCK_SCHEMA: Final = 0x52470001  # 0: the state's schema steps
LOCK_PACKAGE: Final = 0x52470002  # package_key(name): one package's writes (exclusive)
LOCK_REGISTRY: Final = 0x52470003  # TREE (shared by package writes, exclusive for a whole build),
TREE: Final = 0  # LISTINGS (a build's listings and commit, one at a time),
LISTINGS: Final = 1  # JOURNAL (appending to the journal: numbers follow the order of commits)
JOURNAL: Final = 2
_CURSORS = itertools.count()
_LOCK_VERBS: Final = {True: "pg_advisory_xact_lock_shared", False: "pg_advisory_xact_lock"}  # by `shared`


def package_key(name: str) -> int:
    """The package lock's second key: the first 4 bytes of the name's sha256 as a signed int4
    (two names sharing one only wait for each other, never corrupt anything)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "big", signed=True)


def placeholders(sql: str) -> str:
    """The SQLite classes' `?` placeholders as psycopg's `%s` (a literal % doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


@contextmanager
def reachable(url: str) -> Iterator[None]:
    """PostgreSQL gone (refused, timed out, restarted mid-call) as StateUnavailable, a 503 to
    clients; the idle connections to it are dropped (a restarted server left them all dead)."""
    try:
        yield
    except psycopg.errors.LockNotAvailable:
        raise  # a bounded lock wait ran out: the server is fine (postgres_locks says LockTimeout)
    except psycopg.OperationalError as exc:
        POOL.forget(url)
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        raise StateUnavailable(f"the state database cannot be reached ({lines[0]}); retry shortly") from exc


class PgDb:
    """One psycopg connection, in autocommit (transactions opened explicitly), speaking the SQLite
    classes' dialect: `execute`/`executemany` with `?` placeholders, `in_transaction`."""

    def __init__(self, conn: psycopg.Connection[Any], url: str) -> None:
        self.conn = conn
        self.url = url
        self.made_temp = False  # a statement named a temporary table: dropped before the pool reuses it
        self._ready: dict[tuple[str, tuple[Any, ...]], psycopg.Cursor[Any]] = {}  # prefetched answers, by SQL and parameters

    def _sent(self, sql: str) -> str:
        if not self.made_temp and "TEMP" in sql.upper():
            self.made_temp = True
        return placeholders(sql)

    @property
    def in_transaction(self) -> bool:
        return self.conn.info.transaction_status != TransactionStatus.IDLE

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        if self._ready:
            try:
                answered = self._ready.pop(_query_key(sql, params), None)
            except TypeError:  # an unhashable parameter (a dict): no prefetched read has one
                answered = None
            if answered is not None:
                return answered
        with reachable(self.url):
            return self.conn.execute(self._sent(sql), params)  # type: ignore[arg-type]

    @contextmanager
    def prefetched(self, queries: Sequence[tuple[str, Sequence[Any]]]) -> Iterator[None]:
        """Reads sent together (psycopg's pipeline mode: one round trip for all, not one each),
        each answered from its result when the code inside asks it with the same SQL and
        parameters, once: the SQLite classes' methods run unchanged, and only the wait goes. For
        reads the block asks before it writes anything they read; a read it does not ask is
        dropped at the end. Nested blocks send only what no outer one has sent."""
        fresh = [(key, sql, params) for sql, params in queries if (key := _query_key(sql, params)) not in self._ready]
        if fresh:
            with reachable(self.url), self.conn.pipeline():
                cursors = [self.conn.execute(self._sent(sql), params) for _, sql, params in fresh]  # type: ignore[arg-type]
            self._ready.update(zip((key for key, _, _ in fresh), cursors))
        try:
            yield
        finally:
            for key, _, _ in fresh:
                self._ready.pop(key, None)

    @contextmanager
    def writes_together(self) -> Iterator[None]:
        """The block's statements sent without waiting for each (psycopg's pipeline mode): a
        statement whose result the block reads waits for it (and those before), the rest are
        answered at the block's end, all in its transaction. For a run of writes whose answers the
        block does not need; an error of one is raised at the next read or at the end, inside the
        block as before. Not for COPY or a server-side cursor (no pipeline takes them)."""
        with reachable(self.url), self.conn.pipeline():
            yield

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        batch = list(rows)
        if batch:
            with reachable(self.url), self.conn.cursor() as cursor:
                cursor.executemany(self._sent(sql), batch)  # type: ignore[arg-type]

    def script(self, script: str) -> None:
        """Statements separated by `;` (no parameters), one round trip each, in order."""
        for statement in (s.strip() for s in script.split(";")):
            if statement:
                self.execute(statement)

    def copy_rows(self, table: str, columns: str, rows: Iterable[Sequence[Any]]) -> None:
        """Rows appended to `table` by COPY: streamed, never all in the heap at once."""
        statement = self._sent(f"COPY {table} ({columns}) FROM STDIN")
        with reachable(self.url), self.conn.cursor() as cursor, cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)

    def stream(self, sql: str, params: Sequence[Any], batch: int) -> Iterator[Any]:
        """A query's first column through a server-side cursor, `batch` rows at a time (inside the
        caller's transaction): a full build's lists never sit whole in the heap."""
        with reachable(self.url), self.conn.cursor(name=f"stream_{next(_CURSORS)}") as cursor:
            cursor.itersize = batch
            cursor.execute(self._sent(sql), params)  # type: ignore[arg-type]
            for row in cursor:
                yield row[0]

    def begin(self, *, durable: bool = True, lock_timeout_ms: int | None = None, locks: Sequence[tuple[int, int, bool]] = ()) -> None:
        """`durable=False`: this transaction's commit does not wait for the disk (as on SQLite);
        `lock_timeout_ms`: how long any lock of it may be waited for; `locks`: advisory locks
        (first key, second key, shared) taken at once, in order, as `lock` takes them. One round
        trip (no parameters: psycopg sends the statements together)."""
        statements = ["BEGIN"]
        if not durable:
            statements.append("SET LOCAL synchronous_commit = off")
        if lock_timeout_ms is not None:
            statements.append(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")  # an int: milliseconds
        for first, second, shared in locks:  # ints, written into the statement
            statements.append(f"SELECT {_LOCK_VERBS[shared]}({int(first)}, {int(second)})")
        self.execute("; ".join(statements))

    def commit(self) -> None:
        if self.in_transaction:
            self.execute("COMMIT")

    def rollback(self) -> None:
        if self.in_transaction and not self.conn.closed:
            try:
                self.execute("ROLLBACK")
            except StateUnavailable:
                pass  # the connection is gone, and its transaction with it

    def lock(self, first: int, second: int, *, shared: bool = False) -> None:
        """A transaction-level advisory lock (released at commit or rollback)."""
        self.execute(f"SELECT {_LOCK_VERBS[shared]}(?, ?)", (first, second))  # one of two names

    def still_open(self) -> bool:
        return _still_open(self.conn)

    def close(self) -> None:
        self.rollback()
        POOL.give_back(self.conn, self.url, discard_temp=self.made_temp)


def _query_key(sql: str, params: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
    """How a prefetched read is recognised: its SQL and parameters (a list parameter as a tuple)."""
    return sql, tuple(tuple(p) if isinstance(p, list) else p for p in params)


def _still_open(conn: psycopg.Connection[Any]) -> bool:
    """An idle connection has nothing to read: bytes waiting (a restart's "terminating connection",
    or the end of the stream) mean the server left. Checked without a round trip; a healthy one
    taken for dead (a stray notice) costs a reconnect, a dead one reused costs the request a 503."""
    if conn.closed:
        return False
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    return not readable


class _Pool:
    """Idle connections per database URL, per process (a forked worker never uses its parent's):
    a publish opens a session, a view and the journal, ~3 ms each to connect afresh."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[int, str], list[psycopg.Connection[Any]]] = {}

    def connect(self, url: str) -> PgDb:
        conn = self._take_idle(url)
        if conn is None:
            with reachable(url):
                conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
        return PgDb(conn, url)

    def _take_idle(self, url: str) -> psycopg.Connection[Any] | None:
        """An idle connection that is still open, the dead ones closed on the way."""
        while True:
            with self._lock:
                idle = self._idle.get((os.getpid(), url), [])
                conn = idle.pop() if idle else None
            if conn is None or _still_open(conn):
                return conn
            conn.close()

    def give_back(self, conn: psycopg.Connection[Any], url: str, *, discard_temp: bool = True) -> None:
        """Kept for reuse when healthy and idle (its temporary tables dropped, when it made any:
        most connections never do, and the round trip is a publish's), else closed."""
        if conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
            conn.close()
            return
        try:
            if discard_temp:
                conn.execute("DISCARD TEMP")
        except psycopg.Error:
            conn.close()
            return
        key = (os.getpid(), url)
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < POOL_IDLE_AT_MOST:
                idle.append(conn)
                return
        conn.close()

    def forget(self, url: str) -> None:
        """Closes the idle connections to `url` (a restarted server left them dead)."""
        with self._lock:
            idle = self._idle.pop((os.getpid(), url), [])
        for conn in idle:
            conn.close()


POOL = _Pool()
