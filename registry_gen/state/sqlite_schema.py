"""The cache's schema on SQLite (`state.sqlite3` and `cache.sqlite3`) and how an older one is
migrated in place or dropped: a version in MIGRATED_IN_PLACE gains what it lacks without losing
what it knows; any other (or an unreadable file) is dropped and made again, and the next build is
a full one. Only the ledger (registry_gen.state.migrations) may never be dropped."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

from registry_gen.state import heldopen
from registry_gen.state.sqlite_base import connect, user_version

SCHEMA_VERSION = 12  # any change to the tables below bumps it: a current state skips the schema script
WHOLE_STALE = "whole_documents_stale"  # setting: a deferred build left -/all and -/search.json behind
SHARDS_STALE = "search_shards_stale"  # setting: every search shard is to be written again (a schema-7 state's)
RELISTED_IN_PLACE = (5, 6)  # older states gain the listing columns and tables (what else they know kept)
# 7 gains the shard leaves and the duplicate-meta table; 8 the listings table; 9 loses the packages
# table's copies of a listing's browse key and modified time (the listings table has them); 11
# gains the table of packages whose write failed; 12 hands its pins, first-seen times and keyring
# to the ledger (which took them when it was made) and drops its copies.
MIGRATED_IN_PLACE = (*RELISTED_IN_PLACE, 7, 8, 9, 10, 11)
LEDGER_TABLES = ("live", "times")  # what schema 12 handed to the ledger
# Names per leaf when schema 8 cut the shards of an older state (half of a leaf then; leaves are
# kept full and split by registry_gen.build.indexes since).
SCHEMA_8_LEAF_FILL = 100
# The manifest cache's tables have not changed since schema 7: a state migration keeps its manifests.
CACHE_KEPT = tuple(range(7, SCHEMA_VERSION))
LEGACY_STATE_FILE = "state.json"  # the first versions' state; the ledger took its times when it was made

# The listing documents a change must touch O(1) of (schema 6). listed: on the front pages and in
# the site search (served, with versions, readable by anyone); search_text: what the API's search
# filters on (lower-case name, description, keywords, maintainers). search_keys: the site-search
# shards a listed package sits in. Its browse key (site.name_key: the browse pages are ranges of its
# prefixes) and modified time are in the listings table (schema 9; the packages table's copies of
# them went with schema 10).
_INDEX_COLUMNS = (
    ("listed", "INTEGER NOT NULL DEFAULT 0"),
    ("search_text", "TEXT NOT NULL DEFAULT ''"),
)
_INDEX_SCHEMA = """
CREATE TABLE IF NOT EXISTS search_keys (key TEXT, name TEXT, PRIMARY KEY (key, name)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS search_keys_by_name ON search_keys (name);
-- Listed packages per browse-key prefix (every prefix of two characters or more), so a browse
-- page's count and sub-ranges cost O(1) reads however many packages share the prefix.
CREATE TABLE IF NOT EXISTS prefixes (prefix TEXT PRIMARY KEY, parent TEXT NOT NULL, count INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS prefixes_by_parent ON prefixes (parent, prefix);
CREATE TABLE IF NOT EXISTS counters (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
-- Schema 8: each search shard cut into leaves of consecutive names, so that a publish rewrites one
-- leaf of at most indexes.SEARCH_LEAF_MAX records however many packages share a word. bound: the first name
-- the leaf may hold ('' for the first leaf); it holds the names up to the next leaf's bound.
CREATE TABLE IF NOT EXISTS search_leaves (key TEXT, bound TEXT, count INTEGER NOT NULL, PRIMARY KEY (key, bound)) WITHOUT ROWID;
-- Schema 9: what the listing pages read of each listed package (browse key, modified, summary, its
-- record in the search shards), apart from the wide packages row. A page reads up to 200 of them;
-- from packages each meant walking the overflow pages of a kilobytes-long record, and at 1M
-- versions that was most of a publish's reading. Here they are small rows, a few to a page.
CREATE TABLE IF NOT EXISTS listings (
    name TEXT PRIMARY KEY, range_key TEXT NOT NULL, modified TEXT NOT NULL, summary TEXT NOT NULL, search_entry BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS listings_by_range ON listings (range_key, name);
CREATE INDEX IF NOT EXISTS listings_by_modified ON listings (modified, name);
"""

STATE_SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- One row per folder of content/ holding archives or meta files: the stat listing seen last.
CREATE TABLE IF NOT EXISTS folders (folder TEXT PRIMARY KEY, listing BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS archives (
    path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, name TEXT, version TEXT, shasum TEXT,
    integrity TEXT, tarball_size INTEGER, file_count INTEGER, unpacked_size INTEGER,
    converted INTEGER, error TEXT
);
CREATE INDEX IF NOT EXISTS archives_by_name ON archives (name);
CREATE INDEX IF NOT EXISTS archives_with_errors ON archives (path) WHERE error IS NOT NULL;
CREATE INDEX IF NOT EXISTS archives_by_shasum ON archives (shasum);
CREATE TABLE IF NOT EXISTS metas (path TEXT PRIMARY KEY, name TEXT, error TEXT);
CREATE INDEX IF NOT EXISTS metas_by_name ON metas (name);
CREATE INDEX IF NOT EXISTS metas_with_errors ON metas (path) WHERE error IS NOT NULL;
-- Schema 8: every valid meta file after the first (by path) for its name, kept per write, so a
-- build reports them in O(duplicates), not by a self-join over every meta file.
CREATE TABLE IF NOT EXISTS meta_duplicates (path TEXT PRIMARY KEY, name TEXT NOT NULL) WITHOUT ROWID;
-- all_fragment/search_fragment: the package's serialised piece of -/all and of -/v1/search.
CREATE TABLE IF NOT EXISTS packages (
    name TEXT PRIMARY KEY, digest TEXT NOT NULL, present INTEGER NOT NULL, versions INTEGER NOT NULL,
    record TEXT NOT NULL, summary TEXT NOT NULL, all_fragment BLOB NOT NULL, search_fragment BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS links (name TEXT, target TEXT, PRIMARY KEY (name, target)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS links_by_target ON links (target);
-- Problems found while grouping a package's archives (two archives, one version, different bytes),
-- kept so every build reports them, not only the one that found them.
CREATE TABLE IF NOT EXISTS issues (name TEXT NOT NULL, path TEXT NOT NULL, reason TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS issues_by_name ON issues (name);
-- Schema 11: packages whose last write failed (the tree keeps their last good files): every build
-- plans them again, so the failure is retried and reported until it is gone, not only once.
CREATE TABLE IF NOT EXISTS unwritten (name TEXT PRIMARY KEY, reason TEXT NOT NULL) WITHOUT ROWID;
"""

def _connect(path: Path, schema: str, kept: tuple[int, ...]) -> sqlite3.Connection:
    db = connect(path, synchronous="NORMAL")
    # A full build's plans and spooled paths wait in temporary tables read by cursor, in order: a
    # small page cache serves them (the default 2 MB filled at 100k packages, not at 10k).
    db.execute("PRAGMA temp.cache_size=-512")
    version = user_version(db)
    if version == SCHEMA_VERSION:
        return db  # the version is written after the script: its tables are all there (a publish skips ~1 ms of DDL)
    if version not in kept:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            db.execute(f'DROP TABLE IF EXISTS "{table}"')
    db.executescript(schema)
    if schema is STATE_SCHEMA:
        _add_index_columns(db, relisted=version in RELISTED_IN_PLACE)
        if version in MIGRATED_IN_PLACE and version < 8:
            _fill_schema_8_tables(db)
        if version in MIGRATED_IN_PLACE:
            _move_listings(db)
            _drop_listing_copies(db)
            _drop_ledger_copies(db)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    return db


def _fill_schema_8_tables(db: sqlite3.Connection) -> None:
    """An older state gains its duplicate-meta rows and its shards' leaves in place; the next build
    writes every shard again (as leaves where a shard has outgrown one), nothing else."""
    db.execute("DELETE FROM meta_duplicates")
    db.execute(
        "INSERT INTO meta_duplicates (path, name) SELECT m.path, m.name FROM metas m WHERE m.error IS NULL"
        " AND m.name IS NOT NULL AND EXISTS (SELECT 1 FROM metas o WHERE o.name = m.name AND o.error IS NULL AND o.path < m.path)"
    )
    db.execute("DELETE FROM search_leaves")
    leaves: list[tuple[str, str, int]] = []
    for key, names in itertools.groupby(db.execute("SELECT key, name FROM search_keys ORDER BY key, name"), lambda row: row[0]):
        members = [name for _, name in names]
        half = SCHEMA_8_LEAF_FILL
        leaves.extend((key, "" if i == 0 else members[i], len(members[i : i + half])) for i in range(0, len(members), half))
    db.executemany("INSERT INTO search_leaves (key, bound, count) VALUES (?, ?, ?)", leaves)
    db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, '1')", (SHARDS_STALE,))


def _move_listings(db: sqlite3.Connection) -> None:
    """An older state's listed packages gain their rows in the listings table (schema 9), and the
    wide table loses its search-record column (one rewrite of it, once). A relisted state (5, 6)
    has none listed: its full build fills the table."""
    db.execute("DROP INDEX IF EXISTS packages_listed_by_range")  # the listings table's indexes answer now
    db.execute("DROP INDEX IF EXISTS packages_listed_by_modified")
    if "search_entry" not in {row[1] for row in db.execute("PRAGMA table_info(packages)")}:
        return
    db.execute(
        "INSERT OR REPLACE INTO listings (name, range_key, modified, summary, search_entry)"
        " SELECT name, range_key, modified, summary, search_entry FROM packages WHERE listed"
    )
    db.execute("ALTER TABLE packages DROP COLUMN search_entry")


def _drop_listing_copies(db: sqlite3.Connection) -> None:
    """Schema 10: the packages table loses `modified` (written, never read) and `range_key` (the
    listings table's copy is the one read), whichever of them an older state has."""
    have = {row[1] for row in db.execute("PRAGMA table_info(packages)")}
    for column in ("modified", "range_key"):
        if column in have:  # an index on it went with _move_listings
            db.execute(f"ALTER TABLE packages DROP COLUMN {column}")


def _drop_ledger_copies(db: sqlite3.Connection) -> None:
    """Schema 12: the pins, times and keyring live in the ledger, which took them when it was made
    (the build session opens the ledger before the cache, always)."""
    for table in LEDGER_TABLES:
        db.execute(f"DROP TABLE IF EXISTS {table}")  # one of two names, above
    db.execute("DELETE FROM settings WHERE key = 'signing_keys'")


def _add_index_columns(db: sqlite3.Connection, *, relisted: bool) -> None:
    """Schema 6's listing columns and tables; a schema-5 state gains them in place (its times and
    pinned versions kept) and the next build is a full one, which fills them."""
    have = {row[1] for row in db.execute("PRAGMA table_info(packages)")}
    for column, declaration in _INDEX_COLUMNS:
        if column not in have:
            db.execute(f"ALTER TABLE packages ADD COLUMN {column} {declaration}")
    db.executescript(_INDEX_SCHEMA)
    if db.execute("SELECT 1 FROM counters LIMIT 1").fetchone() is None:
        db.execute(
            "INSERT INTO counters (key, value) SELECT 'packages', COUNT(*) FROM packages"
            " UNION ALL SELECT 'versions', COALESCE(SUM(versions), 0) FROM packages"
        )
    if relisted:  # the full build that follows lists every package again, from nothing
        db.execute("UPDATE packages SET listed = 0")
        db.execute("DELETE FROM listings")
        db.execute("DELETE FROM search_keys")
        db.execute("DELETE FROM search_leaves")
        db.execute("DELETE FROM prefixes")
        db.execute("DROP TABLE IF EXISTS ranges")
        db.execute("DELETE FROM settings WHERE key = 'fingerprint'")


def open_database(path: Path, schema: str, *, kept: tuple[int, ...] = MIGRATED_IN_PLACE) -> sqlite3.Connection:
    """Opens (creating or, when unreadable, recreating) one of the two cache databases; a schema
    version not in `kept` is dropped and made again."""
    try:
        db = _connect(path, schema, kept)
    except sqlite3.DatabaseError:
        heldopen.release(path)
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        db = _connect(path, schema, kept)
    heldopen.hold(path)  # so that closing `db` after the build is not the last close (see heldopen)
    return db
