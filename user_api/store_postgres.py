"""PostgreSQL dialect: psycopg 3, one connection per thread, pg_trgm GIN indexes for search."""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from registry_gen.errors import ConfigError
from user_api.grams import COUNTED_GRAM, INDEXED_GRAM, PREFIX, counted, fold, gram_rows
from user_api.groups import legacy_groups
from user_api import store_audit
from user_api.store_audit import POSTGRES_TABLE as ACCOUNT_AUDIT_TABLE
from user_api.store_hooks import HOOK_TABLES
from user_api.store_shared import SHARED_TABLES
from user_api.sqlstore import (
    BIND_RECORDED_MAINTAINERS,
    USER_COLUMNS,
    Tx,
    adopt_legacy_groups,
    columns,
    like_condition,
    like_pattern,
    match_fields,
)

try:
    import psycopg
    from psycopg import errors as pg_errors
except ImportError:  # pragma: no cover - the optional extra is missing
    psycopg = None  # type: ignore[assignment]

# 2: user_tokens.expires_at; 3: user_grams; 4: user_gram_counts; 5: 3-character gram rows, 3-5 counts;
# 6: upgrade_steps; 7: account_groups; 8: hooks, hook_deliveries, hook_cursor (user_api.store_hooks)
SCHEMA_VERSION: Final = 8
STATEMENT_TIMEOUT_MS: Final = 5000  # API4: no request may hold the database for long

# Characters pg_trgm splits words at, each made the letter 'q' in the indexed text and in the keyword:
# the same map on both sides keeps every substring a substring, so the index still finds every match
# (an exact ILIKE keeps only real ones), and "s n" or "a_72" become words with trigrams of their own.
WORD_BREAKS: Final = " .-_@!~*()'+,/&:;#$"
WORD_BREAK_LETTERS: Final = "q" * len(WORD_BREAKS)
SEARCH_FIELDS: Final = ("username", "full_name", "email")
# A 4-5 character page walks the user_grams keys of the keyword's rarest 3-character gram, this
# many at first (doubling up to WALK_BATCH_MAX), keeping those that hold its other 3-grams, when
# that costs less than the pattern plan (walk_plan). Costs in index rows read (~0.3 us each here,
# measured at 100k and 1M users): a row of the grouped window read ~2, an index descent ~6, a heap
# recheck of the pattern plan ~15, its bitmap ~0.05 per trigram posting and ~1,000 fixed.
WALK_BATCH: Final = 32
WALK_BATCH_MAX: Final = 4096
WALK_OVER_READ: Final = 15
WALK_FREE_ROWS: Final = 1000
WALK_POSTING_ROWS: Final = 0.05
WALK_DESCENT_ROWS: Final = 6
WALK_WINDOW_ROWS: Final = 2
PREFIX_MARK: Final = "\x00"  # gram_sizes: keys of the PREFIX share of a gram (no gram holds NUL)


def word_text(expression: str) -> str:
    """SQL for the lower-cased text of `expression` with its word breaks made letters."""
    breaks = WORD_BREAKS.replace("'", "''")
    return f"translate(lower({expression}), '{breaks}', '{WORD_BREAK_LETTERS}')"


WORD_INDEXES: Final = "\n".join(
    f"CREATE INDEX IF NOT EXISTS users_{field}_words_trgm ON users USING gin ({word_text(field)} gin_trgm_ops);"
    for field in SEARCH_FIELDS
)

