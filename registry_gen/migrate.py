"""`registry-gen migrate`: a registry moved between the embedded default (SQLite files and folders on
one machine) and the shared stores (PostgreSQL, and a bucket for content), and back, losing nothing.

What moves, each part copied whole, then counted at both ends:
- the ledger (registry_gen.state.transfer): pins, first-seen times, the keyring, writes and journal
  with their numbers;
- content (archives, `registry-meta.json` files, advisories: every object of the content store),
  when the two ends name different stores (a folder and a bucket, or two folders);
- what each installed plugin of the entry-point group `registry_gen.migrators` keeps (the bundled
  user_api: accounts with their password hashes, tokens, groups, hooks with their sealed secrets
  and deliveries), so this package never imports the user API.

Every target part must be empty (checked for all of them before anything is written); the source is
only read, under its build lock (writes to it wait until the copy is done). The cache and the tree
are not copied: the first build on the target remakes them from content and the ledger.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from registry_gen.errors import MigrationRefused
from registry_gen.hooks.secrets import KEY_ENV, KEY_FILE, configured_key
from registry_gen.settings import DATABASE_URL_ENV, STORAGE_ENV, Settings
from registry_gen.storage import ContentStorage, StoredObject, open_content_storage

MIGRATORS_GROUP = "registry_gen.migrators"
LOCK_TIMEOUT_SECONDS = 60.0  # a build or write on the source finishing before the copy starts


class StoreMigrator(Protocol):
    """What a plugin's store offers `registry-gen migrate` (the user API's accounts, for one)."""

    what: str  # for the report: "accounts" ...

    def counts(self, settings: Settings) -> dict[str, int]:
        """Rows per table of the store `settings` name, read only (all 0 for a store not made yet)."""
        ...

    def copy(self, source: Settings, target: Settings) -> None:
        """Every row of the source store into the (empty) target store."""
        ...


@dataclass(frozen=True)
class Move:
    source: Settings
    target: Settings

    @property
    def moves_content(self) -> bool:
        return content_location(self.source) != content_location(self.target)


@dataclass(frozen=True)
class Tally:
    """One part after the copy: its counts, the same at both ends."""

    part: str
    counts: dict[str, int]


def content_location(settings: Settings) -> str:
    return settings.storage or str(Path(settings.content_dir).resolve())


def to_postgres(settings: Settings, database_url: str, storage: str | None, endpoint: str | None) -> Move:
    """The move of an embedded registry onto `database_url` (and its content into `storage`)."""
    if settings.database_url:
        raise MigrationRefused(f"this registry is on PostgreSQL already (database_url or ${DATABASE_URL_ENV}); "
                               f"use --to embedded to move it back")  # fmt: skip
    if not database_url.startswith(("postgresql://", "postgres://")):
        raise MigrationRefused("--database-url must start with postgresql://")
    target = dataclasses.replace(settings, database_url=database_url, storage=storage or settings.storage,
                                 storage_endpoint_url=endpoint or settings.storage_endpoint_url)  # fmt: skip
    return Move(settings, target)


def to_embedded(settings: Settings, content_dir: Path | None, state_dir: Path | None, data_dir: Path | None) -> Move:
    """The move of a registry on PostgreSQL back to SQLite files and folders (the configured ones,
    or those given)."""
    if not settings.database_url:
        raise MigrationRefused(f"this registry is embedded already (no database_url or ${DATABASE_URL_ENV}); "
                               f"use --to postgres to move it")  # fmt: skip
    target = dataclasses.replace(settings, database_url=None, storage=None, storage_endpoint_url=None)
    return Move(settings, target.with_updates(content_dir=content_dir, state_dir=state_dir, data_dir=data_dir))


def occupied_parts(move: Move, migrators: Sequence[StoreMigrator]) -> list[str]:
    """What the target holds already, one phrase per part (none: the move may start)."""
    from registry_gen.state.transfer import ledger_counts

    found = []
    if sum(ledger_counts(move.target).values()):
        found.append(f"a ledger ({_where_state(move.target)})")
    if move.moves_content and next(iter(open_content_storage(move.target, building=False).list()), None) is not None:
        found.append(f"content ({content_location(move.target)})")
    for migrator in migrators:
        if sum(migrator.counts(move.target).values()):
            found.append(f"{migrator.what} ({_where_data(move.target)})")
    return found


def _where_state(settings: Settings) -> str:
    return "the database" if settings.database_url else str(Path(settings.state_folder) / "ledger.sqlite3")


def _where_data(settings: Settings) -> str:
    return "the database" if settings.database_url else str(Path(settings.data_dir) / "users.sqlite3")


def content_objects(store: ContentStorage, settings: Settings) -> Iterator[StoredObject]:
    """The content's objects: in a bucket, without the built tree when it lives under the content's
    prefix (`<storage>/_tree` by default), which is no content (the target builds its own tree)."""
    from registry_gen.objectstore import nested_tree_folder

    tree = nested_tree_folder(settings) if settings.storage is not None else None
    return (item for item in store.list() if tree is None or not item.key.startswith(tree))


def copy_content(source: ContentStorage, target: ContentStorage, settings: Settings) -> dict[str, int]:
    """Every content object of `source` (configured by `settings`) created in `target` (never
    overwriting); objects and bytes."""
    objects = size = 0
    for stored in content_objects(source, settings):
        data = source.read(stored.key)
        if data is None:
            raise MigrationRefused(f"{stored.key}: removed from the source while it was copied (stop the writers first)")
        target.create(stored.key, data)
        objects, size = objects + 1, size + len(data)
    return {"objects": objects, "bytes": size}


def content_counts(store: ContentStorage, settings: Settings) -> dict[str, int]:
    listed = list(content_objects(store, settings))
    return {"objects": len(listed), "bytes": sum(item.size for item in listed)}


@contextmanager
def source_held(source: Settings) -> Iterator[None]:
    """The source's build lock (and, on PostgreSQL, its registry lock) for the copy: a build or a
    write on it waits until the move is done, so the copy is one moment of it."""
    from registry_gen.buildlock import holding_build_lock
    from registry_gen.state import open_state

    with holding_build_lock(source.lock_file, LOCK_TIMEOUT_SECONDS), open_state(source).registry_lock(LOCK_TIMEOUT_SECONDS):
        yield


def run_move(move: Move, migrators: Sequence[StoreMigrator]) -> list[Tally]:
    """Copies every part of the source into the empty target and checks the counts at both ends."""
    from registry_gen.state.transfer import copy_ledger_into_postgres, copy_ledger_into_sqlite, ledger_counts

    with source_held(move.source):
        ledger_counts(move.source)  # a source ledger of another release is refused before anything is written
        occupied = occupied_parts(move, migrators)
        if occupied:
            raise MigrationRefused(f"the target is not empty: it holds {', '.join(occupied)}; nothing was copied "
                                   f"(move to an empty database, bucket or folder)")  # fmt: skip
        tallies = []
        if move.moves_content:
            source_store = open_content_storage(move.source, building=False)
            target_store = open_content_storage(move.target, building=False)
            copy_content(source_store, target_store, move.source)
            tallies.append(_checked("content", content_counts(source_store, move.source), content_counts(target_store, move.target)))
        if move.target.database_url:
            copy_ledger_into_postgres(Path(move.source.state_folder), move.target.database_url)
        else:
            assert move.source.database_url
            copy_ledger_into_sqlite(move.source.database_url, Path(move.target.state_folder))
        tallies.append(_checked("ledger", ledger_counts(move.source), ledger_counts(move.target)))
        for migrator in migrators:
            migrator.copy(move.source, move.target)
            tallies.append(_checked(migrator.what, migrator.counts(move.source), migrator.counts(move.target)))
    return tallies


def _checked(part: str, source: dict[str, int], target: dict[str, int]) -> Tally:
    if source != target:
        differ = ", ".join(f"{key} {source.get(key)} -> {target.get(key)}" for key in sorted(source.keys() | target.keys())
                           if source.get(key) != target.get(key))  # fmt: skip
        raise MigrationRefused(f"{part}: the copy does not match its source ({differ}); the source is unchanged")
    return Tally(part, source)


def tally_line(tally: Tally) -> str:
    return f"{tally.part}: " + ", ".join(f"{count} {key}" for key, count in tally.counts.items())


def settings_lines(move: Move) -> list[str]:
    """What to set in registry.yaml for the registry to run on the target (the move changes no file)."""
    target, source = move.target, move.source
    if target.database_url:
        lines = [f"database_url: {masked_url(target.database_url)}   # or ${DATABASE_URL_ENV}; the password as you gave it"]
        if target.storage and target.storage != source.storage:
            lines.append(f"storage: {target.storage}   # or ${STORAGE_ENV}; this release's build reads only content_dir "
                         f"(docs/deploying/object-store.md): keep content_dir too until it reads the bucket")  # fmt: skip
        if target.storage_endpoint_url and target.storage_endpoint_url != source.storage_endpoint_url:
            lines.append(f"storage_endpoint_url: {target.storage_endpoint_url}")
        if configured_key(source) is None and (Path(source.data_dir) / KEY_FILE).is_file():
            lines.append(f"hooks: {{secret_key: <the text of {Path(source.data_dir) / KEY_FILE}>}}   # or ${KEY_ENV}: "
                         f"every instance shares it, and the hooks' secrets were sealed with it")  # fmt: skip
        return lines
    lines = [f"remove database_url (and ${DATABASE_URL_ENV})"]
    if source.storage:
        lines.append(f"remove storage, storage_endpoint_url (and ${STORAGE_ENV})")
    for key in ("content_dir", "state_dir", "data_dir"):
        if getattr(target, key) != getattr(source, key):
            lines.append(f"{key}: {getattr(target, key)}")
    return lines


def masked_url(url: str) -> str:
    """`url` with its password (if any) as ***: the report may end up in a log."""
    return re.sub(r"^([a-z]+://[^:/@]*:)[^@/]*@", r"\1***@", url)
