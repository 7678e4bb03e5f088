"""What `registry-gen stats` (registry_gen.stats) remembers between runs:
`<state_folder>/downloads.sqlite3`, a database of its own beside the ledger and the cache (not
part of the state contract: the counts are read from logs on the machine that keeps them).

- `logs`: each access log folded, by identity (the digest of its first line: a log keeps it when
  it is renamed by a rotation, or compressed), with how many bytes of it were read (of its text,
  decompressed) up to its last complete line. A log seen again is read from there on: a re-run
  counts nothing twice, a log that grew counts only its new lines.
- `counts`: downloads per package, version and (UTC) day, the sum of every run.

A log's counts and its new offset are committed in one transaction, so a run killed midway leaves
each log either folded or not. Like the cache, this is not the ledger: losing it loses the counts
(the logs, if kept, can be folded again into a fresh one).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from registry_gen.state.sqlite_base import connect

DOWNLOADS_DATABASE: Final = "downloads.sqlite3"
SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS logs (identity TEXT PRIMARY KEY, offset INTEGER NOT NULL, source TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS counts (name TEXT NOT NULL, version TEXT NOT NULL, day TEXT NOT NULL, "
    "downloads INTEGER NOT NULL, PRIMARY KEY (name, version, day)) WITHOUT ROWID",
)


class DownloadCounts:
    def __init__(self, state_folder: Path) -> None:
        self.db = connect(state_folder / DOWNLOADS_DATABASE, synchronous="FULL")
        for statement in SCHEMA:
            self.db.execute(statement)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> DownloadCounts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def offset(self, identity: str) -> int:
        row = self.db.execute("SELECT offset FROM logs WHERE identity = ?", (identity,)).fetchone()
        return int(row[0]) if row else 0

    def record(self, identity: str, offset: int, source: str, counts: Counter[tuple[str, str, str]]) -> None:
        """A log folded up to `offset`, and the downloads it added: one transaction."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany(
                "INSERT INTO counts (name, version, day, downloads) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name, version, day) DO UPDATE SET downloads = downloads + excluded.downloads",
                ((name, version, day, n) for (name, version, day), n in counts.items()),
            )
            self.db.execute(
                "INSERT INTO logs (identity, offset, source) VALUES (?, ?, ?) "
                "ON CONFLICT (identity) DO UPDATE SET offset = excluded.offset, source = excluded.source",
                (identity, offset, source),
            )
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def last_day(self) -> str | None:
        row = self.db.execute("SELECT MAX(day) FROM counts").fetchone()
        return row[0] if row else None

    def packages(self) -> Iterator[tuple[str, dict[str, dict[str, int]]]]:
        """Each package with downloads: version -> day -> downloads, in name order."""
        rows = self.db.execute("SELECT name, version, day, downloads FROM counts ORDER BY name")
        current: str | None = None
        days: dict[str, dict[str, int]] = {}
        for name, version, day, n in _batches(rows):
            if name != current and current is not None:
                yield current, days
                days = {}
            current = name
            days.setdefault(version, {})[day] = int(n)
        if current is not None:
            yield current, days


def _batches(rows: sqlite3.Cursor) -> Iterator[tuple[str, str, str, int]]:
    while block := rows.fetchmany(1000):
        yield from block