SCHEMA: Final = """
SELECT pg_advisory_xact_lock(727274);
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TABLE IF NOT EXISTS user_api_schema (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS users (
    pk bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id text NOT NULL UNIQUE,
    username text COLLATE "C" NOT NULL UNIQUE,
    email text,
    full_name text,
    role text NOT NULL CHECK (role IN ('user', 'admin')),
    status text NOT NULL CHECK (status IN ('active', 'disabled', 'deleted')),
    password_hash text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    version integer NOT NULL
);
CREATE INDEX IF NOT EXISTS users_by_username_status ON users (username, status);
-- Schema 5: the username-prefix page walks the username index for its first rows; with the default
-- 100-bucket histogram the planner put a 3-character prefix range at ~8 rows (1,621 at 100k users)
-- and read them all through a bitmap, then sorted them (4-9 ms at 100k, ten times that at 1M).
ALTER TABLE users ALTER COLUMN username SET STATISTICS 1000;
-- Schema 4: the trigram indexes cover each column's text with its word breaks made letters (see
-- word_text): pg_trgm splits text into words at anything not a letter or digit, so a keyword that
-- spans a space, '.', '-' or '_' found no trigram of its own and read a large part of the table.
DROP INDEX IF EXISTS users_username_trgm;
DROP INDEX IF EXISTS users_full_name_trgm;
DROP INDEX IF EXISTS users_email_trgm;
{word_indexes}
CREATE TABLE IF NOT EXISTS user_tokens (
    key text PRIMARY KEY,
    user_pk bigint NOT NULL REFERENCES users (pk) ON DELETE CASCADE,
    token_hash text NOT NULL UNIQUE,
    token_prefix text NOT NULL,
    readonly boolean NOT NULL,
    cidr_whitelist text NOT NULL,
    description text,
    created_at timestamptz NOT NULL
);
-- Schema 2: a token may expire (npm token create --expires). Idempotent, so it also migrates schema 1.
ALTER TABLE user_tokens ADD COLUMN IF NOT EXISTS expires_at timestamptz;
-- Schema 3: 1-2 character keywords (user_api/grams.py), kept by the store in each write's transaction.
CREATE TABLE IF NOT EXISTS user_grams (
    gram text COLLATE "C" NOT NULL,
    field smallint NOT NULL,
    user_pk bigint NOT NULL,
    PRIMARY KEY (gram, field, user_pk)
);
-- Schema 4: how many user_grams rows each (gram, field) has (a short search's counts in one read).
-- Schema 5: user_grams also holds 3-character grams, the counts 3-5 character ones (user_api/grams.py).
CREATE TABLE IF NOT EXISTS user_gram_counts (
    gram text COLLATE "C" NOT NULL,
    field smallint NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (gram, field)
);
CREATE INDEX IF NOT EXISTS user_tokens_by_user ON user_tokens (user_pk);
-- Schema 6: what an operator still has to run after an upgrade (SqlUserStore.pending_upgrade_steps).
CREATE TABLE IF NOT EXISTS upgrade_steps (step text PRIMARY KEY, since timestamptz NOT NULL);
-- Schema 7: the accounts' groups (user_api.groups), which were a local file of each API host before.
CREATE TABLE IF NOT EXISTS account_groups (
    user_pk bigint NOT NULL REFERENCES users (pk) ON DELETE CASCADE,
    name text NOT NULL,
    PRIMARY KEY (user_pk, name)
);
CREATE TABLE IF NOT EXISTS user_stats (id integer PRIMARY KEY CHECK (id = 1), live_users bigint NOT NULL);
INSERT INTO user_stats (id, live_users) VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION user_stats_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta integer := 0;
BEGIN
    IF TG_OP <> 'DELETE' AND NEW.status <> 'deleted' THEN delta := delta + 1; END IF;
    IF TG_OP <> 'INSERT' AND OLD.status <> 'deleted' THEN delta := delta - 1; END IF;
    IF delta <> 0 THEN UPDATE user_stats SET live_users = live_users + delta WHERE id = 1; END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER users_track_stats AFTER INSERT OR DELETE OR UPDATE OF status ON users
    FOR EACH ROW EXECUTE FUNCTION user_stats_track();
""".replace("{word_indexes}", WORD_INDEXES)


def word_test_is_exact(keyword: str) -> bool:
    """The word-text LIKE alone is the ILIKE test when the keyword holds no word break and no 'q'
    (the map is then the identity on every character it must meet); only then may ILIKE be left out."""
    return all(char.isalnum() for char in keyword) and "q" not in keyword.lower()


