"""The user store on any SQL database, through a small dialect (store_sqlite.py, store_postgres.py).

Search ranking, shared by both dialects: rows whose username starts with the keyword come first,
ordered by username (so an exact match is first of all); then the other matches in sign-up order.
On SQLite both parts are index-ordered (the username index; FTS5 yields rowids in order), so a page
costs O(offset + size), never a sort of every match; totals can stop at a cap for the same reason.
Keywords of 1-2 characters read the gram index (user_api/grams.py) on both stores, in key order too,
and take both their counts from user_gram_counts (one row each). PostgreSQL also indexes 3-character
grams and counts grams up to 5 characters (Dialect.indexed_gram, counted_gram): a 3-character
keyword is read as a short one, and a 4-5 character one takes its counts from the table too. A longer
keyword's match count is skipped when its username-prefix count already reaches the cap.
"""

from __future__ import annotations

import enum
import heapq
import ipaddress
import itertools
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, Final, Protocol

from user_api import store_audit
from user_api.credentials import PasswordHasher, is_legacy_hash, new_token, token_digest, token_prefix
from user_api.errors import (
    FieldError,
    InvalidFields,
    LastAdmin,
    PreconditionFailed,
    StoreUnavailable,
    UsernameTaken,
    UserNotFound,
)
from user_api.grams import (
    EMAIL,
    NAME,
    PREFIX,
    count_deltas,
    fold,
    insert_statement,
    upsert_counts_statement,
    user_grams,
)
from user_api.groups import GROUP_RULE, is_group_name
from user_api.models import (
    ImportedUser,
    NewUser,
    TokenInfo,
    User,
    UserPage,
    email_problems,
    full_name_problems,
    normalize_email,
    normalize_text,
    password_problems,
    role_problems,
    status_problems,
    username_problems,
    utcnow,
    validate_new_user,
)

log = logging.getLogger(__name__)

USER_COLUMNS: Final = ("id", "username", "email", "full_name", "role", "status", "created_at", "updated_at", "version")
TOKEN_COLUMNS: Final = ("key", "created_at", "readonly", "token_prefix", "cidr_whitelist", "description", "expires_at")
MAX_TOKEN_LENGTH: Final = 512
DELETED_HASH: Final = "!"  # no argon2 hash looks like this, so nothing ever verifies against it
# An upgrade step an operator still has to run: noted in `upgrade_steps` when a database holding
# accounts of a release before maintainers were bound (schema 1) is migrated; removed when done.
BIND_RECORDED_MAINTAINERS: Final = "bind-recorded-maintainers"
# An account's groups (user_api.groups): a second add of a group it has changes nothing.
INSERT_GROUP: Final = "INSERT INTO account_groups (user_pk, name) VALUES (?, ?) ON CONFLICT DO NOTHING"


def columns(names: Sequence[str], alias: str) -> str:
    return ", ".join(f"{alias}.{name}" for name in names)


class Keep(enum.Enum):
    """Marks an update argument as "leave the stored value alone" (None means "clear it")."""

    KEEP = "keep"


KEEP: Final = Keep.KEEP


class Tx(Protocol):
    """A cursor inside one transaction; SQL uses `?` placeholders whatever the driver wants."""

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> int: ...


class Dialect(Protocol):
    name: str
    for_update: str  # row-lock suffix for SELECT in a write transaction ("" where writers are serial)
    indexed_gram: int  # keywords this long or shorter are one user_grams range (at least MAX_GRAM)
    counted_gram: int  # keywords this long or shorter take their totals from user_gram_counts

    def read(self) -> AbstractContextManager[Tx]: ...

    def write(self) -> AbstractContextManager[Tx]: ...

    def is_unavailable(self, exc: BaseException) -> bool: ...

    def is_username_conflict(self, exc: BaseException) -> bool: ...

    def encode_time(self, moment: datetime) -> Any: ...

    def count_matches(self, tx: Tx, keyword: str, *, include_email: bool, limit: int | None) -> int: ...

    def page_matches(
        self, tx: Tx, keyword: str, *, include_email: bool, skip_prefix: tuple[str, str], offset: int, limit: int,
        matches: int,
    ) -> list[tuple[Any, ...]]: ...

    def bulk_insert(self, rows: Iterable[tuple[Any, ...]], audit: Callable[[], list[tuple[Any, ...]]] | None = None) -> int: ...

    def close(self) -> None: ...


