"""The hook store (registry_gen.hooks.store.HookStore) on the user store's database: hooks belong to
accounts, so they live beside them, on SQLite or PostgreSQL through the same Dialect. The tables
are part of each dialect's schema (store_sqlite.TABLES, store_postgres.SCHEMA: HOOK_TABLES)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import urlsplit

from registry_gen.hooks.rules import Hook, HookRefused
from registry_gen.hooks.store import PENDING, Attempt, Delivery, NewDelivery, StoredHook
from registry_gen.timestamps import now_iso
from user_api import store_audit
from user_api.errors import StoreUnavailable
from user_api.sqlstore import Dialect, Tx, canonical_uuid

# One text for both dialects: times of the outbox are seconds since the epoch (DOUBLE PRECISION / double), the
# hooks' own are ISO text, as npm shows them.
HOOK_TABLES: Final = """
CREATE TABLE IF NOT EXISTS hooks (
    id TEXT PRIMARY KEY,
    user_pk BIGINT NOT NULL REFERENCES users (pk) ON DELETE CASCADE,
    type TEXT NOT NULL,
    name TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    secret TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS hooks_by_user ON hooks (user_pk);
CREATE TABLE IF NOT EXISTS hook_deliveries (
    id TEXT PRIMARY KEY,
    hook_id TEXT NOT NULL REFERENCES hooks (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    package TEXT NOT NULL,
    event TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    due DOUBLE PRECISION NOT NULL,
    claimed_by TEXT,
    claimed_until DOUBLE PRECISION,
    last_attempt TEXT,
    response_code INTEGER,
    last_error TEXT,
    latency_ms INTEGER,
    excerpt TEXT
);
CREATE INDEX IF NOT EXISTS hook_deliveries_due ON hook_deliveries (status, due);
CREATE INDEX IF NOT EXISTS hook_deliveries_by_hook ON hook_deliveries (hook_id, package, seq);
CREATE TABLE IF NOT EXISTS hook_cursor (id INTEGER PRIMARY KEY CHECK (id = 1), seq BIGINT NOT NULL);
INSERT INTO hook_cursor (id, seq) VALUES (1, 0) ON CONFLICT DO NOTHING;
"""

_HOOK: Final = (
    "SELECT h.id, u.username, u.id, h.type, h.name, h.endpoint, h.created_at, h.updated_at,"
    " (SELECT max(d.last_attempt) FROM hook_deliveries d WHERE d.hook_id = h.id AND d.last_attempt IS NOT NULL),"
    " (SELECT d.response_code FROM hook_deliveries d WHERE d.hook_id = h.id AND d.last_attempt IS NOT NULL"
    "  ORDER BY d.last_attempt DESC LIMIT 1), h.secret, u.status"
    " FROM hooks h JOIN users u ON u.pk = h.user_pk"
)
_DELIVERY: Final = (
    "SELECT id, hook_id, seq, package, event, status, attempts, created, due, last_attempt, response_code,"
    " last_error, latency_ms, excerpt FROM hook_deliveries"
)


def _hook(row: Sequence[Any]) -> Hook:
    return Hook(str(row[0]), row[1], str(row[2]), row[3], row[4], row[5], row[6], row[7], row[8], int(row[9] or 0))


def _delivery(row: Sequence[Any]) -> Delivery:
    return Delivery(row[0], row[1], int(row[2]), row[3], json.loads(row[4]), row[5], int(row[6]), float(row[7]), float(row[8]),
                    *row[9:14])  # fmt: skip


def _record(tx: Tx, event: str, hook: Hook) -> None:
    """The audit log's entry of a hook change: what it watches, never its endpoint's query or secret."""
    watched = ("~" if hook.type == "owner" else "") + hook.name
    store_audit.record(tx, event, hook.owner, hook.owner_id, {"hook": hook.id, "watches": watched, "host": _host(hook.endpoint)})


def _host(endpoint: str) -> str:
    return urlsplit(endpoint).hostname or ""


class SqlHookStore:
    """HookStore on a user store's Dialect (its connections, its transactions)."""

    def __init__(self, dialect: Dialect):
        self.dialect = dialect
        # PostgreSQL: instances claiming at once skip each other's rows (SQLite: BEGIN IMMEDIATE serialises them).
        self._skip_locked = "" if dialect.name == "sqlite" else " FOR UPDATE OF d SKIP LOCKED"

    @contextmanager
    def _tx(self, *, write: bool) -> Iterator[Tx]:
        try:
            with (self.dialect.write() if write else self.dialect.read()) as tx:
                yield tx
        except Exception as exc:
            if self.dialect.is_unavailable(exc):
                raise StoreUnavailable() from exc
            raise

    # ---- hooks

    def create_hook(self, owner_id: str, type_: str, name: str, endpoint: str, secret_cipher: str, *, limit: int) -> Hook:
        key, hook_id, now = canonical_uuid(owner_id), str(uuid.uuid4()), now_iso()
        with self._tx(write=True) as tx:
            owner = tx.one(f"SELECT pk FROM users WHERE id = ? AND status = 'active'{self.dialect.for_update}", (key,))
            if owner is None:
                raise HookRefused("the account is not active")
            count = tx.one("SELECT count(*) FROM hooks WHERE user_pk = ?", (owner[0],))
            if count is not None and int(count[0]) >= limit:
                raise HookRefused(f"an account may have at most {limit} hooks (hooks.max_per_user); remove one first")
            tx.run("INSERT INTO hooks (id, user_pk, type, name, endpoint, secret, created_at, updated_at)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (hook_id, owner[0], type_, name, endpoint, secret_cipher, now, now))  # fmt: skip
            row = tx.one(f"{_HOOK} WHERE h.id = ?", (hook_id,))
            assert row is not None
            _record(tx, "hook:add", _hook(row))
        return _hook(row)

    def get_hook(self, hook_id: str) -> Hook | None:
        with self._tx(write=False) as tx:
            row = tx.one(f"{_HOOK} WHERE h.id = ?", (hook_id,))
        return None if row is None else _hook(row)

    def list_hooks(self, owner_id: str | None, *, package: str | None, offset: int, limit: int) -> tuple[list[Hook], int]:
        where, params = ["1 = 1"], []
        if owner_id is not None:
            where.append("u.id = ?")
            params.append(canonical_uuid(owner_id))
        if package is not None:
            where.append("h.name = ?")
            params.append(package)
        condition = " AND ".join(where)
        with self._tx(write=False) as tx:
            rows = tx.all(f"{_HOOK} WHERE {condition} ORDER BY h.created_at, h.id LIMIT ? OFFSET ?", (*params, limit, offset))
            total = tx.one(f"SELECT count(*) FROM hooks h JOIN users u ON u.pk = h.user_pk WHERE {condition}", params)
        return [_hook(row) for row in rows], int(total[0]) if total else 0

    def update_hook(self, hook_id: str, endpoint: str, secret_cipher: str) -> Hook | None:
        with self._tx(write=True) as tx:
            changed = tx.run("UPDATE hooks SET endpoint = ?, secret = ?, updated_at = ? WHERE id = ?",
                             (endpoint, secret_cipher, now_iso(), hook_id))  # fmt: skip
            row = tx.one(f"{_HOOK} WHERE h.id = ?", (hook_id,)) if changed else None
            if row is not None:
                _record(tx, "hook:update", _hook(row))
        return None if row is None else _hook(row)

    def delete_hook(self, hook_id: str) -> Hook | None:
        with self._tx(write=True) as tx:
            row = tx.one(f"{_HOOK} WHERE h.id = ?", (hook_id,))
            if row is not None:
                tx.run("DELETE FROM hook_deliveries WHERE hook_id = ?", (hook_id,))
                tx.run("DELETE FROM hooks WHERE id = ?", (hook_id,))
                _record(tx, "hook:remove", _hook(row))
        return None if row is None else _hook(row)

    # ---- the outbox

    def stored_hooks(self) -> list[StoredHook]:
        with self._tx(write=False) as tx:
            rows = tx.all(f"{_HOOK} ORDER BY h.created_at, h.id")
        return [StoredHook(_hook(row), row[10], row[11] == "active") for row in rows]

    def cursor(self) -> int:
        with self._tx(write=False) as tx:
            row = tx.one("SELECT seq FROM hook_cursor WHERE id = 1")
        return int(row[0]) if row else 0

    def expand(self, deliveries: Sequence[NewDelivery], *, after: int, cursor: int, now: float) -> int:
        """Inserts the deliveries (one that exists is left alone) and moves the cursor to `cursor`,
        in one transaction; returns how many were new."""
        added = 0
        with self._tx(write=True) as tx:
            for new in deliveries:
                added += tx.run(
                    "INSERT INTO hook_deliveries (id, hook_id, seq, package, event, status, attempts, created, due)"
                    " SELECT ?, ?, ?, ?, ?, ?, 0, ?, ? WHERE EXISTS (SELECT 1 FROM hooks WHERE id = ?) ON CONFLICT DO NOTHING",
                    (new.id, new.hook_id, new.seq, new.package, json.dumps(new.event), PENDING, now, now, new.hook_id),
                )  # fmt: skip
            tx.run("UPDATE hook_cursor SET seq = ? WHERE id = 1 AND seq < ?", (cursor, cursor))
        return added

    def claim_due(self, worker: str, *, now: float, lease: float, limit: int) -> list[Delivery]:
        """The pending deliveries due now that nobody holds, the earliest of each (hook, package)
        only (so each hook gets a package's events in journal order), claimed until now + lease."""
        with self._tx(write=True) as tx:
            rows = tx.all(
                f"{_DELIVERY} d WHERE d.status = ? AND d.due <= ? AND (d.claimed_until IS NULL OR d.claimed_until < ?)"
                " AND NOT EXISTS (SELECT 1 FROM hook_deliveries e WHERE e.hook_id = d.hook_id AND e.package = d.package"
                "  AND e.status = ? AND e.seq < d.seq) ORDER BY d.seq LIMIT ?" + self._skip_locked,
                (PENDING, now, now, PENDING, limit),
            )  # fmt: skip
            for row in rows:
                tx.run("UPDATE hook_deliveries SET claimed_by = ?, claimed_until = ? WHERE id = ?", (worker, now + lease, row[0]))
        return [_delivery(row) for row in rows]

    def record_attempt(self, delivery_id: str, worker: str, attempt: Attempt) -> None:
        """How an attempt went; ignored when the claim was lost (taken over after its lease)."""
        with self._tx(write=True) as tx:
            tx.run(
                "UPDATE hook_deliveries SET status = ?, due = ?, attempts = attempts + ?, claimed_by = NULL, claimed_until = NULL,"
                " last_attempt = coalesce(?, last_attempt), response_code = ?, last_error = ?, latency_ms = ?, excerpt = ?"
                " WHERE id = ? AND claimed_by = ?",
                (attempt.status, attempt.due, 1 if attempt.counted else 0, attempt.at if attempt.counted else None,
                 attempt.response_code, attempt.error, attempt.latency_ms, attempt.excerpt, delivery_id, worker),
            )  # fmt: skip

    # ---- the delivery log

    def deliveries(self, hook_id: str | None, *, offset: int, limit: int) -> list[Delivery]:
        where, params = ("WHERE hook_id = ?", (hook_id,)) if hook_id is not None else ("", ())
        with self._tx(write=False) as tx:
            rows = tx.all(f"{_DELIVERY} {where} ORDER BY seq DESC, hook_id LIMIT ? OFFSET ?", (*params, limit, offset))
        return [_delivery(row) for row in rows]

    def delivery(self, delivery_id: str) -> Delivery | None:
        with self._tx(write=False) as tx:
            row = tx.one(f"{_DELIVERY} WHERE id = ?", (delivery_id,))
        return None if row is None else _delivery(row)

    def redeliver(self, delivery_id: str, *, now: float) -> bool:
        """Makes a delivery pending again, due now, with a fresh attempt count and age."""
        with self._tx(write=True) as tx:
            return tx.run("UPDATE hook_deliveries SET status = ?, due = ?, created = ?, attempts = 0, claimed_by = NULL,"
                          " claimed_until = NULL WHERE id = ?", (PENDING, now, now, delivery_id)) > 0  # fmt: skip
