"""The ledger on SQLite: `<state_folder>/ledger.sqlite3`, what no build can redo from content/.

- the pins: the archive record each served version was published from (name, version, sha1),
  so a later archive with other bytes for it is refused, even after the cache is dropped;
- the first-seen times: the `time` clients see for a version dropped into content/ by hand;
- the keyring: every public key the tree was ever signed with;
- the change journal: every accepted write, numbered (registry_gen.state.ledger).

It is never dropped: its schema moves by numbered steps (registry_gen.state.migrations). Commits
are synchronous=FULL (each one on disk before it returns): a commit is rare (a build that changed
pins or times, a keyring rotation), and what it holds cannot be rebuilt. A build commits the ledger
first and the cache second: a crash between the two leaves the ledger ahead, and the next build,
trusting the ledger, converges.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path

from registry_gen.errors import LedgerUnreadable
from registry_gen.state import heldopen
from registry_gen.state.ledger import ContentToken, JournalEntry, JournalEvent, OwedPurge, PendingAndTokens, PendingWrite, WriteFiles
from registry_gen.state.migrations import LATEST, migrate
from registry_gen.state.records import ArchiveRecord
from registry_gen.state.sqlite_base import connect, connect_readonly, user_version

# Reads a build asks (PostgreSQL sends several together: postgres_cache.PgSession, PgDb.prefetched).
PINS_OF = "SELECT version, record FROM pins WHERE name = ?"
ANY_PIN = "SELECT 1 FROM pins LIMIT 1"
FIRST_SEEN_OF = "SELECT version, stamp FROM first_seen WHERE name = ?"

LEDGER_DATABASE = "ledger.sqlite3"


class SqliteLedger:
    """One connection to the ledger; writes happen inside `begin()` ... `commit()`."""

    _keys_read: str | None = None  # the keyring as signing_keys last read it, for record_signing_keys

    def __init__(self, path: Path, db: sqlite3.Connection | None = None) -> None:
        self.path = path
        self.db = db or _open(path)

    @classmethod
    def reading(cls, path: Path) -> SqliteLedger:
        """A read-only view (the write side's look before a write): a missing ledger, or one of an
        older schema, opens the ordinary way, which creates or migrates it."""
        if path.exists():
            try:
                db = connect_readonly(path)
                if user_version(db) == LATEST:
                    return cls(path, db)
                db.close()
            except sqlite3.DatabaseError:
                pass
        return cls(path)

    # -- transaction

    def begin(self, *, durable: bool = True) -> None:
        """`durable=False`: this transaction's commit does not wait for the disk (the next durable
        commit syncs it). SQLite takes the setting outside a transaction only: set here."""
        if not durable:
            self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        if self.db.in_transaction:
            self.db.execute("COMMIT")
        self.db.execute("PRAGMA synchronous=FULL")

    def rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        self.db.execute("PRAGMA synchronous=FULL")

    def usable(self) -> bool:
        return True  # a file: nothing between this process and it can restart

    def close(self) -> None:
        self.rollback()
        heldopen.close(self.db, self.path)

    def __enter__(self) -> SqliteLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pins

    def pins(self, name: str) -> dict[str, ArchiveRecord]:
        """version -> the archive record each served version of `name` was published from."""
        rows = self.db.execute(PINS_OF, (name,))
        return {version: ArchiveRecord(**json.loads(record)) for version, record in rows}

    def has_pins(self) -> bool:
        return self.db.execute(ANY_PIN).fetchone() is not None

    def pin(self, name: str, releases: Mapping[str, ArchiveRecord]) -> None:
        """Pins what `name` serves now: new versions added, gone ones dropped. An unchanged package
        writes nothing, so a build that changed no pin does not sync the ledger."""
        before = dict(self.db.execute("SELECT version, record FROM pins WHERE name = ?", (name,)))  # compared as stored, not decoded
        now = {version: json.dumps(record.to_json(), separators=(",", ":")) for version, record in releases.items()}
        self.db.executemany("DELETE FROM pins WHERE name = ? AND version = ?", [(name, v) for v in before.keys() - now.keys()])
        self.db.executemany(
            "INSERT OR REPLACE INTO pins (name, version, shasum, record) VALUES (?, ?, ?, ?)",
            ((name, v, releases[v].shasum or "", body) for v, body in now.items() if before.get(v) != body),
        )

    def pinned_versions(self, name: str) -> frozenset[str]:
        return frozenset(v for (v,) in self.db.execute("SELECT version FROM pins WHERE name = ?", (name,)))

    def unpin(self, name: str) -> None:
        self.db.execute("DELETE FROM pins WHERE name = ?", (name,))

    # -- first-seen times

    def first_seen(self, name: str) -> dict[str, str]:
        return dict(self.db.execute(FIRST_SEEN_OF, (name,)))

    def record_first_seen(self, name: str, stamps: Mapping[str, str]) -> None:
        self.db.executemany(
            "INSERT INTO first_seen (name, version, stamp) VALUES (?, ?, ?) ON CONFLICT (name, version) DO UPDATE SET stamp = excluded.stamp", ((name, v, t) for v, t in stamps.items())
        )

    def forget_first_seen(self, name: str) -> None:
        """A package that left the registry: a later one of the same name starts afresh."""
        self.db.execute("DELETE FROM first_seen WHERE name = ?", (name,))

    # -- import origins (registry_gen.importers.origins): each call its own transaction

    def import_origin(self, name: str) -> tuple[str, str] | None:
        """(origin, files as JSON) of an imported package, or None."""
        row = self.db.execute("SELECT origin, files FROM import_origins WHERE name = ?", (name,)).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def record_import_origin(self, name: str, origin: str, files: str) -> None:
        self.db.execute(
            "INSERT INTO import_origins (name, origin, files) VALUES (?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET origin = excluded.origin, files = excluded.files", (name, origin, files)
        )  # fmt: skip

    def forget_import_origin(self, name: str) -> None:
        self.db.execute("DELETE FROM import_origins WHERE name = ?", (name,))

    def adopt_import_origins(self, rows: Sequence[tuple[str, str, str]]) -> None:
        """Records of the old folder, in one transaction; a package the table knows keeps its row."""
        self.begin()
        try:
            self.db.executemany("INSERT INTO import_origins (name, origin, files) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING", rows)
        except BaseException:
            self.rollback()
            raise
        self.commit()

    # -- the keyring

    def signing_keys(self) -> str:
        row = self.db.execute("SELECT public_keys FROM keyring WHERE id = 1").fetchone()
        self._keys_read = row[0] if row else ""
        return self._keys_read

    def record_signing_keys(self, public_keys: str) -> None:
        # Compared with what the caller read just before (registry_gen.keyring reads, then records):
        # no second read, a round trip on PostgreSQL inside the build's listings lock.
        held = self._keys_read if self._keys_read is not None else self.signing_keys()
        self._keys_read = None
        if held != public_keys:  # an equal rewrite would make the build's commit sync
            self.db.execute("INSERT INTO keyring (id, public_keys) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET public_keys = excluded.public_keys", (public_keys,))

    # -- the change journal (registry_gen.state.ledger)

    def begin_write(
        self, files: WriteFiles, events: Sequence[JournalEvent], actor: str, actor_id: str | None, time: str,
        who: Mapping[str, str] | None = None,
    ) -> int:  # fmt: skip
        """Keeps a write pending, durably, before content/ changes; returns its id."""
        body = json.dumps([[e.kind, e.package, list(e.versions), dict(e.detail)] for e in events], separators=(",", ":"))
        row = self.db.execute(  # one statement: committed on its own (FULL) when no transaction is open
            "INSERT INTO writes (status, started, actor, actor_id, files, events, who) VALUES ('pending', ?, ?, ?, ?, ?, ?) RETURNING id",
            (time, actor, actor_id, json.dumps(dict(files), separators=(",", ":")), body, json.dumps(dict(who or {}), separators=(",", ":"))),
        ).fetchone()
        return int(row[0])

    def finish_write(self, write_id: int, *, done: bool) -> None:
        """Done: the write's events join the journal, numbered after every write done before it.
        Aborted: nothing of it is ever read. A write already finished is left as it is.

        Committed without waiting for the disk (synchronous=NORMAL; the next FULL commit syncs it):
        lost to a power cut, the write is pending again, and resolved from content/ as the
        recovery resolves any (the pending row itself was synced before content/ changed)."""
        with self._atomically(durable=False):
            self.resolve_writes([write_id] if done else [], [] if done else [write_id])

    @contextlib.contextmanager
    def _atomically(self, *, durable: bool = True) -> Iterator[None]:
        """A transaction of its own, unless the caller's (a build's) is open already."""
        if self.db.in_transaction:
            yield
            return
        self.begin(durable=durable)
        try:
            yield
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def resolve_writes(self, done: Sequence[int], aborted: Sequence[int]) -> None:
        for write_id in done:
            row = self.db.execute("SELECT started, actor, actor_id, events, who FROM writes WHERE id = ? AND status = 'pending'", (write_id,)).fetchone()
            if row is None:
                continue
            started, actor, actor_id, events, who = row
            self.db.executemany(
                "INSERT INTO journal (write_id, time, actor, actor_id, kind, package, versions, detail, who) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((write_id, started, actor, actor_id, kind, package, json.dumps(versions), json.dumps(detail, separators=(",", ":")), who)
                 for kind, package, versions, detail in json.loads(events)),
            )  # fmt: skip
        outcomes = [("done", i) for i in done] + [("aborted", i) for i in aborted]
        self.db.executemany("UPDATE writes SET status = ?, files = '{}', events = '[]' WHERE id = ? AND status = 'pending'", outcomes)

    def content_tokens(self, folders: Collection[str]) -> dict[str, ContentToken]:
        """None kept on the embedded default (content is a local folder: nothing to sync)."""
        return {}

    def move_all_tokens(self) -> None:
        return None

    def pending_writes(self, held: Collection[str] = ()) -> list[PendingWrite]:
        """Every pending write: with the one file lock held (registry_gen.state.locks), no other writer is live."""
        rows = self.db.execute("SELECT id, files FROM writes WHERE status = 'pending' ORDER BY id")
        return [PendingWrite(int(write_id), json.loads(files)) for write_id, files in rows]

    def pending_and_tokens(self, held: Collection[str], folders: Collection[str]) -> PendingAndTokens:
        """The pending writes, and no token (none kept here)."""
        return self.pending_writes(held), self.content_tokens(folders)

    def since(self, seq: int, limit: int = 100) -> list[JournalEntry]:
        """The journal's entries after `seq`, in order, at most `limit` of them."""
        rows = self.db.execute(
            "SELECT seq, time, actor, actor_id, kind, package, versions, detail, who FROM journal WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, limit),
        )
        return [JournalEntry(s, t, a, i, k, p, tuple(json.loads(v)), json.loads(d), json.loads(w)) for s, t, a, i, k, p, v, d, w in rows]


    def prune(self, before: str) -> int:
        """The audit log's retention (registry_gen.audit): the entries made before `before` (an
        ISO 8601 UTC time), and the finished writes they came from, go. A pending write stays
        (the recovery still needs it). The only statement that removes journal rows."""
        with self._atomically():
            removed = self.db.execute("DELETE FROM journal WHERE time < ?", (before,)).rowcount
            self.db.execute(
                "DELETE FROM writes WHERE status <> 'pending' AND started < ? AND id NOT IN (SELECT write_id FROM journal)", (before,)
            )
        return int(removed)


    # -- purges owed to the caches in front (registry_gen.purge)

    def owe_purge(self, paths: Sequence[str], keys: Sequence[str], due: float, purge_id: int | None = None) -> int:
        """Records a purge owed (durably, before the write it belongs to stores anything), or adds
        `paths` and `keys` to the one `purge_id` names (a new row if it was settled meanwhile)."""
        with self._atomically():
            row = None
            if purge_id is not None:
                row = self.db.execute("SELECT paths, keys FROM owed_purges WHERE id = ?", (purge_id,)).fetchone()
            if row is None:
                return int(self.db.execute(
                    "INSERT INTO owed_purges (paths, keys, since, due) VALUES (?, ?, ?, ?) RETURNING id",
                    (json.dumps(list(dict.fromkeys(paths))), json.dumps(list(dict.fromkeys(keys))), time.time(), due),
                ).fetchone()[0])  # fmt: skip
            merged = (json.dumps(list(dict.fromkeys([*json.loads(row[0]), *paths]))), json.dumps(list(dict.fromkeys([*json.loads(row[1]), *keys]))))
            self.db.execute("UPDATE owed_purges SET paths = ?, keys = ?, due = ? WHERE id = ?", (*merged, due, purge_id))
            return purge_id

    def owed_purges(self, now: float, limit: int = 100) -> list[OwedPurge]:
        """The owed purges due at `now`, oldest first."""
        rows = self.db.execute("SELECT id, paths, keys, since, attempts FROM owed_purges WHERE due <= ? ORDER BY id LIMIT ?", (now, limit))
        return [OwedPurge(int(i), tuple(json.loads(p)), tuple(json.loads(k)), float(since), int(n)) for i, p, k, since, n in rows]

    def settle_purges(self, done: Sequence[int], retry: Sequence[int] = (), due: float = 0.0) -> None:
        """`done`: the cache answered (or the purge is given up): the rows go. `retry`: one more
        attempt failed; the next is due at `due`."""
        with self._atomically(durable=False):
            self.db.executemany("DELETE FROM owed_purges WHERE id = ?", [(i,) for i in done])
            self.db.executemany("UPDATE owed_purges SET attempts = attempts + 1, due = ? WHERE id = ?", [(due, i) for i in retry])


def _open(path: Path) -> sqlite3.Connection:
    """Opens the ledger, creating or migrating it. Never recreated: an unreadable ledger stops the
    build (a person must restore it from the backup), where the cache would just be dropped."""
    try:
        db = connect(path, synchronous="FULL")
    except sqlite3.DatabaseError as exc:
        raise _unreadable(path, exc) from exc
    try:
        migrate(db, path.parent)
    except sqlite3.DatabaseError as exc:
        db.close()
        raise _unreadable(path, exc) from exc
    except BaseException:
        db.close()
        raise
    heldopen.hold(path)  # so that closing `db` after the build is not the last close (see heldopen)
    return db


def _unreadable(path: Path, exc: Exception) -> LedgerUnreadable:
    return LedgerUnreadable(
        f"{path} cannot be read ({exc}); it holds what no build can redo (pinned versions, first-seen times, "
        "the signing keyring): restore it from your backup (docs/operating/backups.md); nothing was changed"
    )
