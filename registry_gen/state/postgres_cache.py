"""The build session and the manifest cache on PostgreSQL: the cache tables of postgres_schema, read
and written by the SQLite classes' portable SQL (inherited), over one connection whose one
transaction holds the ledger's rows and the cache's: `commit` commits them as one.

What differs from SQLite is overridden here: a full build's working sets (spooled paths, plans,
predicted links, what a forgotten content held) are temporary tables of the session's connection,
filled by COPY and read back through server-side cursors a batch at a time; the manifest cache
commits on its own connection as archives are read (the workers read it meanwhile).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from typing import Any

from registry_gen.state.postgres_base import LISTINGS, LOCK_REGISTRY, PgDb
from registry_gen.state.postgres_ledger import PENDING_STATEMENT, PgLedger
from registry_gen.state.postgres_listings import PgListings
from registry_gen.state.records import (
    ARCHIVE_FIELDS, ArchiveRecord, BuildReport, BuildStart, CachedManifest, ListingMove, PackageBefore, PackageInputs, PackageWrite, StalePage,
)  # fmt: skip
from registry_gen.state.sqlite_cache import (
    ALL_ISSUES, ANY_PACKAGE, ARCHIVE_ERRORS, ARCHIVES_OF, BUILD_SETTINGS, DUPLICATE_METAS, META_ERRORS, METAS_OF, PACKAGE_ROW, UNWRITTEN,
)  # fmt: skip
from registry_gen.state.sqlite_ledger import ANY_PIN, FIRST_SEEN_OF, PINS_OF
from registry_gen.state.sqlite_manifests import ManifestCache
from registry_gen.state.sqlite_schema import SHARDS_STALE, WHOLE_STALE

_FULL_BUILD_TABLES = """
DROP TABLE IF EXISTS pg_temp.full_plans;
DROP TABLE IF EXISTS pg_temp.predicted_links;
CREATE TEMP TABLE full_plans (
    name text COLLATE "C" PRIMARY KEY, action text NOT NULL, present boolean NOT NULL, was_present boolean NOT NULL
);
CREATE INDEX full_plans_by_action ON full_plans (action, name);
CREATE TEMP TABLE predicted_links (target text COLLATE "C", name text COLLATE "C", PRIMARY KEY (target, name));
CREATE INDEX predicted_links_by_name ON predicted_links (name)
"""
_FORGET_CONTENT = """
DELETE FROM folders;
DROP TABLE IF EXISTS pg_temp.forgotten_archives;
CREATE TEMP TABLE forgotten_archives AS SELECT path, name, version FROM archives WHERE name IS NOT NULL;
CREATE INDEX forgotten_archives_by_path ON forgotten_archives (path);
DELETE FROM archives;
DROP TABLE IF EXISTS pg_temp.forgotten_metas;
CREATE TEMP TABLE forgotten_metas AS SELECT path, name FROM metas WHERE name IS NOT NULL;
CREATE INDEX forgotten_metas_by_path ON forgotten_metas (path);
DELETE FROM metas;
DELETE FROM meta_duplicates;
DELETE FROM issues
"""


_MARK_STALE = (
    "INSERT INTO stale_listings (kind, key, bound) SELECT * FROM unnest(?::text[], ?::text[], ?::text[])"
    " ON CONFLICT (kind, key, bound) DO UPDATE SET mark = excluded.mark"
)


def settle_whole_documents(db: PgDb, mark: str) -> None:
    """Clears the mark of -/all and -/search.json if it is still `mark` (a write since set another)."""
    db.execute("UPDATE settings SET value = '' WHERE key = ? AND value = ?", (WHOLE_STALE, mark))


def settle_stale_listings(db: PgDb, pages: Iterable[StalePage]) -> None:
    """Drops the rows of `pages` still at the marking they were read with (one statement)."""
    wanted = [(page.kind, page.key, page.bound, page.mark) for page in pages]
    if wanted:
        db.execute(
            "DELETE FROM stale_listings s USING unnest(?::text[], ?::text[], ?::text[], ?::bigint[]) AS v (kind, key, bound, mark)"
            " WHERE s.kind = v.kind AND s.key = v.key AND s.bound = v.bound AND s.mark = v.mark",
            [list(column) for column in zip(*wanted)],
        )


class PgSession(PgListings):
    """One build's session (or, outside a transaction, the write side's read-only view)."""

    def __init__(self, db: PgDb) -> None:  # noqa: D107 - no files: one connection to the database
        self.db = db  # type: ignore[assignment]
        self.ledger = PgLedger(db, owned=False)
        self.forgotten = False  # forget_content made this build's tables of what content/ held
        self.listings_locked = False
        self.versions_before = {}
        self.grown = {}
        self.growth_answers = []

    # -- one transaction: the ledger's rows and the cache's commit together

    def begin(self, *, durable: bool = True) -> None:
        self.db.begin(durable=durable)

    def commit(self) -> None:
        self.db.commit()

    def rollback(self) -> None:
        self.db.rollback()

    def close(self) -> None:
        self.db.close()

    # -- a build's runs of reads, each sent together: one round trip instead of one a statement
    # (bench/PROFILE.md, sharewall); the inherited methods ask them as on SQLite

    def build_start(self, fingerprint: str, held: Collection[str]) -> BuildStart:
        reads = [(BUILD_SETTINGS, (SHARDS_STALE, WHOLE_STALE)), (ANY_PACKAGE, ()), (UNWRITTEN, ()), (ANY_PIN, ()), (PENDING_STATEMENT, ())]
        with self.db.prefetched(reads):
            return super().build_start(fingerprint, held)

    def package_inputs(self, name: str) -> PackageInputs:
        with self.db.prefetched([(sql, (name,)) for sql in (ARCHIVES_OF, PINS_OF, PACKAGE_ROW, METAS_OF, FIRST_SEEN_OF)]):
            return super().package_inputs(name)

    def meta_problems(self) -> tuple[list[tuple[str, str | None, str]], list[tuple[str, str]]]:
        with self.db.prefetched([(META_ERRORS, ()), (DUPLICATE_METAS, ())]):
            return super().meta_problems()

    def build_report(self) -> BuildReport:
        with self.db.prefetched([(META_ERRORS, ()), (DUPLICATE_METAS, ()), (ARCHIVE_ERRORS, ()), (ALL_ISSUES, ())]):
            return super().build_report()

    def commit_package(self, write: PackageWrite, move: ListingMove) -> dict[str, str]:
        """A package's rows, its listing move and its pins go without a wait each (under the listings
        lock, which every other instance's publish waits for): only the reads among them wait."""
        with self.db.writes_together():
            return super().commit_package(write, move)

    # -- the listings are shared by every package: one build at a time changes them. The lock is
    # taken at the first look at them and held to commit; what comes before (reading archives,
    # writing the package's own files) runs beside other processes' builds of other packages.

    def package_before(self, name: str, keys_after: Iterable[str]) -> PackageBefore:
        self.lock_listings()
        return super().package_before(name, keys_after)

    def remove_package(self, name: str, move: ListingMove | None) -> dict[str, str]:
        self.lock_listings()
        return super().remove_package(name, move)

    def lock_listings(self) -> None:
        if not self.listings_locked and self.db.in_transaction:
            self.db.lock(LOCK_REGISTRY, LISTINGS)
            self.listings_locked = True

    def finish_build(self, fingerprint: str, *, whole_stale: bool | None, whole_mark: str = "1") -> None:
        self.lock_listings()
        super().finish_build(fingerprint, whole_stale=whole_stale, whole_mark=whole_mark)

    def new_whole_mark(self) -> str:
        """A rewrite's marking of -/all and -/search.json, equal to no other (stale_listings'
        sequence; a write's is "1"): it settles only its own, once the bucket holds the files."""
        return "r" + str(self.db.execute("SELECT nextval('stale_listing_marks')").fetchone()[0])

    # -- listing pages left to the leader (postgres_schema's ledger step 6): under the listings lock,
    # so a write's marks and the pages rendered from the listings are of one order

    def mark_listings_stale(self, pages: Iterable[StalePage]) -> None:
        self.lock_listings()
        self.db.execute(_MARK_STALE, [list(column) for column in zip(*((p.kind, p.key, p.bound) for p in pages))])

    def stale_listings(self) -> list[StalePage]:
        self.lock_listings()
        rows = self.db.execute("SELECT kind, key, bound, mark FROM stale_listings ORDER BY kind, key, bound")
        return [StalePage(kind, key, bound, int(mark)) for kind, key, bound, mark in rows]

    def settle_stale_listings(self, pages: Iterable[StalePage]) -> None:
        settle_stale_listings(self.db, pages)

    # -- what a forgotten content held (a full build after a change of generator or settings)

    def forget_content(self) -> None:
        self.db.script(_FORGET_CONTENT)
        self.forgotten = True

    def forgotten_archive(self, path: str) -> tuple[str, str] | None:
        if not self.forgotten:
            return None
        row = self.db.execute("SELECT name, version FROM pg_temp.forgotten_archives WHERE path = ?", (path,)).fetchone()
        return (row[0], row[1]) if row else None

    def forgotten_meta_name(self, path: str) -> str | None:
        if not self.forgotten:
            return None
        row = self.db.execute("SELECT name FROM pg_temp.forgotten_metas WHERE path = ?", (path,)).fetchone()
        return row[0] if row else None

    def previous_archives(self, paths: Iterable[str]) -> dict[str, ArchiveRecord]:
        """One query for the batch (SQLite asks per path, which costs it nothing)."""
        wanted = list(paths)
        rows = self.db.execute(f"SELECT {', '.join(ARCHIVE_FIELDS)} FROM archives WHERE path = ANY(?)", (wanted,))
        found = {row[0]: ArchiveRecord(*row[:10], bool(row[10]), row[11]) for row in rows}
        for path in wanted:
            if path not in found and (held := self.forgotten_archive(path)) is not None:
                found[path] = ArchiveRecord(path, 0, 0, held[0], held[1])
        return found

    def _find_duplicate_metas(self, names: set[str | None]) -> None:
        for name in names - {None}:
            self.db.execute("DELETE FROM meta_duplicates WHERE name = ?", (name,))
            self.db.execute(
                "INSERT INTO meta_duplicates (path, name) SELECT path, name FROM metas WHERE name = ? AND error IS NULL ORDER BY path OFFSET 1",
                (name,),
            )

    # -- spooled paths and a full build's working set: temporary tables, filled by COPY

    def spool_paths(self, paths: Iterable[str], *, fresh: bool = False, spool: str = "spooled_paths") -> None:
        if spool not in self.SPOOLS:
            raise ValueError(f"not a spool: {spool}")
        if fresh:
            self.db.execute(f"DROP TABLE IF EXISTS pg_temp.{spool}")  # one of SPOOLS, checked above
        self.db.execute(f'CREATE TEMP TABLE IF NOT EXISTS {spool} (path text COLLATE "C" NOT NULL)')
        self.db.copy_rows(f"pg_temp.{spool}", "path", ((path,) for path in paths))

    def spooled_paths(self, batch: int = 1000, spool: str = "spooled_paths") -> Iterator[str]:
        if spool not in self.SPOOLS:
            raise ValueError(f"not a spool: {spool}")
        if self.db.execute("SELECT to_regclass(?)", (f"pg_temp.{spool}",)).fetchone()[0] is not None:
            yield from self.db.stream(f"SELECT path FROM pg_temp.{spool} ORDER BY path", (), batch)
            self.db.execute(f"DROP TABLE IF EXISTS pg_temp.{spool}")

    def every_package_name(self, batch: int = 1000) -> Iterator[str]:
        return self.db.stream(
            "SELECT name FROM packages UNION SELECT name FROM archives WHERE name IS NOT NULL"
            " UNION SELECT name FROM metas WHERE name IS NOT NULL ORDER BY 1",
            (),
            batch,
        )

    def start_full_build(self) -> None:
        self.db.script(_FULL_BUILD_TABLES)

    def put_plans(self, plans: Iterable[tuple[str, str, bool, bool]]) -> None:
        self.db.executemany(
            "INSERT INTO pg_temp.full_plans (name, action, present, was_present) VALUES (?, ?, ?, ?) ON CONFLICT (name)"
            " DO UPDATE SET action = excluded.action, present = excluded.present, was_present = excluded.was_present",
            ((name, action, bool(present), bool(was)) for name, action, present, was in plans),
        )

    def plan_of(self, name: str) -> tuple[str, bool, bool] | None:
        row = self.db.execute("SELECT action, present, was_present FROM pg_temp.full_plans WHERE name = ?", (name,)).fetchone()
        return (row[0], bool(row[1]), bool(row[2])) if row else None

    def planned(self, action: str | None = None, batch: int = 1000) -> Iterator[str]:
        if action is None:
            return self.db.stream("SELECT name FROM pg_temp.full_plans ORDER BY name", (), batch)
        return self.db.stream("SELECT name FROM pg_temp.full_plans WHERE action = ? ORDER BY name", (action,), batch)

    def planned_count(self, action: str | None = None) -> int:
        if action is None:
            return int(self.db.execute("SELECT COUNT(*) FROM pg_temp.full_plans").fetchone()[0])
        return int(self.db.execute("SELECT COUNT(*) FROM pg_temp.full_plans WHERE action = ?", (action,)).fetchone()[0])

    def present_after_full_build(self, batch: int = 1000) -> Iterator[str]:
        return self.db.stream("SELECT name FROM pg_temp.full_plans WHERE present ORDER BY name", (), batch)

    def put_predicted_links(self, name: str, targets: Iterable[str]) -> None:
        self.db.executemany(
            "INSERT INTO pg_temp.predicted_links (target, name) VALUES (?, ?) ON CONFLICT DO NOTHING", ((t, name) for t in targets)
        )

    def predicted_links_of(self, name: str) -> set[str]:
        return {t for (t,) in self.db.execute("SELECT target FROM pg_temp.predicted_links WHERE name = ?", (name,))}

    def linking_after_full_build(self, target: str, action: str) -> set[str]:
        rows = self.db.execute(
            "SELECT name FROM links WHERE target = ? AND NOT EXISTS"
            " (SELECT 1 FROM pg_temp.full_plans p WHERE p.name = links.name AND p.action = ?)"
            " UNION SELECT name FROM pg_temp.predicted_links WHERE target = ?",
            (target, action, target),
        )
        return {name for (name,) in rows}

    def whole_document_fragments(self, column: str, batch: int = 1000) -> Iterator[bytes]:
        if column not in ("all_fragment", "search_fragment"):
            raise ValueError(f"not a fragment column: {column}")
        return self.db.stream(f"SELECT {column} FROM packages WHERE listed ORDER BY name", (), batch)  # one of two, checked


