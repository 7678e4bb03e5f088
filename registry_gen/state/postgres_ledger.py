"""The ledger on PostgreSQL: the tables of postgres_schema, read and written by the SQLite
ledger's portable SQL (inherited), with what PostgreSQL does differently:

- transactions: a build's ledger shares the build session's connection and transaction (the
  ledger and the cache commit as one); the journal alone has a connection of its own;
- the pins: `UNIQUE (name, version)` decides. A pin's record may be refreshed only for the same
  bytes (shasum); an archive of a pinned version with other bytes is refused by the database,
  whichever process tries, whatever it read before (VersionConflict, the build fails whole);
- the journal's order: appending takes an advisory lock held to commit, so sequence numbers
  become visible in order (a reader that read up to N never misses a later-committed M < N).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence

from registry_gen.errors import VersionConflict
from registry_gen.state.ledger import EVERY_FOLDER, ContentToken, JournalEvent, PendingAndTokens, PendingWrite, WriteFiles, package_folders
from registry_gen.state.postgres_base import JOURNAL, LOCK_PACKAGE, LOCK_REGISTRY, PgDb, package_key
from registry_gen.state.records import ArchiveRecord
from registry_gen.state.sqlite_ledger import SqliteLedger

# The pins of one package made what it serves now, unchanged rows untouched; answers the versions
# refused (pinned already with another shasum). Data-modifying WITH parts all run, on one snapshot.
# What it serves comes as one JSON object (version -> [shasum, record]): psycopg escapes a text
# array element by element in Python, which a package's records would make O(versions) calls.
PIN_STATEMENT = (
    "WITH now (v, s, r) AS (SELECT key, value->>0, value->>1 FROM jsonb_each(?::jsonb)),"
    " gone AS (DELETE FROM pins p WHERE p.name = ? AND NOT EXISTS (SELECT 1 FROM now n WHERE n.v = p.version)),"
    " changed AS (SELECT * FROM now n WHERE NOT EXISTS (SELECT 1 FROM pins p WHERE p.name = ? AND p.version = n.v AND p.record = n.r)),"
    " put AS (INSERT INTO pins (name, version, shasum, record) SELECT ?, v, s, r FROM changed"
    " ON CONFLICT (name, version) DO UPDATE SET record = excluded.record WHERE pins.shasum = excluded.shasum RETURNING version)"
    " SELECT v FROM changed WHERE v NOT IN (SELECT version FROM put)"
)


# A write kept pending and its folders' generations moved, in one statement (its own transaction):
# before content/ changes, under the packages' locks (registry_gen.state.ledger, "Folder tokens").
MOVE_FOLDERS_STATEMENT = (
    "INSERT INTO content_folders (folder, generation) SELECT unnest(?::text[]), 1"
    " ON CONFLICT (folder) DO UPDATE SET generation = content_folders.generation + 1"
)
BEGIN_WRITE_STATEMENT = (
    f"WITH moved AS ({MOVE_FOLDERS_STATEMENT})"
    " INSERT INTO writes (status, started, actor, actor_id, files, events, who) VALUES ('pending', ?, ?, ?, ?, ?, ?) RETURNING id"
)

PENDING_STATEMENT = "SELECT id, files, events FROM writes WHERE status = 'pending' ORDER BY id"
TOKENS_STATEMENT = "SELECT folder, generation FROM content_folders WHERE folder = ANY(?)"
# Both, as one round trip before a build's sync (PgLedger.pending_and_tokens): a pending write's
# row has an id, a folder's row has none.
PENDING_AND_TOKENS_STATEMENT = (
    "SELECT id, files, events, NULL AS folder, NULL::bigint AS generation FROM writes WHERE status = 'pending'"
    " UNION ALL SELECT NULL, NULL, NULL, folder, generation FROM content_folders WHERE folder = ANY(?)"
)


def _tokens(folders: Collection[str], generations: Mapping[str, int]) -> dict[str, ContentToken]:
    """Each folder's token from the generations read (a folder without a row: generation 0)."""
    everywhere = int(generations.get(EVERY_FOLDER, 0))
    return {folder: (everywhere, int(generations.get(folder, 0))) for folder in folders}


