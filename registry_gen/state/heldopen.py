"""One idle connection kept open to each build database this process writes, between builds.

SQLite checkpoints a WAL database when its last connection closes: it syncs the WAL, copies it
into the database file, syncs that, and deletes the WAL; the next build's first commit then
creates the WAL again and syncs its header. That is four fsyncs per database per build, ~4 ms
here, most of what a publish (one small build of the API or watch process) spends on disk. With
one more connection held open, a build's close is not the last one: its commits stay appended to
the WAL (synchronous=NORMAL: atomic and crash-safe, as before) and SQLite checkpoints as the WAL
grows (wal_autocheckpoint). The held connection runs no transaction, so it never holds a
checkpoint back.

A file deleted or replaced under a held connection is safe: SQLite does not checkpoint or delete
the WAL on close when its database file has moved (pager `databaseIsUnmoved`), and `hold` opens
a new connection for the new file.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

HELD_AT_MOST = 4  # a serving process writes one registry's two databases; test runs open many
WAL_KEPT_AT_MOST = 64 << 20  # bytes: a full build's WAL (GBs at 1M versions) is not kept on disk


class _Held:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: OrderedDict[str, tuple[tuple[int, int], sqlite3.Connection]] = OrderedDict()

    def hold(self, path: Path) -> None:
        """Keeps a connection to `path` open (a new one when the file there is another one)."""
        try:
            stat = os.stat(path)
        except OSError:
            return
        key, identity = str(path), (stat.st_dev, stat.st_ino)
        with self._lock:
            held = self._held.get(key)
            if held and held[0] == identity:
                self._held.move_to_end(key)
                return
            if held:
                self._close(self._held.pop(key)[1])
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA user_version").fetchone()  # opens the file and its WAL index; no transaction stays open
            self._held[key] = (identity, db)
            while len(self._held) > HELD_AT_MOST:
                self._close(self._held.popitem(last=False)[1][1])

    def release(self, path: Path) -> None:
        """Closes the held connection to `path` (before its files are deleted and made again)."""
        with self._lock:
            held = self._held.pop(str(path), None)
        if held:
            self._close(held[1])

    def release_all(self) -> None:
        with self._lock:
            connections = [db for _, db in self._held.values()]
            self._held.clear()
        for db in connections:
            self._close(db)

    @staticmethod
    def _close(db: sqlite3.Connection) -> None:
        try:
            db.close()  # the last one checkpoints, as every build's close did before
        except sqlite3.Error:
            pass  # a damaged file: whoever opens it next recreates it


def close(db: sqlite3.Connection, path: Path) -> None:
    """Closes a build's connection (no transaction open). The WAL it leaves is kept for the next
    build unless a big build grew it: that one is checkpointed and cut to nothing now, as the last
    close did before (the held connection would otherwise keep its disk space)."""
    try:
        if os.path.getsize(f"{path}-wal") > WAL_KEPT_AT_MOST:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except (OSError, sqlite3.Error):
        pass  # no WAL, or readers in the way: the next checkpoint takes it
    db.close()


_held = _Held()
hold = _held.hold
release = _held.release
atexit.register(_held.release_all)  # a one-shot CLI build leaves its databases checkpointed, WAL gone