class PgManifests(ManifestCache):
    """The manifest cache's tables, on a connection of its own: each put commits at once."""

    def __init__(self, db: PgDb, *, readonly: bool = False) -> None:  # noqa: D107 - no files
        self.db = db  # type: ignore[assignment]
        self.readonly = readonly

    def begin(self) -> None:
        self.db.begin(durable=False)  # a cache: lost to a crash, the archive is read again

    def commit(self) -> None:
        self.db.commit()

    def rollback(self) -> None:
        self.db.rollback()

    def forget_unreferenced(self, shasums: Iterable[str] | None) -> None:
        """Drops the manifests of `shasums` (None: of all) no archive and no pin refers to."""
        unused = "NOT EXISTS (SELECT 1 FROM archives a WHERE a.shasum = t.shasum) AND NOT EXISTS (SELECT 1 FROM pins p WHERE p.shasum = t.shasum)"
        doomed: Any = None if shasums is None else list(shasums)
        for table in ("manifests", "file_lists"):  # two literal names
            if doomed is None:
                self.db.execute(f"DELETE FROM {table} t WHERE {unused}")
            else:
                self.db.execute(f"DELETE FROM {table} t WHERE t.shasum = ANY(?) AND {unused}", (doomed,))

    def close(self) -> None:
        self.db.close()