def _decode_time(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def user_from_row(row: Sequence[Any]) -> User:
    return User(
        id=str(row[0]),
        username=row[1],
        email=row[2],
        full_name=row[3],
        role=row[4],
        status=row[5],
        created_at=_decode_time(row[6]),
        updated_at=_decode_time(row[7]),
        version=int(row[8]),
    )


def token_from_row(user_id: str, row: Sequence[Any]) -> TokenInfo:
    return TokenInfo(
        key=row[0],
        user_id=user_id,
        created=_decode_time(row[1]),
        readonly=bool(row[2]),
        token_prefix=row[3],
        cidr_whitelist=tuple(json.loads(row[4])),
        description=row[5],
        expires=None if row[6] is None else _decode_time(row[6]),
    )


def expired(info: TokenInfo, now: datetime) -> bool:
    return info.expires is not None and info.expires <= now


def like_pattern(keyword: str) -> str:
    """'%kw%' with the LIKE wildcards and the escape character itself escaped (ESCAPE '\\')."""
    escaped = keyword.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def like_condition(*, include_email: bool, placeholder: str, operator: str) -> str:
    """username/full name (and email) contain the keyword: one `operator` test per column."""
    fields = ["u.username", "u.full_name"] + (["u.email"] if include_email else [])
    return "(" + " OR ".join(f"{field} {operator} {placeholder} ESCAPE '\\'" for field in fields) + ")"


def prefix_range(keyword: str) -> tuple[str, str]:
    """[low, high) holding every string that starts with `keyword`, in binary (C) collation."""
    return keyword, keyword + "\U0010ffff"


def canonical_uuid(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def count_rows(tx: Tx, select: str, params: Sequence[Any], limit: int | None) -> int:
    """count(*) of a SELECT, stopping at `limit` rows when one is given."""
    if limit is None:
        row = tx.one(f"SELECT count(*) FROM ({select}) AS matches", params)
    else:
        row = tx.one(f"SELECT count(*) FROM ({select} LIMIT ?) AS matches", (*params, limit))
    return int(row[0]) if row else 0


def gram_source(user: User | None, longest: int) -> set[tuple[str, int]]:
    """(gram, field) pairs the gram index counts for a user as stored (none once deleted); the
    shorter ones (Dialect.indexed_gram) are also its user_grams rows."""
    if user is None or user.status == "deleted":
        return set()
    return {(gram, field) for gram, field, _ in user_grams(0, user.username, user.full_name, user.email, longest)}


def sync_grams(tx: Tx, key: str, before: User | None, after: User | None, dialect: Dialect) -> None:
    """Brings the gram index of one user from `before` to `after`, in the caller's transaction."""
    old, new = gram_source(before, dialect.counted_gram), gram_source(after, dialect.counted_gram)
    if old == new:
        return
    row = tx.one("SELECT pk FROM users WHERE id = ?", (key,))
    assert row is not None
    pk = int(row[0])
    for gram, field in old - new:
        if len(gram) <= dialect.indexed_gram:
            tx.run("DELETE FROM user_grams WHERE gram = ? AND field = ? AND user_pk = ?", (gram, field, pk))
    added = [(gram, field, pk) for gram, field in new - old if len(gram) <= dialect.indexed_gram]
    if added:
        tx.run(*insert_statement(added))
    tx.run(*upsert_counts_statement(count_deltas(old, new)))


def gram_holders(tx: Tx, keyword: str) -> dict[int, int]:
    """Live users holding the keyword as a gram, per field (0 where none): a user has at most one row
    per gram (user_api/grams.py), so these are their numbers, its prefix count and its totals, in one
    read of the counts."""
    held = dict.fromkeys((NAME, PREFIX, EMAIL), 0)
    held.update((int(field), int(n)) for field, n in tx.all(
        "SELECT field, n FROM user_gram_counts WHERE gram = ?", (fold(keyword),)))
    return held


def match_fields(*, include_email: bool) -> tuple[int, ...]:
    """The gram fields a search matches in: names always, emails for admins."""
    return (NAME, PREFIX, EMAIL) if include_email else (NAME, PREFIX)


def page_short_matches(tx: Tx, keyword: str, *, include_email: bool, offset: int, limit: int) -> list[tuple[Any, ...]]:
    """The matches that do not start the username, in key order: the page is read from the gram
    index alone (no scan, no sort, whatever the keyword), then only its rows are read from users.

    Admins read two ranges (name grams, email-only grams), merged here: PostgreSQL 15 plans a
    UNION ALL of the two as a sort of every match, never as a merge of the ordered ranges."""
    gram = fold(keyword)
    ranges = [
        [row[0] for row in tx.all(
            "SELECT user_pk FROM user_grams WHERE gram = ? AND field = ? ORDER BY user_pk LIMIT ?",
            (gram, field, offset + limit),
        )]
        for field in ((NAME, EMAIL) if include_email else (NAME,))
    ]
    page = list(itertools.islice(heapq.merge(*ranges), offset, offset + limit))
    if not page:
        return []
    marks = ", ".join("?" for _ in page)
    return tx.all(f"SELECT {columns(USER_COLUMNS, 'u')} FROM users u WHERE u.pk IN ({marks}) ORDER BY u.pk", page)


def adopt_legacy_groups(tx: Tx, rows: Sequence[tuple[str, str]]) -> list[str]:
    """Inserts the rows of an old groups file (user_api.groups.legacy_groups) for the accounts the
    store has, in the schema step's transaction; returns the account ids it has no account for
    (never created here, or deleted), whose rows are left out."""
    accounts: dict[str, int | None] = {}
    for user_id in sorted({user_id for user_id, _ in rows}):
        key = canonical_uuid(user_id)
        row = None if key is None else tx.one("SELECT pk FROM users WHERE id = ? AND status <> 'deleted'", (key,))
        accounts[user_id] = None if row is None else int(row[0])
    for user_id, name in rows:
        pk = accounts[user_id]
        if pk is not None:
            tx.run(INSERT_GROUP, (pk, name))
    return [user_id for user_id, pk in accounts.items() if pk is None]


def group_problems(add: Sequence[str], remove: Sequence[str]) -> list[FieldError]:
    return [
        FieldError(GROUP_RULE, pointer=f"#/{field}/{index}")
        for field, names in (("add", add), ("remove", remove))
        for index, name in enumerate(names)
        if not is_group_name(name)
    ]


def _raise_problems(problems: list[FieldError]) -> None:
    if problems:
        raise InvalidFields(errors=problems)


def _cidr_list(cidr: Sequence[str] | None) -> list[str]:
    networks: list[str] = []
    for index, entry in enumerate(cidr or ()):
        try:
            networks.append(str(ipaddress.ip_network(entry, strict=False)))
        except (TypeError, ValueError):
            problem = FieldError("must be an IP network", pointer=f"#/cidr_whitelist/{index}")
            raise InvalidFields(errors=[problem]) from None
    return networks


def account_changes(before: User, after: User, *, password: bool) -> list[tuple[str, dict[str, Any]]]:
    """The audit log's events of an account update (never its email or full name: personal data)."""
    changes = [(f"user:{name}", {"before": old, "after": new}) for name, old, new in (
        ("rename", before.username, after.username), ("role", before.role, after.role), ("status", before.status, after.status))
        if old != new]  # fmt: skip
    return changes + ([("user:password", {})] if password else [])


class SqlUserStore:
    """Implements user_api.store.UserStore on a Dialect."""

    def __init__(self, dialect: Dialect, hasher: PasswordHasher):
        self.dialect = dialect
        self.hasher = hasher

    # ---- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        try:
            with self.dialect.read() as tx:
                yield tx
        except Exception as exc:
            if self.dialect.is_unavailable(exc):
                raise StoreUnavailable() from exc
            raise

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        try:
            with self.dialect.write() as tx:
                yield tx
        except Exception as exc:
            if self.dialect.is_username_conflict(exc):
                raise UsernameTaken() from exc
            if self.dialect.is_unavailable(exc):
                raise StoreUnavailable() from exc
            raise

    _SELECT_USER: Final = f"SELECT {columns(USER_COLUMNS, 'u')} FROM users u"
    _SELECT_USER_AND_HASH: Final = f"SELECT {columns(USER_COLUMNS, 'u')}, u.password_hash FROM users u"

    # ---- reading users ---------------------------------------------------------------------

    def get_by_id(self, user_id: str) -> User | None:
        key = canonical_uuid(user_id)
        if key is None:
            return None
        with self._read() as tx:
            row = tx.one(f"{self._SELECT_USER} WHERE u.id = ? AND u.status <> 'deleted'", (key,))
        return None if row is None else user_from_row(row)

    def get_by_username(self, name: str) -> User | None:
        if not isinstance(name, str) or username_problems(name.lower()):
            return None
        with self._read() as tx:
            row = tx.one(f"{self._SELECT_USER} WHERE u.username = ? AND u.status <> 'deleted'", (name.lower(),))
        return None if row is None else user_from_row(row)

    def count_users(self) -> int:
        with self._read() as tx:
            row = tx.one("SELECT live_users FROM user_stats WHERE id = 1")
        return int(row[0]) if row else 0

    def removed_accounts(self) -> dict[str, str]:
        with self._read() as tx:
            rows = tx.all("SELECT username, id FROM users WHERE status = 'deleted' ORDER BY pk", ())
        return {str(name): str(key) for name, key in rows}

    def list_users(self, *, offset: int, limit: int) -> UserPage:
        with self._read() as tx:
            total_row = tx.one("SELECT live_users FROM user_stats WHERE id = 1")
            rows = tx.all(
                f"{self._SELECT_USER} WHERE u.status <> 'deleted' ORDER BY u.pk LIMIT ? OFFSET ?",
                (limit, offset),
            )
        total = int(total_row[0]) if total_row else 0
        return UserPage(items=tuple(user_from_row(r) for r in rows), total=total)

    def search_users(
        self, keyword: str, *, offset: int, limit: int, include_email: bool, count_limit: int | None = None
    ) -> UserPage:
        """Case-insensitive substring search (username, full name, and email when asked).

        `count_limit` caps the total (None: exact). Counting every match of a common keyword costs
        O(matches); past what a client can page through, a bigger number tells it nothing.
        """
        keyword = keyword.strip()
        short = 0 < len(keyword) <= self.dialect.indexed_gram  # one rule for every length: a substring
        counted = 0 < len(keyword) <= self.dialect.counted_gram  # its totals are rows of user_gram_counts
        low, high = prefix_range(keyword.lower())
        prefix_where = "u.username >= ? AND u.username < ? AND u.status <> 'deleted'"
        # The prefix part must be counted exactly up to the end of the page, to place the page.
        prefix_cap = None if count_limit is None else max(count_limit, offset + limit)
        with self._read() as tx:
            held = gram_holders(tx, keyword) if counted else {}
            if counted and fold(keyword) == low:
                # Usernames are lower-case ASCII: "starts the username" is exactly the PREFIX gram.
                prefix_total = held[PREFIX]
            else:
                prefix_total = count_rows(tx, f"SELECT 1 FROM users u WHERE {prefix_where}", (low, high), prefix_cap)
            rows: list[tuple[Any, ...]] = []
            if offset < prefix_total:
                rows = tx.all(
                    f"{self._SELECT_USER} WHERE {prefix_where} ORDER BY u.username LIMIT ? OFFSET ?",
                    (low, high, limit, offset),
                )
            if counted:
                total = sum(held[field] for field in match_fields(include_email=include_email))
                total = total if count_limit is None else min(total, count_limit)
            elif count_limit is not None and prefix_total >= count_limit:
                total = count_limit  # every prefix match is a match: the capped total is already known
            else:
                total = self.dialect.count_matches(tx, keyword, include_email=include_email, limit=count_limit)
            wanted, rest = limit - len(rows), max(0, offset - prefix_total)
            if wanted > 0 and short:
                rows += page_short_matches(tx, keyword, include_email=include_email, offset=rest, limit=wanted)
            elif wanted > 0:
                rows += self.dialect.page_matches(
                    tx, keyword, include_email=include_email, skip_prefix=(low, high), offset=rest, limit=wanted,
                    matches=total,
                )
        return UserPage(items=tuple(user_from_row(r) for r in rows), total=total)

    # ---- writing users ---------------------------------------------------------------------

    def create_user(
        self,
        username: str,
        password: str,
        email: str | None = None,
        full_name: str | None = None,
        role: str = "user",
        *,
        status: str = "active",
    ) -> User:
        new = NewUser(
            username=username,
            password=password,
            email=normalize_email(email) if isinstance(email, str) else email,
            full_name=normalize_text(full_name) if isinstance(full_name, str) else full_name,
            role=role,
            status=status,
        )
        validate_new_user(new)
        password_hash = self.hasher.hash(password)  # slow on purpose: outside the write lock
        now = self.dialect.encode_time(utcnow())
        with self._write() as tx:
            row = tx.one(
                "INSERT INTO users (id, username, email, full_name, role, status, password_hash,"
                " created_at, updated_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"
                f" RETURNING {', '.join(USER_COLUMNS)}",
                (str(uuid.uuid4()), new.username, new.email, new.full_name, new.role, new.status,
                 password_hash, now, now),
            )
            assert row is not None
            user = user_from_row(row)
            sync_grams(tx, user.id, None, user, self.dialect)
            store_audit.record(tx, "user:create", user.username, user.id, {"role": user.role, "status": user.status})
        log.info("user created: id=%s username=%s role=%s", user.id, user.username, user.role)
        return user

    def update_user(
        self,
        user_id: str,
        *,
        expected_version: int | None = None,
        username: str | Keep = KEEP,
        email: str | None | Keep = KEEP,
        full_name: str | None | Keep = KEEP,
        role: str | Keep = KEEP,
        status: str | Keep = KEEP,
        password: str | Keep = KEEP,
    ) -> User:
        changes = self._validated_changes(username, email, full_name, role, status, password)
        key = canonical_uuid(user_id)
        if key is None:
            raise UserNotFound()
        with self._write() as tx:
            current = self._locked_user(tx, key)
            if expected_version is not None and current.version != expected_version:
                raise PreconditionFailed()
            if self._demotes_admin(current, changes.get("role", current.role), changes.get("status", current.status)):
                self._ensure_other_admin(tx, current.id)
            assignments = "".join(f"{name} = ?, " for name in changes)
            row = tx.one(
                f"UPDATE users SET {assignments}updated_at = ?, version = version + 1"
                f" WHERE id = ? RETURNING {', '.join(USER_COLUMNS)}",
                (*changes.values(), self.dialect.encode_time(utcnow()), key),
            )
            if self._ends_sessions(current, changes):
                # A new password or a disable/re-enable ends every session: a stolen token
                # must not outlive the change that was meant to lock its thief out.
                tx.run("DELETE FROM user_tokens WHERE user_pk = (SELECT pk FROM users WHERE id = ?)", (key,))
            assert row is not None
            user = user_from_row(row)
            sync_grams(tx, key, current, user, self.dialect)
            for event, detail in account_changes(current, user, password="password_hash" in changes):
                store_audit.record(tx, event, user.username, user.id, detail)
        log.info("user updated: id=%s fields=%s", user.id, ",".join(sorted(changes)) or "-")
        return user

    @staticmethod
    def _ends_sessions(current: User, changes: dict[str, object]) -> bool:
        return "password_hash" in changes or changes.get("status", current.status) != current.status

    def _validated_changes(
        self,
        username: str | Keep,
        email: str | None | Keep,
        full_name: str | None | Keep,
        role: str | Keep,
        status: str | Keep,
        password: str | Keep,
    ) -> dict[str, Any]:
        """Column -> new value for every argument that is not KEEP; the password leaves hashed."""
        rules = (
            ("username", username, username_problems, "#/username"),
            ("email", email, email_problems, "#/email"),
            ("full_name", full_name, full_name_problems, "#/fullName"),
            ("role", role, role_problems, "#/role"),
            ("status", status, status_problems, "#/status"),
            ("password", password, password_problems, "#/password"),
        )
        changes: dict[str, Any] = {}
        problems: list[FieldError] = []
        for column, value, rule, pointer in rules:
            if value is KEEP:
                continue
            nullable = column in ("email", "full_name")
            if not (nullable and value is None):
                problems.extend(FieldError(text, pointer=pointer) for text in rule(value))
            changes[column] = value
        _raise_problems(problems)
        if isinstance(changes.get("email"), str):
            changes["email"] = normalize_email(changes["email"])
        if isinstance(changes.get("full_name"), str):
            changes["full_name"] = normalize_text(changes["full_name"])
        if "password" in changes:
            # The plaintext is only ever held under its own name, and replaced by its hash here.
            changes["password_hash"] = self.hasher.hash(changes.pop("password"))
        return changes

    def _locked_user(self, tx: Tx, key: str) -> User:
        row = tx.one(
            f"{self._SELECT_USER} WHERE u.id = ? AND u.status <> 'deleted'{self.dialect.for_update}", (key,)
        )
        if row is None:
            raise UserNotFound()
        return user_from_row(row)

    @staticmethod
    def _demotes_admin(current: User, role: str, status: str) -> bool:
        was_admin = current.role == "admin" and current.status == "active"
        return was_admin and not (role == "admin" and status == "active")

    def _ensure_other_admin(self, tx: Tx, user_id: str) -> None:
        # Locks the admin rows on PostgreSQL, so two admins cannot demote each other at once.
        others = tx.all(
            "SELECT u.pk FROM users u WHERE u.role = 'admin' AND u.status = 'active' AND u.id <> ?"
            f"{self.dialect.for_update}",
            (user_id,),
        )
        if not others:
            raise LastAdmin()

    def delete_user(self, user_id: str) -> bool:
        """Leaves a tombstone: the username stays reserved (packages name their maintainers by it),
        everything personal is erased, tokens are revoked, and the record is gone for every reader."""
        key = canonical_uuid(user_id)
        if key is None:
            return False
        with self._write() as tx:
            try:
                current = self._locked_user(tx, key)
            except UserNotFound:
                return False
            if self._demotes_admin(current, "user", "deleted"):
                self._ensure_other_admin(tx, current.id)
            tx.run(
                "DELETE FROM user_tokens WHERE user_pk = (SELECT pk FROM users WHERE id = ?)", (key,)
            )
            # Its groups go with it: the tombstone keeps the row, so no foreign key cascade fires.
            tx.run("DELETE FROM account_groups WHERE user_pk = (SELECT pk FROM users WHERE id = ?)", (key,))
            tx.run(
                "UPDATE users SET status = 'deleted', email = NULL, full_name = NULL, password_hash = ?,"
                " updated_at = ?, version = version + 1 WHERE id = ?",
                (DELETED_HASH, self.dialect.encode_time(utcnow()), key),
            )
            sync_grams(tx, key, current, None, self.dialect)
            store_audit.record(tx, "user:remove", current.username, current.id)
        log.info("user deleted: id=%s", key)
        return True

    def import_users(self, records: Iterable[ImportedUser], *, audit_source: str | None = None) -> int:
        """Bulk path for imports and benchmarks: one transaction, search index built at the end.
        `audit_source` (an import of real accounts: "htpasswd"): each account's `user:create` goes
        into the audit log in that transaction; None (benchmarks, tests): no entries."""
        now = self.dialect.encode_time(utcnow())
        made: list[tuple[str, str, str, str]] = []

        def rows() -> Iterator[tuple[Any, ...]]:
            for index, record in enumerate(records):
                problems = username_problems(record.username) + role_problems(record.role)
                problems += status_problems(record.status)
                if record.email is not None:
                    problems += email_problems(record.email)
                if record.full_name is not None:
                    problems += full_name_problems(record.full_name)
                if not (record.password_hash.startswith("$argon2") or is_legacy_hash(record.password_hash)):
                    problems.append("password_hash must be an argon2 PHC string or an htpasswd hash (bcrypt, crypt, {SHA})")
                if problems:
                    raise InvalidFields(errors=[FieldError(p, pointer=f"#/{index}") for p in problems])
                made.append((str(uuid.uuid4()), record.username, record.role, record.status))
                yield (made[-1][0], record.username, record.email, record.full_name, record.role,
                       record.status, record.password_hash, now, now)

        audit = None if audit_source is None else (lambda: store_audit.imported_rows(made, audit_source))
        try:
            count = self.dialect.bulk_insert(rows(), audit)
        except Exception as exc:
            if self.dialect.is_username_conflict(exc):
                raise UsernameTaken() from exc
            raise
        log.info("imported %d users", count)
        return count

    # ---- passwords ---------------------------------------------------------------------------

    def _user_and_hash(self, where: str, value: str) -> tuple[User, str] | None:
        with self._read() as tx:
            row = tx.one(
                f"{self._SELECT_USER_AND_HASH} WHERE {where}"
                " AND u.status <> 'deleted'",
                (value,),
            )
        return None if row is None else (user_from_row(row), row[-1])

    def _verify(self, found: tuple[User, str] | None, password: object) -> User | None:
        if not isinstance(password, str) or found is None:
            # Spend the same time as a real check, so response times do not reveal which names exist.
            self.hasher.verify(self.hasher.dummy_hash, password if isinstance(password, str) else "")
            return None
        user, password_hash = found
        if not self.hasher.verify(password_hash, password) or user.status != "active":
            return None
        if self.hasher.needs_rehash(password_hash):
            with self._write() as tx:
                tx.run("UPDATE users SET password_hash = ? WHERE id = ?", (self.hasher.hash(password), user.id))
        return user

    def verify_password(self, username: str, password: str) -> User | None:
        found = None
        if isinstance(username, str) and not username_problems(username.lower()):
            found = self._user_and_hash("u.username = ?", username.lower())
        return self._verify(found, password)

    def check_password(self, user_id: str, password: str) -> bool:
        key = canonical_uuid(user_id)
        found = None if key is None else self._user_and_hash("u.id = ?", key)
        return self._verify(found, password) is not None

    # ---- tokens --------------------------------------------------------------------------------

    def create_token(
        self,
        user_id: str,
        *,
        readonly: bool = False,
        cidr: Sequence[str] | None = None,
        description: str | None = None,
        expires: datetime | None = None,
    ) -> tuple[str, TokenInfo]:
        """Returns the token once; only its SHA-256 digest is stored. An `expires` token stops
        authenticating at that moment."""
        networks = _cidr_list(cidr)
        key = canonical_uuid(user_id)
        token = new_token()
        info_key = str(uuid.uuid4())
        now = utcnow()
        with self._write() as tx:
            owner = None if key is None else tx.one(
                "SELECT pk, username FROM users WHERE id = ? AND status = 'active'", (key,)
            )
            if owner is None:
                raise UserNotFound()
            tx.run(
                "INSERT INTO user_tokens (key, user_pk, token_hash, token_prefix, readonly,"
                " cidr_whitelist, description, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (info_key, owner[0], token_digest(token), token_prefix(token), bool(readonly),
                 json.dumps(networks), description, self.dialect.encode_time(now),
                 None if expires is None else self.dialect.encode_time(expires)),
            )
            store_audit.record(tx, "token:create", owner[1], str(key), {"token_key": info_key, "readonly": bool(readonly)})
        log.info("token created: key=%s user=%s readonly=%s", info_key, key, bool(readonly))
        info = TokenInfo(info_key, str(key), now, bool(readonly), token_prefix(token), tuple(networks), description, expires)
        return token, info

    def authenticate_token(self, token: str) -> tuple[User, TokenInfo] | None:
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_LENGTH:
            return None
        with self._read() as tx:
            row = tx.one(
                f"SELECT {columns(USER_COLUMNS, 'u')}, {columns(TOKEN_COLUMNS, 't')}"
                " FROM user_tokens t JOIN users u ON u.pk = t.user_pk"
                " WHERE t.token_hash = ? AND u.status = 'active'",
                (token_digest(token),),
            )
        if row is None:
            return None
        user = user_from_row(row)
        info = token_from_row(user.id, row[len(USER_COLUMNS):])
        return None if expired(info, utcnow()) else (user, info)

    def authenticate(self, token: str) -> User | None:
        found = self.authenticate_token(token)
        return None if found is None else found[0]

    def list_tokens(self, user_id: str) -> list[TokenInfo]:
        key = canonical_uuid(user_id)
        if key is None:
            return []
        with self._read() as tx:
            rows = tx.all(
                f"SELECT {columns(TOKEN_COLUMNS, 't')} FROM user_tokens t JOIN users u ON u.pk = t.user_pk"
                " WHERE u.id = ? ORDER BY t.created_at, t.key",
                (key,),
            )
        now = utcnow()
        return [info for info in (token_from_row(key, row) for row in rows) if not expired(info, now)]

    def revoke_token(self, user_id: str, key: str) -> bool:
        owner = canonical_uuid(user_id)
        if owner is None or not isinstance(key, str):
            return False
        with self._write() as tx:
            removed = tx.run(
                "DELETE FROM user_tokens WHERE key = ? AND user_pk = (SELECT pk FROM users WHERE id = ?)",
                (key, owner),
            )
            if removed:
                self._record_revoke(tx, "u.id = ?", owner, key)
        return removed > 0

    @staticmethod
    def _record_revoke(tx: Tx, condition: str, value: str, key: str) -> None:
        row = tx.one(f"SELECT u.username, u.id FROM users u WHERE {condition}", (value,))
        if row is not None:
            store_audit.record(tx, "token:revoke", str(row[0]), str(row[1]), {"token_key": key})

    def revoke_token_value(self, token: str) -> bool:
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_LENGTH:
            return False
        with self._write() as tx:
            found = tx.one("SELECT key, user_pk FROM user_tokens WHERE token_hash = ?", (token_digest(token),))
            removed = tx.run("DELETE FROM user_tokens WHERE token_hash = ?", (token_digest(token),))
            if removed and found is not None:
                self._record_revoke(tx, "u.pk = ?", found[1], str(found[0]))
        return removed > 0

    # ---- groups (the read rules of registry.yaml name them) -----------------------------------

    def groups_of(self, user_id: str) -> frozenset[str]:
        key = canonical_uuid(user_id)
        if key is None:
            return frozenset()
        with self._read() as tx:
            rows = tx.all(
                "SELECT g.name FROM account_groups g JOIN users u ON u.pk = g.user_pk"
                " WHERE u.id = ? AND u.status <> 'deleted'",
                (key,),
            )
        return frozenset(str(row[0]) for row in rows)

    def change_groups(self, user_id: str, *, add: Iterable[str] = (), remove: Iterable[str] = ()) -> frozenset[str]:
        """Adds, then removes, groups in one transaction; returns the account's groups afterwards."""
        added, removed = list(add), list(remove)
        _raise_problems(group_problems(added, removed))
        key = canonical_uuid(user_id)
        if key is None:
            raise UserNotFound()
        with self._write() as tx:
            # Locked (PostgreSQL): a delete_user running at once cannot leave groups to a tombstone.
            row = tx.one(f"SELECT pk, username FROM users WHERE id = ? AND status <> 'deleted'{self.dialect.for_update}", (key,))
            if row is None:
                raise UserNotFound()
            before = {str(name[0]) for name in tx.all("SELECT name FROM account_groups WHERE user_pk = ?", (row[0],))}
            for name in added:
                tx.run(INSERT_GROUP, (row[0], name))
            for name in removed:
                tx.run("DELETE FROM account_groups WHERE user_pk = ? AND name = ?", (row[0], name))
            names = tx.all("SELECT name FROM account_groups WHERE user_pk = ?", (row[0],))
            after = {str(name[0]) for name in names}
            if after != before:
                store_audit.record(tx, "user:groups", str(row[1]), key, {"before": sorted(before), "after": sorted(after)})
        if added or removed:
            log.info("groups changed: id=%s added=%s removed=%s", key, ",".join(added) or "-", ",".join(removed) or "-")
        return frozenset(str(name[0]) for name in names)

    def pending_upgrade_steps(self) -> list[str]:
        """The upgrade steps noted when this database was migrated and not yet run (docs/operating/upgrades.md)."""
        with self._read() as tx:
            return [str(row[0]) for row in tx.all("SELECT step FROM upgrade_steps ORDER BY step")]

    def finish_upgrade_step(self, step: str) -> bool:
        """Marks an upgrade step done; False when it was not pending."""
        with self._write() as tx:
            return tx.run("DELETE FROM upgrade_steps WHERE step = ?", (step,)) > 0

    def close(self) -> None:
        self.dialect.close()
