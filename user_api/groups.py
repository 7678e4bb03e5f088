"""Groups of accounts, for the read rules of registry.yaml (`packages:`, registry_gen.access).

Groups are a property of an account, set by an admin (`registry-gen groups NAME --add G`), and
kept in the user store with the accounts (`account_groups`, by account: user_api.sqlstore), so
every API process on one PostgreSQL database reads the same groups. This module holds the rule
for a group's name, and the one-time move of the file releases before kept them in
(`<data_dir>/groups.sqlite3`), which each store's schema step runs on opening.

The move is safe when several processes open the store at once: the file is read under an
exclusive lock on it, held until it is renamed (`groups.sqlite3.migrated`, never deleted), and
the rows go in inside the store's schema transaction (its lock: BEGIN IMMEDIATE on SQLite, the
advisory lock on PostgreSQL). A process that waited finds the file gone and does nothing; a crash
between the commit and the rename leaves the file, whose rows are then inserted again (they are
there already: nothing changes) on the next start.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from registry_gen.errors import ConfigError

log = logging.getLogger(__name__)

_GROUP = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
GROUP_RULE: Final = "use 1-64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
LEGACY_FILE: Final = "groups.sqlite3"  # where releases before groups were in the user store kept them
MIGRATED_SUFFIX: Final = ".migrated"


def is_group_name(name: object) -> bool:
    return isinstance(name, str) and _GROUP.match(name) is not None


def check_group_name(name: str) -> str:
    if not is_group_name(name):
        raise ConfigError(f"group {name!r}: {GROUP_RULE}")
    return name


@dataclass(frozen=True)
class LegacyGroups:
    """The rows of an old groups file: (account id, group name)."""

    path: Path
    rows: tuple[tuple[str, str], ...]

    def retire(self, unknown: Sequence[str]) -> Path:
        """Renames the file beside itself once its rows are in the store (committed), saying what
        moved; `unknown` are the account ids the store has no account for (their rows stay in the
        renamed file only). Returns the new name."""
        kept = migrated_name(self.path)
        try:
            for suffix in ("-wal", "-shm", ""):  # a WAL still beside it goes along, so the copy stays whole
                sibling = self.path.with_name(self.path.name + suffix)
                if sibling.exists():
                    os.replace(sibling, kept.with_name(kept.name + suffix))
        except OSError as exc:
            # Left in place, it would be moved in again at every start, bringing back groups removed since.
            raise ConfigError(
                f"{self.path}: its groups are in the user store now, but it could not be renamed to {kept.name}"
                f" ({exc.strerror}); rename or move it, then start again"
            ) from None
        accounts = {user_id for user_id, _ in self.rows} - set(unknown)
        moved = sum(1 for user_id, _ in self.rows if user_id in accounts)
        log.info("moved %d group memberships of %d accounts from %s into the user store; the file is kept as %s",
                 moved, len(accounts), self.path, kept)  # fmt: skip
        if unknown:
            log.warning(
                "%s: %d group memberships name no account of the user store (account ids %s): not moved, kept in %s",
                self.path, len(self.rows) - moved, ", ".join(sorted(unknown)), kept,
            )
        return kept


def migrated_name(path: Path) -> Path:
    """`groups.sqlite3.migrated`, or `.migrated.N` when an earlier move left that name (never overwritten)."""
    candidate, number = path.with_name(path.name + MIGRATED_SUFFIX), 0
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}{MIGRATED_SUFFIX}.{number}")
    return candidate


@contextmanager
def legacy_groups(data_dir: Path | None) -> Iterator[LegacyGroups | None]:
    """The old `<data_dir>/groups.sqlite3`, read under an exclusive lock held for the block (the
    caller inserts the rows, commits, then calls `retire`); None when there is no such file, also
    when another process moved it while this one waited for the lock."""
    path = None if data_dir is None else Path(data_dir) / LEGACY_FILE
    try:
        handle = None if path is None else os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        handle = None
    if path is None or handle is None:
        yield None
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)  # flock: apart from SQLite's own (fcntl) locks on the file
        yield LegacyGroups(path, read_rows(path)) if _still_there(path, handle) else None
    finally:
        os.close(handle)


def _still_there(path: Path, handle: int) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(handle).st_ino
    except FileNotFoundError:
        return False


def read_rows(path: Path) -> tuple[tuple[str, str], ...]:
    """Every row of the old file (its WAL included); closed before the rename, so SQLite folds the WAL in."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True)  # never creates a file
        try:
            rows = db.execute("SELECT user_id, name FROM account_groups ORDER BY user_id, name").fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise ConfigError(
            f"{path}: cannot read the groups kept there by an earlier release ({exc}); repair the file, or move it"
            " away to start without those groups"
        ) from None
    return tuple((str(user_id), str(name)) for user_id, name in rows)
