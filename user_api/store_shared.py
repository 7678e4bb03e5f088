"""What every API instance must see alike, on the user store's PostgreSQL (issue 28): npm's
web-login sessions and the login guard's buckets.

In memory (user_api.weblogin.WebLoginPool, user_api.ratelimit.LoginGuard) a login started on one
instance could not be finished on another, and each instance gave a guesser its own buckets: three
instances, three times the guesses. With `database_url` set, both live in tables beside the
accounts (created with them, store_postgres.SCHEMA: SHARED_TABLES), with the same calls and the
same limits. Times are the database's clock (`clock_timestamp()`), so hosts whose clocks differ
agree on expiry and refill. The embedded default keeps them in memory: one process serves it.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from user_api.errors import StoreUnavailable
from user_api.sqlstore import Dialect, Tx
from user_api.weblogin import BoundWebLogin, confirmation_code

NOW: Final = "extract(epoch from clock_timestamp())"
SHARED_TABLES: Final = """
CREATE TABLE IF NOT EXISTS web_logins (
    login_id text PRIMARY KEY,
    done_id text NOT NULL UNIQUE,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    create_account boolean NOT NULL,
    expires double precision NOT NULL,
    address text NOT NULL,
    started text NOT NULL,
    code text NOT NULL,
    token text
);
CREATE INDEX IF NOT EXISTS web_logins_by_address ON web_logins (address, seq);
CREATE TABLE IF NOT EXISTS login_buckets (
    key text PRIMARY KEY,
    tokens double precision NOT NULL,
    updated double precision NOT NULL,
    allowed boolean NOT NULL
);
CREATE TABLE IF NOT EXISTS login_known (key text PRIMARY KEY, seen double precision NOT NULL);
"""
WEB_LOGIN_LOCK: Final = 727275  # starts one at a time: the per-address and pool caps hold across instances
_SESSION: Final = "login_id, done_id, create_account, expires, address, started, code, token"


@contextmanager
def transaction(dialect: Dialect) -> Iterator[Tx]:
    """A write transaction; the database unreachable is StoreUnavailable (HTTP 503)."""
    try:
        with dialect.write() as tx:
            yield tx
    except Exception as exc:
        if dialect.is_unavailable(exc):
            raise StoreUnavailable() from exc
        raise


def session_from_row(row: Sequence[Any]) -> BoundWebLogin:
    login_id, done_id, create, expires, address, started, code, token = row
    return BoundWebLogin(login_id, done_id, bool(create), float(expires), address, started, code, token)


class SharedWebLogins:
    """user_api.weblogin.WebLoginPool's calls on the `web_logins` table: expiring, capped per
    address and in all, evicting the oldest session nobody has authenticated."""

    def __init__(self, dialect: Dialect, *, capacity: int = 1000, per_address: int = 5, lifetime_seconds: int = 600):
        self.dialect = dialect
        self.capacity, self.per_address, self.lifetime = capacity, per_address, lifetime_seconds

    def start(self, create: bool, address: str) -> BoundWebLogin:
        login_id, done_id = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        with transaction(self.dialect) as tx:
            tx.one("SELECT pg_advisory_xact_lock(?)", (WEB_LOGIN_LOCK,))
            tx.run(f"DELETE FROM web_logins WHERE expires <= {NOW}")
            self._make_room(tx, address)
            row = tx.one(
                f"INSERT INTO web_logins (login_id, done_id, create_account, expires, address, started, code)"
                f" VALUES (?, ?, ?, {NOW} + ?, ?, to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS \"UTC\"'), ?)"
                f" RETURNING {_SESSION}",
                (login_id, done_id, create, self.lifetime, address, confirmation_code()),
            )
        assert row is not None
        return session_from_row(row)

    def _make_room(self, tx: Tx, address: str) -> None:
        """This address's oldest waiting sessions beyond its cap, then the pool's oldest waiting ones."""
        tx.run(
            "DELETE FROM web_logins WHERE login_id IN (SELECT login_id FROM web_logins WHERE address = ? AND token IS NULL"
            " ORDER BY seq DESC OFFSET ?)", (address, max(0, self.per_address - 1)),
        )  # fmt: skip
        row = tx.one("SELECT count(*) FROM web_logins")
        excess = (int(row[0]) if row else 0) - self.capacity + 1
        if excess > 0:
            tx.run(
                "DELETE FROM web_logins WHERE login_id IN (SELECT login_id FROM web_logins WHERE token IS NULL ORDER BY seq LIMIT ?)",
                (excess,),
            )

    def by_login(self, login_id: str) -> BoundWebLogin | None:
        with transaction(self.dialect) as tx:
            row = tx.one(f"SELECT {_SESSION} FROM web_logins WHERE login_id = ? AND token IS NULL AND expires > {NOW}", (login_id,))
        return None if row is None else session_from_row(row)

    def complete(self, login_id: str, token: str) -> bool:
        with transaction(self.dialect) as tx:
            changed = tx.run(
                f"UPDATE web_logins SET token = ? WHERE login_id = ? AND token IS NULL AND expires > {NOW}", (token, login_id)
            )
        return changed == 1

    def poll(self, done_id: str) -> tuple[bool, str | None]:
        """(known, token): a token is handed out once (its row goes with it)."""
        with transaction(self.dialect) as tx:
            taken = tx.one(
                f"DELETE FROM web_logins WHERE done_id = ? AND token IS NOT NULL AND expires > {NOW} RETURNING token", (done_id,)
            )
            if taken is not None:
                return True, str(taken[0])
            waiting = tx.one(f"SELECT 1 FROM web_logins WHERE done_id = ? AND expires > {NOW}", (done_id,))
        return waiting is not None, None

    def __len__(self) -> int:
        with transaction(self.dialect) as tx:
            row = tx.one(f"SELECT count(*) FROM web_logins WHERE expires > {NOW}")
        return int(row[0]) if row else 0


# One statement takes a token from a bucket or reports it empty: refilled at `rate` per second up
# to `burst` since its last update (a new key starts full). Atomic under concurrent instances: the
# conflicting row is locked by the upsert, and every SET reads the row as it was.
_REFILLED: Final = "LEAST(%(burst)s, b.tokens + GREATEST(0, excluded.updated - b.updated) * %(rate)s)"
TAKE_TOKEN: Final = (
    f"INSERT INTO login_buckets AS b (key, tokens, updated, allowed) VALUES (?, ? - 1, {NOW}, true)"
    f" ON CONFLICT (key) DO UPDATE SET"
    f" tokens = CASE WHEN {_REFILLED} >= 1 THEN {_REFILLED} - 1 ELSE {_REFILLED} END,"
    f" allowed = {_REFILLED} >= 1, updated = excluded.updated"
    " RETURNING tokens, allowed"
)
PRUNE_EVERY: Final = 500  # admits between deletions of buckets full again (a missing key is a full bucket)


def bucket_key(kind: str, *parts: str) -> str:
    """A bucket's row key: a digest, since a username as typed may hold what a text column cannot
    (NUL, lone surrogates) or be longer than an index row."""
    text = "|".join(parts).encode("utf-8", "surrogatepass")
    return f"{kind}:{hashlib.sha256(text).hexdigest()}"


def retry_after(tokens: float, rate_per_second: float) -> int:
    """Seconds until an empty bucket holds one token again."""
    return max(1, math.ceil((1.0 - tokens) / rate_per_second))


class SharedLoginGuard:
    """user_api.ratelimit.LoginGuard's limits on the `login_buckets` and `login_known` tables: per
    address, per account for addresses that never logged in to it, and a bucket of its own for an
    address that did. Every instance takes from the same buckets."""

    def __init__(self, dialect: Dialect, per_address: tuple[float, int] = (30, 30), per_account: tuple[float, int] = (10, 10)):
        self.dialect = dialect
        self.addresses = (per_address[0] / 60.0, per_address[1])
        self.accounts = (per_account[0] / 60.0, per_account[1])
        self._admits = 0

    def _take(self, tx: Tx, key: str, limits: tuple[float, int]) -> tuple[bool, int]:
        rate, burst = limits
        sql = TAKE_TOKEN.replace("%(burst)s", str(float(burst))).replace("%(rate)s", repr(rate))
        row = tx.one(sql, (key, float(burst)))
        assert row is not None
        tokens, allowed = float(row[0]), bool(row[1])
        return (True, 0) if allowed else (False, retry_after(tokens, rate))

    def admit(self, username: str | None, address: str) -> tuple[bool, int]:
        with transaction(self.dialect) as tx:
            allowed, wait = self._take(tx, bucket_key("addr", address), self.addresses)
            if not allowed or not username:
                return allowed, wait
            account = username.lower()
            known = tx.one("SELECT 1 FROM login_known WHERE key = ?", (bucket_key("known", account, address),)) is not None
            bucket = bucket_key("known", account, address) if known else bucket_key("user", account)
            found = self._take(tx, bucket, self.accounts)
        self._prune()
        return found

    def succeeded(self, username: str, address: str) -> None:
        with transaction(self.dialect) as tx:
            tx.run(
                f"INSERT INTO login_known (key, seen) VALUES (?, {NOW}) ON CONFLICT (key) DO UPDATE SET seen = excluded.seen",
                (bucket_key("known", username.lower(), address),),
            )

    def _prune(self) -> None:
        self._admits += 1
        if self._admits % PRUNE_EVERY:
            return
        slowest = min(self.addresses[0], self.accounts[0])
        longest = max(self.addresses[1], self.accounts[1]) / slowest  # any bucket is full again after this
        with transaction(self.dialect) as tx:
            tx.run(f"DELETE FROM login_buckets WHERE updated < {NOW} - ?", (longest,))


def shared_dialect(store: object) -> Dialect | None:
    """The user store's PostgreSQL dialect, or None (the embedded default keeps these in memory)."""
    dialect = getattr(store, "dialect", None)
    return dialect if getattr(dialect, "name", None) == "postgresql" else None
