"""One leader at a time among the processes of one PostgreSQL state, fenced by an epoch.

Leadership is the session-level advisory lock (LOCK_REGISTRY, LEADER), held on a connection of its
own that never goes back to the pool. Taking it bumps `leadership.epoch` (and records the term in
`leader_terms`). A PostgreSQL restart drops every session lock without telling their holders, so
the lock alone could let an old leader go on acting beside a new one: each of the leader's actions
therefore runs inside a transaction that reads the epoch `FOR SHARE` and goes ahead only when it is
still the leader's own. That row lock also makes a new leader's bump wait until a running action
has committed, so two actions of different epochs never overlap. Each action leaves a row in
`leader_actions` (epoch, holder, start and end on the database's clock): the record that shows it.

The tables are coordination, not the ledger: made on first use, idempotently, under the schema lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Final

import psycopg

from registry_gen.errors import NotLeader, StateUnavailable
from registry_gen.state.postgres_base import CONNECT_TIMEOUT_SECONDS, LOCK_REGISTRY, LOCK_SCHEMA, POOL, PgDb

LEADER: Final = 3  # second key in LOCK_REGISTRY (after TREE, LISTINGS, JOURNAL)
LEADER_TABLES: Final = """
CREATE TABLE IF NOT EXISTS leadership (
    id integer PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL, holder text, since timestamptz
);
INSERT INTO leadership (id, epoch) VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS leader_terms (epoch bigint PRIMARY KEY, holder text NOT NULL, acquired timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS leader_actions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, epoch bigint NOT NULL, holder text NOT NULL,
    action text NOT NULL, started timestamptz NOT NULL, finished timestamptz NOT NULL
)
"""


class PgLeadership:
    """The leadership of one process (`holder` names it in the records)."""

    def __init__(self, url: str, holder: str) -> None:
        self.url = url
        self.holder = holder
        self.epoch: int | None = None  # while this process believes it leads
        self._session: PgDb | None = None
        self._made = False

    def _pooled(self) -> PgDb:
        db = POOL.connect(self.url)
        if not self._made:
            try:
                db.begin()
                db.lock(LOCK_SCHEMA, LEADER)
                db.script(LEADER_TABLES)
                db.commit()
            except BaseException:
                db.close()
                raise
            self._made = True
        return db

    def try_lead(self) -> int | None:
        """The epoch this process leads in, taking the leadership when nobody holds it; None when
        another process leads. A lost session (PostgreSQL restarted) ends this process's term."""
        if self.epoch is not None and self._session_alive():
            return self.epoch
        self.resign()
        self._pooled().close()  # the tables exist before anyone leads
        session = self._open_session()
        if not session.execute("SELECT pg_try_advisory_lock(?, ?)", (LOCK_REGISTRY, LEADER)).fetchone()[0]:
            self._close_session()
            return None
        self.epoch = self._new_term()
        return self.epoch

    def _open_session(self) -> PgDb:
        """A connection of its own (the pool's are shared and recycled): the lock lives with it."""
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
        except psycopg.OperationalError as exc:
            raise StateUnavailable("the state database cannot be reached; the leadership waits") from exc
        self._session = PgDb(conn, self.url)
        return self._session

    def _session_alive(self) -> bool:
        if self._session is None:
            return False
        try:
            self._session.execute("SELECT 1")
        except StateUnavailable:
            return False
        return True

    def _new_term(self) -> int:
        db = self._pooled()
        try:
            db.begin()
            row = db.execute(
                "UPDATE leadership SET epoch = epoch + 1, holder = ?, since = clock_timestamp() WHERE id = 1 RETURNING epoch, since",
                (self.holder,),
            ).fetchone()
            db.execute("INSERT INTO leader_terms (epoch, holder, acquired) VALUES (?, ?, ?)", (row[0], self.holder, row[1]))
            db.commit()
        finally:
            db.close()
        return int(row[0])

    @contextmanager
    def fenced(self, action: str) -> Iterator[None]:
        """Runs the body as this epoch's action, or raises NotLeader (and resigns) when the epoch
        moved on; the body's record commits with the check, and no new term starts meanwhile."""
        if self.epoch is None:
            raise NotLeader("this process does not lead")
        db = self._pooled()
        try:
            db.begin()
            row = db.execute("SELECT epoch, clock_timestamp() FROM leadership WHERE id = 1 FOR SHARE").fetchone()
            if int(row[0]) != self.epoch:
                raise NotLeader(f"epoch {self.epoch} is over (now {row[0]})")
            yield
            db.execute(
                "INSERT INTO leader_actions (epoch, holder, action, started, finished) VALUES (?, ?, ?, ?, clock_timestamp())",
                (self.epoch, self.holder, action, row[1]),
            )
            db.commit()
        except NotLeader:
            self.resign()
            raise
        finally:
            db.close()

    def resign(self) -> None:
        """Ends this process's term: its session (and the lock with it) closed."""
        self.epoch = None
        self._close_session()

    def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            with suppress(psycopg.Error):
                session.conn.close()

