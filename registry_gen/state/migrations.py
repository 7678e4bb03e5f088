"""The ledger's schema, as numbered steps, and its one-time import from the layout before it.

The ledger (registry_gen.state.sqlite_ledger) is never dropped: each step runs once, in order, in
the transaction that records its number (`PRAGMA user_version`), and no step drops or rewrites what
an earlier one kept. A new fact gets a new step; an old step is never edited.

Before the ledger, the facts it holds lived in three places of the state folder: the `live` pins
and the signing keyring (a `settings` row) in `state.sqlite3`, and the first-seen times in
`first-seen.jsonl` (an older `state.json` held them before that). A new ledger takes them from
there in the transaction that creates it (`import_legacy`); the JSON Lines file is then left
beside it renamed `first-seen.jsonl.migrated`. The cache's own migration (sqlite_cache) drops its
copies only after: the ledger is always opened first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

STEPS: Final[tuple[tuple[int, str], ...]] = (
    (
        1,
        """
        -- The archive each served version was published from: a later archive with other bytes for
        -- the same name@version never replaces it (RATIONALE.md §6).
        CREATE TABLE pins (
            name TEXT NOT NULL, version TEXT NOT NULL, shasum TEXT NOT NULL, record TEXT NOT NULL,
            PRIMARY KEY (name, version)
        ) WITHOUT ROWID;
        CREATE INDEX pins_by_shasum ON pins (shasum);
        -- The time each served version was first published or seen: its `time` in the documents.
        CREATE TABLE first_seen (
            name TEXT NOT NULL, version TEXT NOT NULL, stamp TEXT NOT NULL, PRIMARY KEY (name, version)
        ) WITHOUT ROWID;
        -- Every public key the tree was ever signed with (JSON), so a rotation keeps old ones listed.
        CREATE TABLE keyring (id INTEGER PRIMARY KEY CHECK (id = 1), public_keys TEXT NOT NULL);
        """,
    ),
    (
        2,
        """
        -- The change journal (registry_gen.state.ledger). A write is kept pending, with its events and
        -- the digest each file of content/ it touches will have (JSON), before content/ changes; when
        -- it is done its events are appended to the journal (so seq follows the order writes became
        -- visible), and the pending row keeps only its outcome.
        CREATE TABLE writes (
            id INTEGER PRIMARY KEY, status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'aborted')),
            started TEXT NOT NULL, actor TEXT NOT NULL, actor_id TEXT, files TEXT NOT NULL, events TEXT NOT NULL
        );
        CREATE INDEX writes_pending ON writes (id) WHERE status = 'pending';
        CREATE TABLE journal (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, write_id INTEGER NOT NULL REFERENCES writes (id),
            time TEXT NOT NULL, actor TEXT NOT NULL, actor_id TEXT, kind TEXT NOT NULL, package TEXT NOT NULL,
            versions TEXT NOT NULL, detail TEXT NOT NULL
        );
        """,
    ),
    (
        3,
        """
        -- The audit log's "who" beside the actor (registry_gen.audit.Who, JSON): the token's key (its
        -- public id, never the secret), the client address and user agent of an HTTP write, or the
        -- command and OS user of a CLI one. Added columns only: rows before this step read as {}.
        ALTER TABLE writes ADD COLUMN who TEXT NOT NULL DEFAULT '{}';
        ALTER TABLE journal ADD COLUMN who TEXT NOT NULL DEFAULT '{}';
        """,
    ),
    (
        4,
        """
        -- Where each imported package came from (registry_gen.importers.origins): the origin it follows
        -- and each archive an import wrote (JSON: key -> size, sha512, mtime_ns). It lived in
        -- <data_dir>/import-origins/, which OriginLedger moves in once (the data folder is not the
        -- state folder this step is given) and leaves renamed import-origins.migrated.
        CREATE TABLE import_origins (name TEXT PRIMARY KEY, origin TEXT NOT NULL, files TEXT NOT NULL) WITHOUT ROWID;
        """,
    ),
    (
        5,
        """
        -- Purges of the caches in front that are owed (registry_gen.purge): recorded before a write
        -- stores anything and settled once the cache answered, so a cache that is down, or a process
        -- killed between its render and its purge, leaves a row the next retry sends (JSON lists of
        -- URL paths and surrogate keys; `since` and `due` in Unix seconds).
        CREATE TABLE owed_purges (
            id INTEGER PRIMARY KEY, paths TEXT NOT NULL, keys TEXT NOT NULL, since REAL NOT NULL, due REAL NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0
        );
        """,
    ),
)
LATEST: Final = STEPS[-1][0]
LEGACY_STATE: Final = "state.sqlite3"
LEGACY_FIRST_SEEN: Final = "first-seen.jsonl"
LEGACY_JSON_STATE: Final = "state.json"
MIGRATED_SUFFIX: Final = ".migrated"


def migrate(db: sqlite3.Connection, folder: Path) -> int:
    """Runs the steps the ledger has not run yet, each in its own transaction; a new ledger takes
    the facts of the layout before it (in `folder`) in the transaction of step 1. Returns the
    version the ledger had before."""
    before = int(db.execute("PRAGMA user_version").fetchone()[0])
    for number, script in STEPS:
        if number <= before:
            continue
        db.execute("BEGIN IMMEDIATE")
        if int(db.execute("PRAGMA user_version").fetchone()[0]) >= number:  # another process ran it meanwhile
            db.execute("ROLLBACK")
            continue
        try:
            for statement in _statements(script):
                db.execute(statement)
            if number == 1:
                import_legacy(db, folder)
            db.execute(f"PRAGMA user_version={number}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    if before == 0:
        _set_aside(folder / LEGACY_FIRST_SEEN)
    return before


def _statements(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def import_legacy(db: sqlite3.Connection, folder: Path) -> None:
    """The pins, the keyring and the first-seen times of the layout before the ledger."""
    state = folder / LEGACY_STATE
    if state.is_file():
        with contextlib.suppress(sqlite3.DatabaseError):  # unreadable: nothing in it can be trusted
            _import_state(db, state)
    first_seen = folder / LEGACY_FIRST_SEEN
    if first_seen.is_file():
        db.execute("DELETE FROM first_seen")  # the JSON Lines file is the durable record: it wins
        for name, stamps in _legacy_lines(first_seen):
            if stamps is None:
                db.execute("DELETE FROM first_seen WHERE name = ?", (name,))
            else:
                _put_first_seen(db, name, stamps, replace=True)
    for name, stamps in _legacy_json_times(folder / LEGACY_JSON_STATE).items():
        _put_first_seen(db, name, stamps, replace=False)


def _import_state(db: sqlite3.Connection, path: Path) -> None:
    old = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = {row[0] for row in old.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "live" in tables:
            rows = old.execute("SELECT name, version, shasum, record FROM live")
            while block := rows.fetchmany(1000):
                db.executemany("INSERT OR REPLACE INTO pins (name, version, shasum, record) VALUES (?, ?, ?, ?)", block)
        if "times" in tables:
            rows = old.execute("SELECT name, version, stamp FROM times")
            while block := rows.fetchmany(1000):
                db.executemany("INSERT OR REPLACE INTO first_seen (name, version, stamp) VALUES (?, ?, ?)", block)
        if "settings" in tables:
            row = old.execute("SELECT value FROM settings WHERE key = 'signing_keys'").fetchone()
            if row and row[0]:
                db.execute("INSERT OR REPLACE INTO keyring (id, public_keys) VALUES (1, ?)", (row[0],))
    finally:
        old.close()


def _put_first_seen(db: sqlite3.Connection, name: str, stamps: dict[str, str], *, replace: bool) -> None:
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    db.executemany(f"{verb} INTO first_seen (name, version, stamp) VALUES (?, ?, ?)", ((name, v, t) for v, t in stamps.items()))


def _legacy_lines(path: Path) -> Iterator[tuple[str, dict[str, str] | None]]:
    """(name, stamps), or (name, None) for a package that left, of each readable line of the old
    JSON Lines file, in order (later lines win). A torn or foreign line is skipped and said."""
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            entry = _parse_line(line)
            if entry is None:
                if line.strip():
                    log.warning("%s, line %d: not a first-seen record; skipped", path, number)
                continue
            yield entry


def _parse_line(line: str) -> tuple[str, dict[str, str] | None] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    if entry.get("forget") is True:
        return entry["name"], None
    stamps = entry.get("time")
    if not isinstance(stamps, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in stamps.items()):
        return None
    return entry["name"], stamps


def _legacy_json_times(path: Path) -> dict[str, dict[str, str]]:
    """First-seen times from the JSON state of the first versions."""
    try:
        times = json.loads(path.read_bytes()).get("times", {})
        return {n: dict(v) for n, v in times.items() if isinstance(v, dict)}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _set_aside(path: Path) -> None:
    """The old file, read once, stays beside the ledger under another name (nothing reads it again)."""
    if path.is_file():
        path.rename(path.with_name(path.name + MIGRATED_SUFFIX))
        log.warning("moved the first-seen times of %s into the ledger; the file is kept as %s", path, path.name + MIGRATED_SUFFIX)