def match_condition(keyword: str, *, include_email: bool) -> str:
    """Rows holding the keyword (each `%s` = its LIKE pattern): the word indexes find candidates,
    and where the word test may over-match (word_test_is_exact), ILIKE keeps exactly the rows that
    match. The pattern is lowered in its column's collation, as ILIKE lowers both sides."""
    fields = SEARCH_FIELDS if include_email else SEARCH_FIELDS[:2]
    collations = {"username": ' COLLATE "C"'}
    candidates = " OR ".join(
        f"{word_text('u.' + field)} LIKE {word_text('%s' + collations.get(field, ''))} ESCAPE '\\'"
        for field in fields
    )
    if word_test_is_exact(keyword):
        return f"({candidates})"
    return f"({candidates}) AND " + like_condition(include_email=include_email, placeholder="%s", operator="ILIKE")


def fill_grams(conn: Any, after_pk: int, *, rows: range = range(1, INDEXED_GRAM + 1)) -> None:
    """Indexes the grams of every live user past `after_pk` (those whose length is in `rows`: the
    schema-5 migration adds the 3-character ones), and adds every gram to the counts (a migration's
    backfill, a bulk load)."""
    counts: Counter[tuple[str, int]] = Counter()
    with conn.cursor() as cursor:
        users = cursor.execute(  # read whole: a connection cannot fetch while it copies
            "SELECT pk, username, full_name, email FROM users WHERE pk > %s AND status <> 'deleted' ORDER BY pk",
            (after_pk,),
        ).fetchall()
        with cursor.copy("COPY user_grams (gram, field, user_pk) FROM STDIN") as copy:
            for row in counted(gram_rows(users, COUNTED_GRAM), counts, rows):
                copy.write_row(row)
        add_counts(cursor, counts)


def add_counts(cursor: Any, counts: Counter[tuple[str, int]]) -> None:
    """Adds a bulk load's counts (at 100k users ~500k (gram, field) pairs): copied into a scratch
    table, then one upsert in key order (the order every writer locks count rows in)."""
    cursor.execute("CREATE TEMP TABLE gram_count_delta (gram text, field smallint, n bigint) ON COMMIT DROP")
    with cursor.copy("COPY gram_count_delta (gram, field, n) FROM STDIN") as copy:
        for (gram, field), n in counts.items():
            copy.write_row((gram, field, n))
    cursor.execute(
        "INSERT INTO user_gram_counts (gram, field, n) SELECT gram, field, n FROM gram_count_delta"
        " ORDER BY gram COLLATE \"C\", field ON CONFLICT (gram, field) DO UPDATE SET n = user_gram_counts.n + excluded.n"
    )
    cursor.execute("DROP TABLE gram_count_delta")


def holds(row: tuple[Any, ...], folded: str, *, include_email: bool) -> bool:
    """A USER_COLUMNS row holds the folded keyword, folded as the gram counts fold (grams.fold)."""
    texts = (row[1], row[3], row[2]) if include_email else (row[1], row[3])
    return any(text and folded in fold(text) for text in texts)


def gram_sizes(tx: Tx, keyword: str, fields: tuple[int, ...]) -> tuple[Counter[str], list[str]]:
    """Live users holding the folded keyword and each of its 3-grams in `fields` (one read of the
    counts), with the 3-grams rarest first."""
    folded = fold(keyword)
    parts = sorted({folded[i:i + INDEXED_GRAM] for i in range(len(folded) - INDEXED_GRAM + 1)})
    sizes: Counter[str] = Counter()
    for gram, field, n in tx.all(
        f"SELECT gram, field, n FROM user_gram_counts WHERE gram IN ({', '.join('?' for _ in parts)}, ?)"
        f" AND field IN ({', '.join('?' for _ in fields)})", (*parts, folded, *fields),
    ):
        sizes[gram] += int(n)
        if int(field) == PREFIX:
            sizes[PREFIX_MARK + gram] += int(n)
    return sizes, sorted(parts, key=lambda gram: sizes[gram])


