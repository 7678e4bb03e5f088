"""Groups of accounts, for the read rules of registry.yaml (`packages:`, registry_gen.access).

Groups are a property of an account, set by an admin (`registry-gen groups NAME --add G`). They
are kept by account id, so a renamed account keeps its groups, in `<data_dir>/groups.sqlite3`
beside the SQLite accounts. (With accounts in PostgreSQL the groups still live in that local
file: every `registry-gen api` process that checks reads must share the data folder.)
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

from registry_gen.errors import ConfigError
from registry_gen.settings import Settings

_GROUP = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_SCHEMA = "CREATE TABLE IF NOT EXISTS account_groups (user_id TEXT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (user_id, name))"


def check_group_name(name: str) -> str:
    if not _GROUP.match(name):
        raise ConfigError(f"group {name!r}: use 1-64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


class GroupStore:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)
        self._lock = threading.Lock()

    @classmethod
    def for_settings(cls, settings: Settings) -> GroupStore:
        return cls(Path(settings.data_dir) / "groups.sqlite3")

    def groups_of(self, user_id: str) -> frozenset[str]:
        with self._lock:
            rows = self._db.execute("SELECT name FROM account_groups WHERE user_id = ?", (user_id,)).fetchall()
        return frozenset(row[0] for row in rows)

    def change(self, user_id: str, add: Iterable[str] = (), remove: Iterable[str] = ()) -> frozenset[str]:
        """Adds and removes groups in one transaction; returns the account's groups afterwards."""
        added, removed = [check_group_name(g) for g in add], [check_group_name(g) for g in remove]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR IGNORE INTO account_groups VALUES (?, ?)", [(user_id, g) for g in added])
                self._db.executemany("DELETE FROM account_groups WHERE user_id = ? AND name = ?", [(user_id, g) for g in removed])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return self.groups_of(user_id)

    def close(self) -> None:
        self._db.close()