class PgLedger(SqliteLedger):
    """The ledger over one PgDb. `owned`: this ledger closes the connection (the journal's own);
    else the build session owns it, and its transaction."""

    def __init__(self, db: PgDb, *, owned: bool) -> None:  # noqa: D107 - no SQLite path here
        self.db = db  # type: ignore[assignment]
        self.owned = owned

    def begin(self, *, durable: bool = True) -> None:
        if self.owned:
            self.db.begin(durable=durable)

    def commit(self) -> None:
        if self.owned:
            self.db.commit()

    def rollback(self) -> None:
        if self.owned:
            self.db.rollback()

    def usable(self) -> bool:
        return self.db.still_open()

    def close(self) -> None:
        if self.owned:
            self.db.close()

    def pin(self, name: str, releases: Mapping[str, ArchiveRecord]) -> None:
        """Pins what `name` serves now (gone versions dropped, new ones added, a record refreshed
        only for the same bytes), in one statement (a round trip under the build's listings lock:
        was a read, then the writes); refused by the database when a version is pinned already
        with another shasum. Every part of the statement sees the pins as they were before it."""
        now = {v: [r.shasum or "", json.dumps(r.to_json(), separators=(",", ":"))] for v, r in releases.items()}
        refused = sorted(v for (v,) in self.db.execute(PIN_STATEMENT, (json.dumps(now), name, name, name)).fetchall())
        if refused:
            raise VersionConflict(
                f"{name}@{', '.join(refused)} was published already with other bytes (the ledger's pin refuses it); "
                "a version number can be published only once"
            )

    def begin_write(
        self, files: WriteFiles, events: Sequence[JournalEvent], actor: str, actor_id: str | None, time: str,
        who: Mapping[str, str] | None = None,
    ) -> int:  # fmt: skip
        """Keeps a write pending, durably, before content/ changes, and moves the token of each
        content folder it names; returns its id."""
        body = json.dumps([[e.kind, e.package, list(e.versions), dict(e.detail)] for e in events], separators=(",", ":"))
        row = self.db.execute(
            BEGIN_WRITE_STATEMENT,
            (sorted(package_folders(files)), time, actor, actor_id, json.dumps(dict(files), separators=(",", ":")), body,
             json.dumps(dict(who or {}), separators=(",", ":"))),
        ).fetchone()  # fmt: skip
        return int(row[0])

    def content_tokens(self, folders: Collection[str]) -> dict[str, ContentToken]:
        """Each folder's token now (a folder never written through registry-gen: generation 0)."""
        rows = self.db.execute(TOKENS_STATEMENT, ([*folders, EVERY_FOLDER],)).fetchall()
        return _tokens(folders, dict(rows))

    def pending_and_tokens(self, held: Collection[str], folders: Collection[str]) -> PendingAndTokens:
        """`pending_writes(held)` and `content_tokens(folders)` in one statement, on one snapshot.
        Only the writer-gone checks of other writes in flight add statements, as in `pending_writes`."""
        rows = self.db.execute(PENDING_AND_TOKENS_STATEMENT, ([*folders, EVERY_FOLDER],)).fetchall()
        pending = sorted((int(write_id), files, events) for write_id, files, events, _, _ in rows if write_id is not None)
        generations = {folder: generation for write_id, _, _, folder, generation in rows if write_id is None}
        return self._gone(pending, held), _tokens(folders, generations)

    def move_all_tokens(self) -> None:
        self.db.execute(MOVE_FOLDERS_STATEMENT, ([EVERY_FOLDER],))

    def pending_writes(self, held: Collection[str] = ()) -> list[PendingWrite]:
        """The pending writes whose writer is gone. Several processes write at once here: a write
        still in progress holds its packages' locks (postgres_locks), and is not resolved under it.
        `held`: the caller's packages (its lock is on another connection, so this one could not take
        them; held by the caller, they are held by no other writer). In a build's transaction the
        locks taken stay held to its commit (a writer of those packages then waits for the build
        that resolves its predecessor)."""
        rows = self.db.execute(PENDING_STATEMENT).fetchall()
        return self._gone(rows, held)

    def _gone(self, rows: Sequence[tuple[int, str, str]], held: Collection[str]) -> list[PendingWrite]:
        """Of the pending writes' rows (id, files, events; in id order), those whose writer is gone.
        A lock taken proves a writer gone only if its write is still pending once the lock is held:
        the rows were read before, and a live writer journals its write done and then releases its
        lock in between; taken for dead, its write would be resolved from a folder that may lack
        its files (aborted), and its acknowledged package dropped from the listings."""
        gone, locked = [], []
        for write_id, files, events in rows:
            packages = sorted({event[1] for event in json.loads(events)} - set(held))
            if self._writers_gone(packages):
                gone.append((int(write_id), files))
                locked += [int(write_id)] if packages else []
        finished = self._finished(locked) if locked else set()
        return [PendingWrite(write_id, json.loads(files)) for write_id, files in gone if write_id not in finished]

    def _writers_gone(self, packages: Sequence[str]) -> bool:
        return all(
            self.db.execute("SELECT pg_try_advisory_xact_lock(?, ?)", (LOCK_PACKAGE, package_key(name))).fetchone()[0] for name in packages
        )

    def _finished(self, write_ids: Sequence[int]) -> set[int]:
        """Of these writes, those no longer pending (read after their locks were taken: a new snapshot)."""
        rows = self.db.execute("SELECT id FROM writes WHERE id = ANY(?) AND status <> 'pending'", (list(write_ids),)).fetchall()
        return {int(row[0]) for row in rows}

    def finish_write(self, write_id: int, *, done: bool) -> None:
        """As the embedded ledger's, in three round trips, not six (the write's answer waits for
        them): the transaction opens with the journal's order lock taken, and once the write's row
        is read, its journal entries, its row's update and the commit go together."""
        if not (done and self.owned) or self.db.in_transaction:
            super().finish_write(write_id, done=done)
            return
        self.db.begin(durable=False, locks=[(LOCK_REGISTRY, JOURNAL, False)])
        try:
            with self.db.writes_together():
                SqliteLedger.resolve_writes(self, [write_id], [])  # the order lock is held already
                self.db.commit()
        except BaseException:
            self.rollback()
            raise

    def resolve_writes(self, done: Sequence[int], aborted: Sequence[int]) -> None:
        if done:  # the order lock is held to this transaction's end (commit or rollback)
            self.db.lock(LOCK_REGISTRY, JOURNAL)
        super().resolve_writes(done, aborted)
