"""The cache on SQLite: everything a build can redo from content/ and the ledger, in the state
folder beside the tree (`Settings.state_folder`, OUT.state/ by default). Free to drop: a schema it
does not migrate in place, or a file it cannot read, is dropped and made again by a full build.

Two files, because they have different lifetimes:

* `state.sqlite3` (settings.state_file): what content/ looked like at the last build, what each
  archive holds, what each package's files and summary are, and where it shows in the listings.
  Every change of one build happens in one transaction committed last (after the ledger's), so a
  build that dies half-way leaves the previous state intact and the next build simply redoes the work.
* `cache.sqlite3`: the manifest and README of each archive, keyed by the tarball's sha1. Pure
  cache, content-addressed, committed as archives are read, so the package writers (worker
  processes) can read it while the state transaction is still open.

What cannot be redone (the pins of served versions, first-seen times, the keyring) is in the
ledger (registry_gen.state.sqlite_ledger), which the build session opens first and commits first.

Why SQLite rather than one JSON file: an incremental build at 100,000 versions must not load and
rewrite 100,000 records; here it touches only the rows of what changed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from registry_gen.state import heldopen
from registry_gen.state.records import (
    ARCHIVE_FIELDS,
    ArchiveRecord,
    BuildReport,
    BuildStart,
    LeafHood,
    ListingMove,
    ListingPlace,
    PackageBefore,
    PackageInputs,
    PackageWrite,
    StalePage,
)
from registry_gen.state.sqlite_base import connect_readonly, first_column, user_version
from registry_gen.state.sqlite_schema import SCHEMA_VERSION, SHARDS_STALE, STATE_SCHEMA, WHOLE_STALE, open_database
from registry_gen.state.sqlite_leaves import HeldLeaves
from registry_gen.state.sqlite_ledger import LEDGER_DATABASE, SqliteLedger
from registry_gen.state.sqlite_listings import ListingTables

_ARCHIVE_COLUMNS = ", ".join(ARCHIVE_FIELDS)
_ARCHIVE_PLACEHOLDERS = ", ".join("?" for _ in ARCHIVE_FIELDS)
_ARCHIVE_UPDATES = ", ".join(f"{name} = excluded.{name}" for name in ARCHIVE_FIELDS[1:])

# Reads a build asks, named once: on PostgreSQL several go together in one round trip
# (postgres_cache.PgSession, PgDb.prefetched), answered when these methods ask them.
BUILD_SETTINGS = "SELECT key, value FROM settings WHERE key IN ('fingerprint', ?, ?)"
ANY_PACKAGE = "SELECT 1 FROM packages LIMIT 1"
UNWRITTEN = "SELECT name FROM unwritten"
ARCHIVES_OF = f"SELECT {_ARCHIVE_COLUMNS} FROM archives WHERE name = ? AND error IS NULL ORDER BY path"
PACKAGE_ROW = "SELECT digest, present, record, summary FROM packages WHERE name = ?"
METAS_OF = "SELECT path, error FROM metas WHERE name = ? ORDER BY path"
META_ERRORS = "SELECT path, name, error FROM metas WHERE error IS NOT NULL ORDER BY path"
DUPLICATE_METAS = "SELECT name, path FROM meta_duplicates ORDER BY path"
ARCHIVE_ERRORS = "SELECT path, error FROM archives WHERE error IS NOT NULL ORDER BY path"
ALL_ISSUES = "SELECT name, path, reason FROM issues ORDER BY path, reason"


def _record(row: tuple[Any, ...]) -> ArchiveRecord:
    return ArchiveRecord(*row[:10], bool(row[10]), row[11])


class BuildState(ListingTables):
    """The state database, inside one write transaction from `begin()` to `commit()`."""

    def __init__(self, path: Path, db: sqlite3.Connection | None = None, ledger: SqliteLedger | None = None):
        self.path = path
        # The ledger first: a new one takes the pins and times of an older cache, whose own
        # migration then drops them.
        self.ledger = ledger or SqliteLedger(path.parent / LEDGER_DATABASE)
        try:
            self.db = db or open_database(path, STATE_SCHEMA)
        except BaseException:
            self.ledger.close()
            raise

    @classmethod
    def reading(cls, path: Path) -> BuildState:
        """A read-only view for the write side's questions (call with the build lock held).

        It skips the schema script, and closing it never checkpoints the WAL (only a writer can):
        a publish would otherwise pay a checkpoint for the look before its build. A missing state
        or one of another schema opens the ordinary way, which creates or migrates it."""
        ledger = SqliteLedger.reading(path.parent / LEDGER_DATABASE)
        if path.exists():
            try:
                db = connect_readonly(path)
                if user_version(db) == SCHEMA_VERSION:
                    return cls(path, db, ledger)
                db.close()
            except sqlite3.DatabaseError:
                pass  # unreadable: the ordinary open recreates it
        ledger.close()
        return cls(path)

    # -- transaction: the ledger commits first, the cache second (SQLite files in WAL mode do not
    # commit as a set): a crash between the two leaves the ledger ahead, and the next build, which
    # trusts the ledger, converges.

    def begin(self, *, durable: bool = True) -> None:
        """`durable=False` (the build of a journalled write): the ledger's commit will not wait for
        the disk. The write's journal entry, synced before content/ changed, makes it safe: lost
        to a power cut, the write is pending again, and its recovery builds it again."""
        self.ledger.begin(durable=durable)
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.ledger.commit()
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        self.ledger.rollback()
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def close(self) -> None:
        self.rollback()
        try:
            heldopen.close(self.db, self.path)
        finally:
            self.ledger.close()

    # -- settings

    def get_setting(self, key: str) -> str:
        row = self.db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else ""

    def set_setting(self, key: str, value: str) -> None:
        # Only when it differs: a rewritten row, even an equal one, makes the commit of a build
        # that changed nothing write and sync the database.
        if self.get_setting(key) != value:
            self.db.execute("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    def set_settings(self, values: Mapping[str, str]) -> None:
        """set_setting for each of `values`, read in one query (a round trip per key on PostgreSQL,
        where a build's end holds the listings lock)."""
        keys = list(values)
        held = dict(self.db.execute(f"SELECT key, value FROM settings WHERE key IN ({', '.join('?' for _ in keys)})", keys))
        changed = [(key, value) for key, value in values.items() if held.get(key, "") != value]
        self.db.executemany("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", changed)

    def forget_content(self) -> None:
        """Every archive and meta file will be read again (new generator or settings)."""
        self.db.execute("DELETE FROM folders")
        # So does what each archive held: one that can no longer be read keeps the version it was
        # published from served through a full build too (forgotten_archive, damaged_sources).
        self.db.execute("DROP TABLE IF EXISTS temp.forgotten_archives")
        self.db.execute("CREATE TEMP TABLE forgotten_archives AS SELECT path, name, version FROM archives WHERE name IS NOT NULL")
        self.db.execute("DELETE FROM archives")
        # Which package each meta file was for outlives its row: a file now invalid keeps that
        # package at its last good tree through a full build too (forgotten_meta_name).
        self.db.execute("DROP TABLE IF EXISTS temp.forgotten_metas")
        self.db.execute("CREATE TEMP TABLE forgotten_metas AS SELECT path, name FROM metas WHERE name IS NOT NULL")
        self.db.execute("DELETE FROM metas")
        self.db.execute("DELETE FROM meta_duplicates")
        self.db.execute("DELETE FROM issues")

    def begin_build(self, fingerprint: str, *, durable: bool = True, held: Collection[str] = ()) -> BuildStart:
        """Opens the build's transaction; what the build needs to know before it looks at content/
        (`held`: the packages whose write lock the caller holds, registry_gen.state.ledger)."""
        self.begin(durable=durable)
        return self.build_start(fingerprint, held)

    def build_start(self, fingerprint: str, held: Collection[str]) -> BuildStart:
        """begin_build's questions, in its transaction."""
        settings = dict(self.db.execute(BUILD_SETTINGS, (SHARDS_STALE, WHOLE_STALE)))
        empty = self.db.execute(ANY_PACKAGE).fetchone() is None and not settings.get("fingerprint")
        return BuildStart(
            empty=empty,
            fingerprint_changed=settings.get("fingerprint", "") != fingerprint,
            unwritten=frozenset(self.unwritten_names()),
            shards_stale=bool(settings.get(SHARDS_STALE)),
            whole_stale=bool(settings.get(WHOLE_STALE)),
            seed_pins=not empty and not self.ledger.has_pins(),
            pending_writes=tuple((w.id, dict(w.files)) for w in self.ledger.pending_writes(held)),
        )

    def finish_build(self, fingerprint: str, *, whole_stale: bool | None, whole_mark: str = "1") -> None:
        """What the next build starts from: this build's fingerprint (the one it started from: a
        template edited meanwhile makes the next build redo it) and what it left stale. For -/all
        and -/search.json, `whole_stale` True marks them stale (with `whole_mark`: a write's "1",
        or a rewrite's own from `new_whole_mark`), False settles them (rendered), None keeps their
        mark as it is (not looked at: a write may have marked them since this build began)."""
        values = {"fingerprint": fingerprint, SHARDS_STALE: ""}
        if whole_stale is not None:
            values[WHOLE_STALE] = whole_mark if whole_stale else ""
        self.set_settings(values)

    def new_whole_mark(self) -> str:
        return "r"  # never asked of the embedded default: its rewrite settles -/all in its build

    # -- listing pages left to the rewrite: none here, the embedded default renders them in the write

    def mark_listings_stale(self, pages: Iterable[StalePage]) -> None:
        raise NotImplementedError("the embedded state renders its listing pages in the write's build")

    def stale_listings(self) -> list[StalePage]:
        return []

    def prefix_growth(self) -> Mapping[str, tuple[int, int]]:
        return {}  # asked only where a write marks its pages (PostgreSQL): the embedded default renders them

    def settle_stale_listings(self, pages: Iterable[StalePage]) -> None:
        return None

    def build_report(self) -> BuildReport:
        """Every refusal the state keeps, for the build's result (its totals: `totals`)."""
        errors, duplicates = self.meta_problems()
        return BuildReport(tuple(self.archive_errors()), tuple(self.all_issues()), tuple(errors), tuple(duplicates))

    # -- folder listings

    def folder_listings(self) -> dict[str, bytes]:
        return dict(self.db.execute("SELECT folder, listing FROM folders"))

    def folder_listing(self, folder: str) -> bytes | None:
        row = self.db.execute("SELECT listing FROM folders WHERE folder = ?", (folder,)).fetchone()
        return row[0] if row else None

    def put_folder_listing(self, folder: str, listing: bytes | None) -> None:
        if listing is None:
            self.db.execute("DELETE FROM folders WHERE folder = ?", (folder,))
        else:
            self.db.execute("INSERT INTO folders (folder, listing) VALUES (?, ?) ON CONFLICT (folder) DO UPDATE SET listing = excluded.listing", (folder, listing))

    # -- paths waiting to be read: a full build finds every archive (~100 MB of paths at 1M
    # versions), so past a few thousand they wait in a temporary table (the temp database, on
    # disk past its small page cache), not in the heap.

    SPOOLS = ("spooled_paths", "spooled_metas")  # the archive paths, the meta file paths

    def spool_paths(self, paths: Iterable[str], *, fresh: bool = False, spool: str = "spooled_paths") -> None:
        if spool not in self.SPOOLS:
            raise ValueError(f"not a spool: {spool}")
        if fresh:
            self.db.execute(f"DROP TABLE IF EXISTS temp.{spool}")  # the table name is one of SPOOLS, checked above
        # No key: appending is ~4x faster than keeping a B-tree in order (1M paths: ~3 s against
        # ~11 s), and the one ORDER BY sorts in bounded memory (SQLite's sorter spills to disk).
        self.db.execute(f"CREATE TEMP TABLE IF NOT EXISTS {spool} (path TEXT NOT NULL)")
        self.db.executemany(f"INSERT INTO temp.{spool} (path) VALUES (?)", ((path,) for path in paths))

    def spooled_paths(self, batch: int = 1000, spool: str = "spooled_paths") -> Iterator[str]:
        """The spooled paths in path order, a batch at a time; the spool is dropped once they are all out."""
        if spool not in self.SPOOLS:
            raise ValueError(f"not a spool: {spool}")
        yield from first_column(self.db.execute(f"SELECT path FROM temp.{spool} ORDER BY path"), batch)
        self.db.execute(f"DROP TABLE IF EXISTS temp.{spool}")

    # -- archives

    def archive(self, path: str) -> ArchiveRecord | None:
        row = self.db.execute(f"SELECT {_ARCHIVE_COLUMNS} FROM archives WHERE path = ?", (path,)).fetchone()
        return _record(row) if row else None

    def previous_archives(self, paths: Iterable[str]) -> dict[str, ArchiveRecord]:
        """What the state held for each of `paths` before this build read it again (in a full
        build, which forgot the content: only the name and version each held)."""
        wanted = list(paths)
        found: dict[str, ArchiveRecord] = {}
        for start in range(0, len(wanted), 500):  # a query per 500 paths (a read's batch is 256)
            chunk = wanted[start : start + 500]
            rows = self.db.execute(f"SELECT {_ARCHIVE_COLUMNS} FROM archives WHERE path IN ({', '.join('?' for _ in chunk)})", chunk)
            found.update((row[0], _record(row)) for row in rows)
        missing = [path for path in wanted if path not in found]
        if missing and self._forgets_archives():  # asked once per batch, not per path
            for path in missing:
                if (held := self._forgotten(path)) is not None:
                    found[path] = ArchiveRecord(path, 0, 0, held[0], held[1])
        return found

    def record_archives(self, records: Iterable[ArchiveRecord], removed: Iterable[str]) -> None:
        """The archives read again, and those gone from content/."""
        self.db.executemany(
            f"INSERT INTO archives ({_ARCHIVE_COLUMNS}) VALUES ({_ARCHIVE_PLACEHOLDERS}) ON CONFLICT (path) DO UPDATE SET {_ARCHIVE_UPDATES}",
            (tuple(getattr(record, name) for name in ARCHIVE_FIELDS) for record in records),  # not astuple(): it deep-copies
        )
        self.db.executemany("DELETE FROM archives WHERE path = ?", ((path,) for path in removed))

    def archives_of(self, name: str) -> list[ArchiveRecord]:
        """The readable archives claiming `name`, by path."""
        rows = self.db.execute(ARCHIVES_OF, (name,))
        return [_record(row) for row in rows]

    def damaged_sources(self, name: str) -> list[tuple[str, str]]:
        """(version, path) of each archive that held `name`@version and can no longer be read (it
        keeps the name and version it held when it last could: build._read)."""
        rows = self.db.execute("SELECT version, path FROM archives WHERE name = ? AND error IS NOT NULL ORDER BY path", (name,))
        return [(version, path) for version, path in rows if version]

    def forgotten_archive(self, path: str) -> tuple[str, str] | None:
        """(name, version) an archive held before this build forgot the content (forget_content)."""
        return self._forgotten(path) if self._forgets_archives() else None

    def _forgets_archives(self) -> bool:
        return self.db.execute("SELECT 1 FROM temp.sqlite_master WHERE name = 'forgotten_archives'").fetchone() is not None

    def _forgotten(self, path: str) -> tuple[str, str] | None:
        row = self.db.execute("SELECT name, version FROM temp.forgotten_archives WHERE path = ?", (path,)).fetchone()
        return (row[0], row[1]) if row else None

    def archive_errors(self) -> list[tuple[str, str]]:
        return list(self.db.execute(ARCHIVE_ERRORS))

    # -- meta files

    def meta(self, path: str) -> tuple[str | None, str | None] | None:
        row = self.db.execute("SELECT name, error FROM metas WHERE path = ?", (path,)).fetchone()
        return (row[0], row[1]) if row else None

    def forgotten_meta_name(self, path: str) -> str | None:
        """The package a meta file was for before this build forgot the content (forget_content)."""
        if self.db.execute("SELECT 1 FROM temp.sqlite_master WHERE name = 'forgotten_metas'").fetchone() is None:
            return None
        row = self.db.execute("SELECT name FROM temp.forgotten_metas WHERE path = ?", (path,)).fetchone()
        return row[0] if row else None

    def _find_duplicate_metas(self, names: set[str | None]) -> None:
        """The valid meta files of `names` after the first by path: O(that name's meta files)."""
        for name in names - {None}:
            self.db.execute("DELETE FROM meta_duplicates WHERE name = ?", (name,))
            self.db.execute(
                "INSERT INTO meta_duplicates (path, name) SELECT path, name FROM metas"
                " WHERE name = ? AND error IS NULL ORDER BY path LIMIT -1 OFFSET 1",
                (name,),
            )

    def previous_meta_names(self, paths: Iterable[str]) -> dict[str, str | None]:
        """The package each of `paths` was for before this build read it again (None: a file that
        never named one); in a full build, which forgot the content, the name it had then."""
        found = {}
        for path in paths:
            row = self.meta(path)
            if row is not None:
                found[path] = row[0]
            elif (name := self.forgotten_meta_name(path)) is not None:
                found[path] = name
        return found

    def record_metas(self, metas: Iterable[tuple[str, str | None, str | None]], removed: Iterable[str]) -> None:
        """(path, the package it names, its error) of the meta files read again, and those gone."""
        names: set[str | None] = set()
        for path, name, error in metas:
            before = self.meta(path)
            self.db.execute("INSERT INTO metas (path, name, error) VALUES (?, ?, ?) ON CONFLICT (path) DO UPDATE SET name = excluded.name, error = excluded.error", (path, name, error))
            names.update((name, before[0] if before else None))
        for path in removed:
            before = self.meta(path)
            self.db.execute("DELETE FROM metas WHERE path = ?", (path,))
            names.add(before[0] if before else None)
        self._find_duplicate_metas(names)

    def meta_problems(self) -> tuple[list[tuple[str, str | None, str]], list[tuple[str, str]]]:
        """The unreadable meta files (path, name when last valid, reason), and every valid one
        after the first for a name (name, path)."""
        return self.meta_errors(), self.duplicate_metas()

    def metas_of(self, name: str) -> list[tuple[str, str | None]]:
        """(path, error) of every meta file naming `name` (or that named it before turning invalid)."""
        return list(self.db.execute(METAS_OF, (name,)))

    def meta_errors(self) -> list[tuple[str, str | None, str]]:
        """(path, the name it had when last valid, error) of every unreadable meta file."""
        return list(self.db.execute(META_ERRORS))

    def duplicate_metas(self) -> list[tuple[str, str]]:
        """(name, path) of every valid meta file after the first (by path) for the same name."""
        return list(self.db.execute(DUPLICATE_METAS))

    # -- first-seen publish times (in the ledger)

    def times_of(self, name: str) -> dict[str, str]:
        return self.ledger.first_seen(name)

    def record_first_seen(self, name: str, stamps: dict[str, str]) -> None:
        """Records the publish times a build resolved for versions it had no time for."""
        if stamps:
            self.ledger.record_first_seen(name, stamps)

    # -- packages

    def package_inputs(self, name: str) -> PackageInputs:
        """Everything the state knows of one package that its plan and its write need."""
        archives = self.archives_of(name)
        pins = self.live_of(name)
        unsourced = pins.keys() - {record.version for record in archives}  # damaged ones are looked up only then
        return PackageInputs(
            name,
            self.package(name),
            tuple(archives),
            pins,
            tuple(self.damaged_sources(name)) if unsourced else (),
            tuple(self.metas_of(name)),
            self.times_of(name),
        )

    def package(self, name: str) -> dict[str, Any] | None:
        row = self.db.execute(PACKAGE_ROW, (name,)).fetchone()
        if not row:
            return None
        record = json.loads(row[2])
        record["digest"] = row[0]
        record["present"] = bool(row[1])
        record["summary"] = json.loads(row[3])
        return record

    def put_package(
        self, name: str, record: dict[str, Any], *, present: bool, fragments: tuple[bytes, bytes], move: ListingMove
    ) -> dict[str, str]:
        """Keeps a written package: its row, its links, and its place in the listings (`move`, as
        the build decided it). Returns the bound each search leaf split by the move starts at."""
        body = {k: v for k, v in record.items() if k not in ("digest", "present", "summary")}
        versions = int(record["summary"]["versions"])
        summary = json.dumps(record["summary"], separators=(",", ":"))
        listing = move.listing or ListingPlace()
        self._count_package(name, versions_now=versions)
        self.db.execute(
            "INSERT INTO packages (name, digest, present, versions, record, summary, all_fragment,"
            " search_fragment, listed, search_text)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET digest = excluded.digest,"
            " present = excluded.present, versions = excluded.versions, record = excluded.record, summary = excluded.summary,"
            " all_fragment = excluded.all_fragment, search_fragment = excluded.search_fragment, listed = excluded.listed,"
            " search_text = excluded.search_text",
            (
                name,
                record["digest"],
                present,  # a bool: SQLite keeps it as 1 or 0, PostgreSQL as a boolean
                versions,
                json.dumps(body, separators=(",", ":")),
                summary,
                fragments[0],
                fragments[1],
                listing.listed,
                listing.search_text,
            ),
        )
        self._place_listing(name, listing, summary)
        splits = self.apply_listing_move(move)
        self.db.execute("DELETE FROM links WHERE name = ?", (name,))
        self.db.executemany(
            "INSERT INTO links (name, target) VALUES (?, ?) ON CONFLICT DO NOTHING", ((name, t) for t in record.get("links", ()))
        )
        return splits

    def _place_listing(self, name: str, listing: ListingPlace, summary: str) -> None:
        """The package's row of the listings: replaced, or gone when it is not listed."""
        self.db.execute("DELETE FROM listings WHERE name = ?", (name,))
        if listing.listed:
            self.db.execute(
                "INSERT INTO listings (name, range_key, modified, summary, search_entry) VALUES (?, ?, ?, ?, ?)",
                (name, listing.range_key, listing.modified, summary, listing.search_entry),
            )

    def package_before(self, name: str, keys_after: Iterable[str]) -> PackageBefore:
        """What the package was just before its outcome is kept (its page's links, its listing)."""
        row = self.db.execute("SELECT record FROM packages WHERE name = ?", (name,)).fetchone()
        links = frozenset(json.loads(row[0]).get("links", ())) if row else frozenset()
        listed, hoods = self.listing_neighbourhood(name, keys_after) if row else (None, {k: self._hood(k, name, leaving=False) for k in keys_after})
        return PackageBefore(links, listed, hoods)

    def commit_package(self, write: PackageWrite, move: ListingMove) -> dict[str, str]:
        """Keeps one written package: its row, links and listing place (the cache), the versions it
        serves and the times resolved for it (the ledger). Returns the leaves split by its move."""
        splits = self.put_package(write.name, write.record, present=write.present, fragments=write.fragments, move=move)
        self.ledger.pin(write.name, write.pins)
        self.ledger.record_first_seen(write.name, write.times)
        if write.retried:
            self.set_unwritten(write.name, None)
        return splits

    def remove_package(self, name: str, move: ListingMove | None) -> dict[str, str]:
        """Forgets a package that left the tree (`move`: out of the listings; None when it was never
        written): its row, pins and first-seen times, and any failure recorded for it."""
        splits = self.delete_package(name, move) if move is not None else {}
        self.ledger.forget_first_seen(name)
        self.set_unwritten(name, None)
        return splits

    def record_failure(self, name: str, reason: str | None) -> None:
        """A package whose write failed (reason): every later build tries it again; None clears it."""
        self.set_unwritten(name, reason)

    def record_refusals(self, refusals: dict[str, list[tuple[str, str]]]) -> None:
        """The archives each package refused (path, reason), kept so every build reports them."""
        for name, issues in refusals.items():
            self.set_issues(name, issues)

    def set_unwritten(self, name: str, reason: str | None) -> None:
        """Records that the package's write failed (reason), or that it succeeded (None)."""
        if reason is None:
            self.db.execute("DELETE FROM unwritten WHERE name = ?", (name,))
        else:
            self.db.execute("INSERT INTO unwritten (name, reason) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET reason = excluded.reason", (name, reason))

    def unwritten_names(self) -> set[str]:
        return {row[0] for row in self.db.execute(UNWRITTEN)}

    def delete_package(self, name: str, move: ListingMove) -> dict[str, str]:
        """Forgets a written package (`move` takes it out of the listings)."""
        self._count_package(name, versions_now=None)
        self.db.execute("DELETE FROM listings WHERE name = ?", (name,))
        splits = self.apply_listing_move(move)
        self.db.execute("DELETE FROM packages WHERE name = ?", (name,))
        self.db.execute("DELETE FROM links WHERE name = ?", (name,))
        self.ledger.unpin(name)
        return splits

    def _count_package(self, name: str, *, versions_now: int | None) -> None:
        """Moves the package and version counters (versions_now None: the package goes)."""
        row = self.db.execute("SELECT versions FROM packages WHERE name = ?", (name,)).fetchone()
        before = int(row[0]) if row else 0
        self._add_counters({"packages": (versions_now is not None) - (row is not None), "versions": (versions_now or 0) - before})

    def _add_counters(self, deltas: dict[str, int]) -> None:
        for key, delta in deltas.items():
            self._add_counter(key, delta)

    def _add_counter(self, key: str, delta: int) -> None:
        if delta:
            self.db.execute(
                "INSERT INTO counters (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = counters.value + excluded.value",
                (key, delta),
            )

    def is_present(self, name: str) -> bool:
        row = self.db.execute("SELECT present FROM packages WHERE name = ?", (name,)).fetchone()
        return bool(row and row[0])

    def present_count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM packages WHERE present").fetchone()[0])

    def present_names(self) -> Iterator[str]:
        """One at a time (the worker processes get them as one file: a set here was ~10 MB at 1M versions)."""
        return (row[0] for row in self.db.execute("SELECT name FROM packages WHERE present"))

    # -- a full build's working set, per package (the plans, who will link to whom): temporary
    # tables of this connection, read back a batch at a time, so a full build holds none of it in
    # the heap (held, it grew the build by ~750 B per package: 75 MB at 1M versions).

    def start_full_build(self) -> None:
        self.db.execute("DROP TABLE IF EXISTS temp.full_plans")
        self.db.execute("DROP TABLE IF EXISTS temp.predicted_links")
        self.db.execute(
            "CREATE TEMP TABLE full_plans (name TEXT PRIMARY KEY, action TEXT NOT NULL, present INTEGER NOT NULL,"
            " was_present INTEGER NOT NULL) WITHOUT ROWID"
        )
        self.db.execute("CREATE INDEX temp.full_plans_by_action ON full_plans (action, name)")
        self.db.execute("CREATE TEMP TABLE predicted_links (target TEXT, name TEXT, PRIMARY KEY (target, name)) WITHOUT ROWID")
        self.db.execute("CREATE INDEX temp.predicted_links_by_name ON predicted_links (name)")

    def every_package_name(self, batch: int = 1000) -> Iterator[str]:
        """Every name the state knows (packages, archives, meta files), by name, a batch at a time."""
        rows = self.db.execute(
            "SELECT name FROM packages UNION SELECT name FROM archives WHERE name IS NOT NULL"
            " UNION SELECT name FROM metas WHERE name IS NOT NULL ORDER BY 1"
        )
        return first_column(rows, batch)

    def put_plans(self, plans: Iterable[tuple[str, str, bool, bool]]) -> None:
        """(name, action, present, was_present) of a full build's packages."""
        self.db.executemany("INSERT OR REPLACE INTO temp.full_plans (name, action, present, was_present) VALUES (?, ?, ?, ?)", plans)

    def plan_of(self, name: str) -> tuple[str, bool, bool] | None:
        row = self.db.execute("SELECT action, present, was_present FROM temp.full_plans WHERE name = ?", (name,)).fetchone()
        return (row[0], bool(row[1]), bool(row[2])) if row else None

    def planned(self, action: str | None = None, batch: int = 1000) -> Iterator[str]:
        """The planned names (with `action`, or all), by name, a batch at a time."""
        # ?1 IS NULL: every action; else the (action, name) index gives them in name order.
        rows = self.db.execute("SELECT name FROM temp.full_plans WHERE ?1 IS NULL OR action = ?1 ORDER BY name", (action,))
        return first_column(rows, batch)

    def planned_count(self, action: str | None = None) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM temp.full_plans WHERE ?1 IS NULL OR action = ?1", (action,)).fetchone()[0])

    def present_after_full_build(self, batch: int = 1000) -> Iterator[str]:
        return first_column(self.db.execute("SELECT name FROM temp.full_plans WHERE present ORDER BY name"), batch)

    def put_predicted_links(self, name: str, targets: Iterable[str]) -> None:
        """The packages `name`'s page will link to, from its manifest, before it is written."""
        self.db.executemany("INSERT OR IGNORE INTO temp.predicted_links (target, name) VALUES (?, ?)", ((t, name) for t in targets))

    def predicted_links_of(self, name: str) -> set[str]:
        return {t for (t,) in self.db.execute("SELECT target FROM temp.predicted_links WHERE name = ?", (name,))}

    def linking_after_full_build(self, target: str, action: str) -> set[str]:
        """Who will link to `target` after this full build: the packages it rewrites (planned
        `action`) by their predicted links, the others by their links in the state."""
        rows = self.db.execute(
            "SELECT name FROM links WHERE target = ?1 AND NOT EXISTS"
            " (SELECT 1 FROM temp.full_plans p WHERE p.name = links.name AND p.action = ?2)"
            " UNION SELECT name FROM temp.predicted_links WHERE target = ?1",
            (target, action),
        )
        return {name for (name,) in rows}

    def linking_to(self, targets: Iterable[str]) -> set[str]:
        found: set[str] = set()
        for target in targets:
            found.update(row[0] for row in self.db.execute("SELECT name FROM links WHERE target = ?", (target,)))
        return found

    def totals(self) -> tuple[int, int]:
        """(packages, versions), kept as counters so that asking costs O(1) at any size."""
        counts = dict(self.db.execute("SELECT key, value FROM counters"))
        return int(counts.get("packages", 0)), int(counts.get("versions", 0))

    # -- issues

    def live_of(self, name: str) -> dict[str, ArchiveRecord]:
        """version -> the archive record each served version of `name` was published from."""
        return self.ledger.pins(name)

    def pin(self, name: str, releases: dict[str, ArchiveRecord]) -> None:
        self.ledger.pin(name, releases)

    # -- the write side's questions (StateView)

    def served_versions(self, name: str) -> frozenset[str]:
        return self.ledger.pinned_versions(name)

    def meta_paths(self, name: str) -> list[str]:
        """The valid meta files the build found for `name`, by path."""
        return [path for path, error in self.metas_of(name) if error is None]

    def archive_paths(self, name: str, version: str | None = None) -> list[str]:
        """Every archive in content/ the build found holding `name` (@`version`), readable or
        damaged (a damaged one still serves the version it held), by path."""
        rows = self.db.execute("SELECT path, version FROM archives WHERE name = ? ORDER BY path", (name,))
        return [path for path, held in rows if version is None or held == version]

    def signing_keys(self) -> str:
        return self.ledger.signing_keys()

    def resolve_writes(self, done: list[int], aborted: list[int]) -> None:
        """Journalled writes a crash left pending, resolved by the build from content/ (in its
        ledger transaction: they are done, or aborted, with the build)."""
        self.ledger.resolve_writes(done, aborted)

    def record_signing_keys(self, public_keys: str) -> None:
        self.ledger.record_signing_keys(public_keys)

    def set_issues(self, name: str, issues: list[tuple[str, str]]) -> None:
        self.db.execute("DELETE FROM issues WHERE name = ?", (name,))
        self.db.executemany("INSERT INTO issues (name, path, reason) VALUES (?, ?, ?)", ((name, p, r) for p, r in issues))

    def all_issues(self) -> list[tuple[str, str, str]]:
        """(package, path, reason) of every archive a package's build refused."""
        return list(self.db.execute(ALL_ISSUES))


MOVES_WAITING_AT_MOST = 65_536  # prefixes or leaves whose moves wait in memory (a few MB)


class SqliteSession(BuildState):
    """The SQLite build session: what a build moves again and again in a few rows waits in memory,
    summed, until something reads those rows or the session commits. A full build moves ~16
    prefix counts per package (babel-plugin-… counts up once per package below it) and sets a
    search leaf's count once per package joining it: 17,933 and 10,819 statements over the real
    corpus, for 10,708 prefixes and ~1,700 leaves; and the two counters, twice per package.
    (On PostgreSQL a move is one statement per table already: postgres_listings.)

    A full build also holds the search leaves (sqlite_leaves.HeldLeaves), loaded in one query, to
    answer each package's leaf neighbourhood in its shards without asking the table (an
    incremental build, which looks at a few shards, asks it as before)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._prefix_deltas: dict[str, tuple[str, int]] = {}  # prefix -> (its parent, the count it moves by)
        self._leaf_counts: dict[tuple[str, str], int] = {}  # (shard, bound) -> the leaf's count
        self._counter_deltas: dict[str, int] = {}
        self._held_leaves: HeldLeaves | None = None  # in a full build only

    def commit(self) -> None:
        self._write_waiting()  # before the ledger commits: a failure here leaves both as they were
        super().commit()
        self._held_leaves = None

    def rollback(self) -> None:
        self._prefix_deltas, self._leaf_counts, self._counter_deltas = {}, {}, {}
        self._held_leaves = None
        super().rollback()

    def start_full_build(self) -> None:
        super().start_full_build()
        rows = self.db.execute(f"SELECT key, bound, count FROM search_leaves ORDER BY key, bound LIMIT {MOVES_WAITING_AT_MOST + 1}")
        held = ((key, bound, self._leaf_count(key, bound, count)) for key, bound, count in rows)
        self._held_leaves = HeldLeaves(held, self._shard_rows, at_most=MOVES_WAITING_AT_MOST)

    def _shard_rows(self, key: str) -> list[tuple[str, int]]:
        rows = self.db.execute("SELECT bound, count FROM search_leaves WHERE key = ? ORDER BY bound", (key,))
        return [(bound, self._leaf_count(key, bound, count)) for bound, count in rows]

    def _hood(self, key: str, name: str, *, leaving: bool) -> LeafHood:
        if self._held_leaves is None:
            return super()._hood(key, name, leaving=leaving)
        return self._held_leaves.hood(key, name, leaving=leaving)

    def totals(self) -> tuple[int, int]:
        self._write_counters()
        return super().totals()

    def _write_waiting(self) -> None:
        self._prefixes_read()
        self._write_leaf_counts()
        self._write_counters()

    # -- prefixes: summed per prefix, written before any read of them

    def _move_prefix_counts(self, rows: Sequence[tuple[str, str, int]]) -> None:
        deltas = self._prefix_deltas
        for prefix, parent, delta in rows:
            held = deltas.get(prefix)
            deltas[prefix] = (parent, held[1] + delta if held else delta)
        if len(deltas) >= MOVES_WAITING_AT_MOST:
            self._prefixes_read()

    def _prefixes_read(self) -> None:
        deltas, self._prefix_deltas = self._prefix_deltas, {}
        super()._move_prefix_counts([(prefix, parent, delta) for prefix, (parent, delta) in deltas.items() if delta])

    # -- leaf counts: the last one set per leaf; a leaf's row is inserted and deleted at once,
    # and `_leaf` reads a count through them (no other read looks at a leaf's count)

    def _set_leaf_count(self, key: str, bound: str, count: int) -> None:
        self._leaf_counts[(key, bound)] = count
        if self._held_leaves is not None:
            self._held_leaves.counted(key, bound, count)
        if len(self._leaf_counts) >= MOVES_WAITING_AT_MOST:
            self._write_leaf_counts()

    def _insert_leaf(self, key: str, bound: str, count: int) -> None:
        super()._insert_leaf(key, bound, count)
        if self._held_leaves is not None:
            self._held_leaves.inserted(key, bound, count)

    def _delete_leaf(self, key: str, bound: str) -> None:
        self._leaf_counts.pop((key, bound), None)
        super()._delete_leaf(key, bound)
        if self._held_leaves is not None:
            self._held_leaves.deleted(key, bound)

    def _leaf_count(self, key: str, bound: str, stored: int) -> int:
        return self._leaf_counts.get((key, bound), stored)

    def _write_leaf_counts(self) -> None:
        counts, self._leaf_counts = self._leaf_counts, {}
        self.db.executemany(
            "UPDATE search_leaves SET count = ? WHERE key = ? AND bound = ?", [(count, key, bound) for (key, bound), count in counts.items()]
        )

    # -- the package and version counters

    def _add_counters(self, deltas: dict[str, int]) -> None:
        for key, delta in deltas.items():
            self._counter_deltas[key] = self._counter_deltas.get(key, 0) + delta

    def _write_counters(self) -> None:
        deltas, self._counter_deltas = self._counter_deltas, {}
        for key, delta in deltas.items():
            super()._add_counter(key, delta)