def walk_plan(
    tx: Tx, keyword: str, fields: tuple[int, ...], low: str, offset: int, limit: int
) -> tuple[tuple[str, ...], int, bool] | None:
    """(the 3-grams, rarest first; the first batch; whether the others are probed per key rather
    than read over the window) for a page walk along them (walk_grams), batch 0 when no page can
    hold a match; None when the pattern plan is expected to cost less (a keyword much rarer than
    its 3-grams)."""
    folded = fold(keyword)
    sizes, rarest = gram_sizes(tx, keyword, fields)
    matches = sizes[folded]
    others = matches - (sizes[PREFIX_MARK + folded] if folded == low else 0)  # users the page may show
    if others <= offset:
        return tuple(rarest), 0, False
    share = 1.0 if offset + limit >= others else (offset + limit) / others  # of the key range walked
    driver = max(sizes[rarest[0]], 1)
    window = WALK_WINDOW_ROWS * sum(sizes[gram] for gram in rarest[1:]) / driver  # the others' rows per key
    probes = WALK_DESCENT_ROWS * (len(rarest) - 1) * len(fields)  # or descents per driver key
    walk = share * driver * (1 + min(window, probes))
    pattern = WALK_FREE_ROWS + WALK_OVER_READ * matches + WALK_POSTING_ROWS * sum(sizes[g] for g in rarest)
    if walk > pattern:
        return None
    first = share * driver * 1.25
    batch = min(WALK_BATCH_MAX, max(WALK_BATCH, 1 << math.ceil(math.log2(max(first, 1)))))
    return tuple(rarest), batch, probes < window


def gram_keys(tx: Tx, gram: str, fields: tuple[int, ...], after: int, batch: int) -> list[int]:
    """The first `batch` user_pk past `after` holding the gram in `fields`, in key order: a Merge
    Append of each field's limited range (the batch is written in, a power of two, so the plan is
    made for it and each statement is prepared once)."""
    arms = " UNION ALL ".join(
        f"(SELECT user_pk FROM user_grams WHERE gram = ? AND field = {int(field)} AND user_pk > ?"
        f" ORDER BY user_pk LIMIT {int(batch)})" for field in fields
    )
    return [row[0] for row in tx.all(
        f"SELECT user_pk FROM ({arms}) AS arms ORDER BY user_pk LIMIT {int(batch)}",
        [value for _ in fields for value in (gram, after)],
    )]


def walk_candidates(
    tx: Tx, grams: tuple[str, ...], fields: tuple[int, ...], after: int, batch: int, probe: bool
) -> tuple[list[int], int]:
    """Users past `after` holding every gram, from the next `batch` keys of the first, and the
    last key read (0: the rows ended). Index-only reads of user_grams: the other grams' rows over
    the keys' window, or (`probe`: the others are much denser) looked up for those keys only. A
    user has one row per gram, so holding all the others is a count."""
    keys = gram_keys(tx, grams[0], fields, after, batch)
    last = keys[-1] if len(keys) == batch else 0
    if not keys or len(grams) < 2:
        return keys, last
    others = grams[1:]
    held_by = f"gram IN ({', '.join('?' for _ in others)}) AND field IN ({', '.join('?' for _ in fields)})"
    if probe:  # one index descent per (gram, field, key): `user_pk = ANY` in one scan is only a filter
        rows = tx.all(
            f"SELECT k.pk FROM unnest(?::bigint[]) AS k(pk)"
            f" WHERE (SELECT count(*) FROM user_grams WHERE {held_by} AND user_pk = k.pk) = ?",
            (keys, *others, *fields, len(others)),
        )
    else:
        rows = tx.all(
            f"SELECT user_pk FROM user_grams WHERE {held_by} AND user_pk > ? AND user_pk <= ?"
            " GROUP BY user_pk HAVING count(*) = ?",
            (*others, *fields, after, keys[-1], len(others)),
        )
    held = {row[0] for row in rows}
    return [key for key in keys if key in held], last


def walk_grams(
    tx: Tx, keyword: str, plan: tuple[tuple[str, ...], int, bool], fields: tuple[int, ...], *, include_email: bool,
    skip_prefix: tuple[str, str], offset: int, limit: int,
) -> list[tuple[Any, ...]]:
    """The page read along the users holding all the keyword's 3-grams, in key order
    (walk_candidates), each candidate's row tested in Python as the counts were made, batch after
    batch until the page is full or the rows end."""
    folded = fold(keyword)
    grams, batch, probe = plan
    page: list[tuple[Any, ...]] = []
    skipped, after = 0, 0
    while True:
        candidates, after = walk_candidates(tx, grams, fields, after, batch, probe)
        rows = tx.all(
            f"SELECT {columns(USER_COLUMNS, 'u')} FROM users u WHERE u.pk = ANY(?) ORDER BY u.pk", (candidates,)
        ) if candidates else []
        for row in rows:
            if skip_prefix[0] <= row[1] < skip_prefix[1] or not holds(row, folded, include_email=include_email):
                continue
            if skipped < offset:
                skipped += 1
                continue
            page.append(row)
            if len(page) == limit:
                return page
        if after == 0:
            return page
        batch = min(2 * batch, WALK_BATCH_MAX)


def migrate(conn: Any) -> None:
    """Brings a database of an older schema up to SCHEMA_VERSION (inside the schema transaction)."""
    row = conn.execute("SELECT max(version) FROM user_api_schema").fetchone()
    if row[0] is not None and row[0] < 2 and conn.execute("SELECT 1 FROM users LIMIT 1").fetchone():
        # Accounts of a release whose maintainer entries were rights by name (docs/operating/upgrades.md).
        conn.execute("INSERT INTO upgrade_steps (step, since) VALUES (%s, now()) ON CONFLICT DO NOTHING",
                     (BIND_RECORDED_MAINTAINERS,))  # fmt: skip
    if row[0] is not None and row[0] < 3:
        conn.execute("DELETE FROM user_grams")  # rebuilt whole: the index starts from what users hold
        conn.execute("DELETE FROM user_gram_counts")
        fill_grams(conn, 0)
    elif row[0] is not None and row[0] < 5:
        conn.execute("DELETE FROM user_gram_counts")  # recounted whole, 3-5 character grams added
        conn.execute("DELETE FROM user_grams WHERE length(gram) > 2")  # none before schema 5
        fill_grams(conn, 0, rows=range(3, INDEXED_GRAM + 1))
        conn.execute("ANALYZE users, user_grams, user_gram_counts")  # plans for their new sizes
    if row[0] is None or row[0] < SCHEMA_VERSION:
        conn.execute("INSERT INTO user_api_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
    elif row[0] > SCHEMA_VERSION:
        raise ConfigError(f"the database was written by a newer version (schema {row[0]})")


class _PgTx:
    def __init__(self, cursor: Any):
        self._cursor = cursor

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._cursor.execute(self._sql(sql), params).fetchall()

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return self._cursor.execute(self._sql(sql), params).fetchone()

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._cursor.execute(self._sql(sql), params).rowcount

    def raw(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """For SQL that already uses %s (the ILIKE search, which has a literal '?'-free escape).

        Never prepared: a prepared search may run PostgreSQL's generic plan, made without the
        pattern, which walks the whole primary key testing every row (1-2 s for a rare keyword
        at 100k users); each search is planned for its own pattern instead (~0.3 ms)."""
        return self._cursor.execute(sql, params, prepare=False).fetchall()


class PostgresDialect:
    name = "postgresql"
    for_update = " FOR UPDATE"
    indexed_gram = INDEXED_GRAM  # a 3-character keyword is one range, as a short one
    counted_gram = COUNTED_GRAM  # a 4-5 character total is a row read, not a heap recheck per match

    def __init__(self, url: str, *, data_dir: Path | None = None):
        """`data_dir`: where an earlier release kept the groups file this store moves in (user_api.groups)."""
        if psycopg is None:
            raise ConfigError("PostgreSQL needs psycopg: pip install 'registry-gen[postgres]'")
        self.url = url
        self.data_dir = data_dir
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        try:
            self._init_schema()
        except psycopg.OperationalError as exc:
            # The driver's message may quote the URL, password included: name the class only.
            raise ConfigError(f"cannot open the PostgreSQL user store ({exc.__class__.__name__})") from None

    def _connect(self) -> Any:
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
        # Requests read a few index pages: starting parallel workers cost ~15 ms more than they save.
        conn.execute("SET max_parallel_workers_per_gather = 0")
        with self._lock:
            self._connections.append(conn)
        return conn

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _init_schema(self) -> None:
        conn = self._connection()
        with legacy_groups(self.data_dir) as legacy:  # this host's groups file of an earlier release, if any
            with conn.transaction(), conn.cursor() as cursor:
                # A migration (index builds, the gram backfill) is an operator's wait, not a request's.
                conn.execute("SET LOCAL statement_timeout = 0")
                conn.execute(SCHEMA)  # its first statement takes the schema lock, held to the commit
                conn.execute(HOOK_TABLES)
                conn.execute(SHARED_TABLES)  # web-login sessions, login buckets (store_shared); no schema bump: only tables added
                conn.execute(ACCOUNT_AUDIT_TABLE)
                migrate(conn)
                unknown = [] if legacy is None else adopt_legacy_groups(_PgTx(cursor), legacy.rows)
            if legacy is not None:
                legacy.retire(unknown)

    @contextmanager
    def _transaction(self) -> Iterator[Tx]:
        with ExitStack() as stack:
            conn = self._begin(stack)
            cursor = stack.enter_context(conn.cursor())
            yield _PgTx(cursor)

    def _begin(self, stack: ExitStack) -> Any:
        """A transaction begun on this thread's connection. One that a database restart left dead
        is replaced once: its BEGIN failed, so nothing of the transaction was sent on it."""
        conn = self._connection()
        try:
            stack.enter_context(conn.transaction())
        except psycopg.OperationalError:
            conn.close()
            conn = self._connection()
            stack.enter_context(conn.transaction())
        return conn

    def read(self) -> Any:
        return self._transaction()

    def write(self) -> Any:
        return self._transaction()

    def is_unavailable(self, exc: BaseException) -> bool:
        return isinstance(exc, (psycopg.OperationalError, pg_errors.QueryCanceled))

    def is_username_conflict(self, exc: BaseException) -> bool:
        return isinstance(exc, pg_errors.UniqueViolation) and "username" in str(exc.diag.constraint_name or "")

    def encode_time(self, moment: datetime) -> datetime:
        return moment

    def count_matches(self, tx: Tx, keyword: str, *, include_email: bool, limit: int | None) -> int:
        # pg_trgm estimates a common trigram at ~20% of the table, so the planner scans the table,
        # testing the pattern on every row until the cap; the word indexes test only candidates.
        tx.run("SET LOCAL enable_seqscan = off")
        pattern = like_pattern(keyword)
        condition = match_condition(keyword, include_email=include_email)
        params: list[Any] = [pattern] * condition.count("%s")
        select = f"SELECT 1 FROM users u WHERE u.status <> 'deleted' AND {condition}"
        if limit is not None:
            select += " LIMIT %s"
            params.append(limit)
        rows = tx.raw(f"SELECT count(*) FROM ({select}) AS matches", params)  # type: ignore[attr-defined]
        return int(rows[0][0])

    def page_matches(
        self, tx: Tx, keyword: str, *, include_email: bool, skip_prefix: tuple[str, str], offset: int, limit: int,
        matches: int,
    ) -> list[tuple[Any, ...]]:
        """The page in sign-up order: a counted keyword (4-5 characters) walks its 3-grams'
        user_grams rows when that is short (walk_plan), else the pattern plan reads it."""
        if len(keyword) <= self.counted_gram:
            fields = match_fields(include_email=include_email)
            plan = walk_plan(tx, keyword, fields, skip_prefix[0], offset, limit)
            if plan is not None:
                return [] if plan[1] == 0 else walk_grams(
                    tx, keyword, plan, fields, include_email=include_email, skip_prefix=skip_prefix,
                    offset=offset, limit=limit,
                )
        return self.page_by_pattern(
            tx, keyword, include_email=include_email, skip_prefix=skip_prefix, offset=offset, limit=limit,
            matches=matches,
        )

    def page_by_pattern(
        self, tx: Tx, keyword: str, *, include_email: bool, skip_prefix: tuple[str, str], offset: int, limit: int,
        matches: int,
    ) -> list[tuple[Any, ...]]:
        """The page in sign-up order, by the pattern. The indexes yield matches unordered, so there are two plans:
        walk the primary key testing each row (about (offset + limit) * users / matches rows), or
        read every match through the indexes and sort (about `matches` rows). The planner guesses
        the match count from pg_trgm's estimate; the count just taken (`matches`, capped) is exact,
        so the plan is chosen here."""
        row = tx.one("SELECT live_users FROM user_stats WHERE id = 1")
        walk = (offset + limit) * (int(row[0]) if row else 0)
        tx.run("SET LOCAL enable_bitmapscan = off" if matches * matches > walk else "SET LOCAL enable_indexscan = off")
        tx.run("SET LOCAL enable_seqscan = off")
        pattern = like_pattern(keyword)
        condition = match_condition(keyword, include_email=include_email)
        params: list[Any] = [pattern] * condition.count("%s")
        return tx.raw(  # type: ignore[attr-defined]
            f"SELECT {columns(USER_COLUMNS, 'u')} FROM users u WHERE u.status <> 'deleted' AND {condition}"
            " AND NOT (u.username >= %s AND u.username < %s) ORDER BY u.pk LIMIT %s OFFSET %s",
            [*params, *skip_prefix, limit, offset],
        )

    def bulk_insert(self, rows: Iterable[tuple[Any, ...]], audit: Callable[[], list[tuple[Any, ...]]] | None = None) -> int:
        conn = self._connection()
        count = 0
        with conn.transaction(), conn.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 0")  # an operator's bulk load, not a request
            cursor.execute("ALTER TABLE users DISABLE TRIGGER users_track_stats")
            last_pk = cursor.execute("SELECT coalesce(max(pk), 0) FROM users").fetchone()[0]
            with cursor.copy(
                "COPY users (id, username, email, full_name, role, status, password_hash,"
                " created_at, updated_at, version) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row((*row, 1))
                    count += 1
            cursor.execute("ALTER TABLE users ENABLE TRIGGER users_track_stats")
            if audit is not None:
                cursor.executemany(store_audit.INSERT.replace("?", "%s"), audit())  # the accounts' entries, in their transaction
            fill_grams(conn, last_pk)
            cursor.execute(
                "UPDATE user_stats SET live_users = (SELECT count(*) FROM users WHERE status <> 'deleted')"
            )
        # Statistics, and the visibility map that index-only counts need (autovacuum completes it).
        # VACUUM, not only ANALYZE, on users: it merges the rows COPY left in the GIN indexes'
        # pending lists, which every pattern search otherwise reads whole (100k users: 878 buffers
        # and 7.6 ms for one bitmap, 38 and 0.5 ms once merged). Past the request timeout: at 1M
        # users the VACUUM of user_grams alone reads ~100M gram rows.
        conn.execute("SET statement_timeout = 0")
        try:
            conn.execute("VACUUM (ANALYZE) users")
            conn.execute("VACUUM (ANALYZE) user_grams")
            conn.execute("ANALYZE user_gram_counts")
        finally:
            conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
        return count

    def restore(self, tables: Sequence[tuple[str, Sequence[str], Sequence[tuple[Any, ...]]]]) -> None:
        """Rows copied whole from another store (`registry-gen migrate`), keys kept, into this empty
        one in one transaction: each table's rows replace its defaults (hook_cursor's row); the
        users' identity goes on after the highest key copied, the grams are made from the users."""
        conn = self._connection()
        with conn.transaction(), conn.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 0")  # an operator's move, not a request
            for table, names, rows in tables:
                cursor.execute(f"DELETE FROM {table}")  # names: user_api.store_migrate's own list
                overriding = " OVERRIDING SYSTEM VALUE" if table == "users" else ""  # pk kept: tokens and groups name it
                marks = ", ".join("%s" for _ in names)
                cursor.executemany(f"INSERT INTO {table} ({', '.join(names)}){overriding} VALUES ({marks})", rows)
            for table, key in (("users", "pk"), ("account_audit", "seq")):  # numbering goes on after the keys copied
                cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', '{key}'), max({key})) FROM {table} HAVING max({key}) IS NOT NULL")
            fill_grams(conn, 0)

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()
