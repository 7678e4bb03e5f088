"""The state contract on PostgreSQL (issue 28): the same builds give the same tree, byte for byte,
on the embedded default and on a real PostgreSQL; the database itself refuses a pinned version's
other bytes; an embedded ledger is moved in losing nothing; the cache tables may be dropped, the
ledger's never are."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import psycopg
import pytest

from registry_gen.build import run_build
from registry_gen.errors import LockTimeout, StateUnavailable, VersionConflict
from registry_gen.publish import Actor
from registry_gen.settings import Settings
from registry_gen.state import JournalEvent, open_state
from registry_gen.state.postgres_base import CONNECT_TIMEOUT_SECONDS
from registry_gen.state.postgres import PREPARED
from registry_gen.state.records import ArchiveRecord
from registry_gen.writes import WriteService
from tests.conftest import postgres_state_url
from tests.registry_api.helpers import tarball
from tests.support import make_tarball
from tests.user_api.pg_server import PostgresServer

ALICE = Actor("alice", account_id="acct-alice")


def _tree(settings: Settings) -> dict[str, bytes]:
    return {str(p.relative_to(settings.out_dir)): p.read_bytes() for p in sorted(settings.out_dir.rglob("*")) if p.is_file()}


def _dropped_in(settings: Settings, name: str, version: str, when: int, **fields: object) -> Path:
    """An archive dropped into content/ by hand, with a fixed mtime (its first-seen time)."""
    archive = make_tarball(settings.content_dir, name, version, **fields)
    os.utime(archive, (when, when))
    return archive


# The listing rows a build keeps (PostgreSQL applies a package's move in its own statements,
# registry_gen.state.postgres_listings): the same on both stores after each build.
LISTING_ROWS = (
    "SELECT prefix, parent, count FROM prefixes ORDER BY prefix",
    "SELECT key, bound, count FROM search_leaves ORDER BY key, bound",
    "SELECT key, name FROM search_keys ORDER BY key, name",
    "SELECT key, value FROM counters ORDER BY key",
)


def _listing_rows(settings: Settings) -> list[list[tuple[object, ...]]]:
    session = open_state(settings).session()
    try:
        return [[tuple(row) for row in session.db.execute(sql)] for sql in LISTING_ROWS]
    finally:
        session.close()


def _scenario(settings: Settings) -> list[tuple[dict[str, bytes], list[list[tuple[object, ...]]]]]:
    """Full build, incremental adds into a cut shard, a removal, a full rebuild: the tree and the
    listing rows after each."""
    trees = []
    for i in range(11):
        _dropped_in(settings, f"crowd-{i:02d}", "1.0.0", 1_600_000_000 + i, keywords=["shared-word"])
    _dropped_in(settings, "@scope/gamma", "1.0.0", 1_600_000_100, dependencies={"crowd-01": "^1.0.0"})
    assert not run_build(settings).errors
    trees.append((_tree(settings), _listing_rows(settings)))
    added = [_dropped_in(settings, n, "1.0.0", 1_700_000_000, keywords=["shared-word"]) for n in ("crowd-00a", "crowd-00b", "crowd-00c")]
    for archive in added:
        assert not run_build(settings, changed=[archive]).errors
        trees.append((_tree(settings), _listing_rows(settings)))
    for archive in sorted(settings.content_dir.glob("crowd-0[2-9]*.tgz")):
        archive.unlink()
    assert not run_build(dataclasses.replace(settings, prune=True)).errors
    trees.append((_tree(settings), _listing_rows(settings)))
    assert not run_build(settings, full=True).errors
    trees.append((_tree(settings), _listing_rows(settings)))
    return trees


def test_the_same_builds_give_the_same_tree_on_sqlite_and_on_postgresql(
    tmp_path: Path, state_postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 4)  # leaves cut, split and joined
    trees = {}
    for store in ("sqlite", "postgres"):
        (tmp_path / store / "content").mkdir(parents=True)
        settings = Settings(content_dir=tmp_path / store / "content", out_dir=tmp_path / store / "public",
                            data_dir=tmp_path / store / "data", base_url="http://127.0.0.1:9/",
                            database_url=postgres_state_url(state_postgres) if store == "postgres" else None)  # fmt: skip
        trees[store] = _scenario(settings)
    assert len(trees["sqlite"][1][0]) > len(trees["sqlite"][0][0]) > 20  # the scenario wrote real trees
    assert len({str(rows[1]) for _, rows in trees["sqlite"]}) > 3  # and moved leaves: cut, split, joined
    assert [sorted(t) for t, _ in trees["postgres"]] == [sorted(t) for t, _ in trees["sqlite"]]
    assert [rows for _, rows in trees["postgres"]] == [rows for _, rows in trees["sqlite"]]
    assert trees["postgres"] == trees["sqlite"]


def _pg(settings: Settings, sql: str) -> list[tuple[object, ...]]:
    assert settings.database_url
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        cursor = conn.execute(sql)
        return cursor.fetchall() if cursor.description else []


def _postgres_settings(settings: Settings, server: PostgresServer) -> Settings:
    return settings.with_updates(database_url=postgres_state_url(server))


def test_the_database_refuses_a_pinned_version_with_other_bytes(settings: Settings, state_postgres: PostgresServer) -> None:
    """Whatever a process read before, the pin's row decides: a second record of kept@1.0.0 with
    another shasum is refused by the database, and nothing of that transaction stays."""
    settings = _postgres_settings(settings, state_postgres)
    WriteService(settings).land_archive("kept", tarball("kept", "1.0.0"), ALICE)
    pinned = _pg(settings, "SELECT shasum, record FROM pins WHERE name = 'kept'")
    session = open_state(settings).session()
    try:
        session.begin_build("any")
        forged = ArchiveRecord("kept/kept-1.0.0.tgz", 1, 1, "kept", "1.0.0", shasum="0" * 40)
        with pytest.raises(VersionConflict, match="kept@1.0.0 was published already with other bytes"):
            session.pin("kept", {"1.0.0": forged})
    finally:
        session.close()
    assert _pg(settings, "SELECT shasum, record FROM pins WHERE name = 'kept'") == pinned


def test_one_pin_statement_adds_refreshes_and_drops_as_the_embedded_ledger_does(
    settings: Settings, state_postgres: PostgresServer
) -> None:
    """The pins are written in one statement on PostgreSQL (a round trip under the listings lock):
    a new version added, a record refreshed for the same bytes, a gone version dropped, an
    unchanged one untouched; the same rows as SQLite's read-then-write."""
    first = ArchiveRecord("p/p-1.0.0.tgz", 1, 1, "p", "1.0.0", shasum="1" * 40)
    second = ArchiveRecord("p/p-1.1.0.tgz", 1, 1, "p", "1.1.0", shasum="2" * 40)
    refreshed = ArchiveRecord("p/p-1.1.0.tgz", 7, 7, "p", "1.1.0", shasum="2" * 40, file_count=3)
    third = ArchiveRecord("p/p-1.2.0.tgz", 1, 1, "p", "1.2.0", shasum="3" * 40)
    rows = {}
    for kind, where in (("sqlite", settings), ("postgres", _postgres_settings(settings, state_postgres))):
        session = open_state(where).session()
        try:
            session.begin_build("any")
            session.pin("p", {"1.0.0": first, "1.1.0": second})
            session.pin("p", {"1.1.0": refreshed, "1.2.0": third})
            rows[kind] = session.live_of("p")
            session.pin("p", {})
            assert session.live_of("p") == {}
        finally:
            session.close()
    assert rows["postgres"] == rows["sqlite"] == {"1.1.0": refreshed, "1.2.0": third}


def test_an_embedded_ledger_moves_into_the_database_losing_nothing(settings: Settings, state_postgres: PostgresServer) -> None:
    service = WriteService(settings)
    service.land_archive("moved", tarball("moved", "1.0.0"), ALICE)
    service.land_archive("moved", tarball("moved", "1.1.0"), ALICE)
    with open_state(settings).journal() as journal:
        before = journal.since(0)
    tree = _tree(settings)
    moved = _postgres_settings(settings, state_postgres)
    assert not run_build(moved).errors  # the first open moves the ledger in; a full build refills the cache
    with open_state(moved).journal() as journal:
        assert journal.since(0) == before  # numbers, times, actors kept
        write_id = journal.begin_write({}, [], "bob", None, "t")
        journal.finish_write(write_id, done=True)
    assert _tree(moved) == tree  # the same times (the pins' and first-seen rows came over)
    WriteService(moved).land_archive("moved", tarball("moved", "1.2.0"), ALICE)
    with open_state(moved).journal() as journal:
        assert [e.seq for e in journal.since(0)] == [1, 2, 3]  # numbering goes on after the moved entries


def test_the_cache_tables_may_be_dropped_and_the_ledger_never_is(settings: Settings, state_postgres: PostgresServer) -> None:
    settings = _postgres_settings(settings, state_postgres)
    WriteService(settings).land_archive("kept", tarball("kept", "1.0.0"), ALICE)
    tree = _tree(settings)
    ledger = {t: _pg(settings, f"SELECT * FROM {t} ORDER BY 1") for t in ("pins", "first_seen", "writes", "journal")}
    _pg(settings, "UPDATE registry_cache_version SET version = 0")  # a cache schema this version does not know
    PREPARED.clear()  # as a new process of a newer version would
    assert not run_build(settings).errors
    assert _pg(settings, "SELECT version FROM registry_cache_version") == [(1,)]
    assert {t: _pg(settings, f"SELECT * FROM {t} ORDER BY 1") for t in ledger} == ledger
    assert _tree(settings) == tree


def test_an_unreachable_database_is_one_clear_error_at_once(settings: Settings) -> None:
    settings = settings.with_updates(database_url="postgresql://postgres@127.0.0.1:9/none")  # nothing listens on port 9
    with pytest.raises(StateUnavailable, match="the state database cannot be reached"):
        run_build(settings)


def test_a_package_lock_holds_only_its_package_and_a_wait_is_bounded(
    settings: Settings, state_postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds package `held`: a write of `held` gets LockTimeout (HTTP 503) after
    its bound, a write of `free` goes through meanwhile; the whole registry's lock stops both."""
    monkeypatch.setattr("registry_gen.writes.LOCK_TIMEOUT_SECONDS", 1)
    settings = _postgres_settings(settings, state_postgres)
    other = open_state(settings).write_lock(settings.lock_file)  # as another api process would hold it
    service = WriteService(settings)
    with other.package("held", 5):
        started = time.monotonic()
        with pytest.raises(LockTimeout, match="another writer holds package held"):
            service.land_archive("held", tarball("held", "1.0.0"), ALICE)
        assert 0.9 <= time.monotonic() - started < 5
        assert service.land_archive("free", tarball("free", "1.0.0"), ALICE) is not None
    with other.whole(5), pytest.raises(LockTimeout, match="another writer holds package free"):
        service.land_archive("free", tarball("free", "1.1.0"), ALICE)
    assert service.land_archive("held", tarball("held", "1.0.0"), ALICE) is not None  # released: it goes through


def test_a_build_leaves_alone_a_write_in_progress_in_another_process(settings: Settings, state_postgres: PostgresServer) -> None:
    """A pending write whose writer still holds its package's lock is not resolved (aborted) by
    another process's build: its writer finishes it, and the journal lists it once."""
    settings = _postgres_settings(settings, state_postgres)
    other = open_state(settings).write_lock(settings.lock_file)
    with other.package("slow", 5), open_state(settings).journal() as journal:
        write_id = journal.begin_write({"slow/registry-meta.json": "0" * 64}, [JournalEvent("package:change", "slow")], "bob", None, "t")
        WriteService(settings).land_archive("fast", tarball("fast", "1.0.0"), ALICE)  # its first write runs the recovery build
        assert [w.id for w in journal.pending_writes()] == []  # held: not this process's to resolve
        journal.finish_write(write_id, done=True)
    with open_state(settings).journal() as journal:
        assert [(e.package, e.kind) for e in journal.since(0)] == [("fast", "package:publish"), ("slow", "package:change")]


def test_a_pending_write_of_a_package_the_caller_holds_has_a_gone_writer(settings: Settings, state_postgres: PostgresServer) -> None:
    """The caller's lock is on a connection of its own: the journal's cannot take that package to see
    its dead writer gone, so the caller says what it holds (registry_gen.state.ledger, `held`)."""
    settings = _postgres_settings(settings, state_postgres)
    with open_state(settings).journal() as journal:
        write_id = journal.begin_write({"dead/registry-meta.json": "0" * 64}, [JournalEvent("package:change", "dead")], "bob", None, "t")
        with open_state(settings).write_lock(settings.lock_file).package("dead", 5):
            assert journal.pending_writes() == []  # as another process sees it: held, so live
            assert [w.id for w in journal.pending_writes(held={"dead"})] == [write_id]
        assert [w.id for w in journal.pending_writes()] == [write_id]  # released: gone to anyone

def test_a_write_finished_between_the_pending_read_and_its_lock_is_not_taken_for_gone(
    settings: Settings, state_postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order forced: another process's reader has read `live`'s write pending; its writer then
    journals it done and releases its lock; the reader's lock check follows and succeeds. That
    write's writer was not gone: the reader must not list it (a leader's build resolved it from
    a folder without its files, aborted, and dropped the acknowledged package from the listings)."""
    settings = _postgres_settings(settings, state_postgres)
    with open_state(settings).journal() as writer, open_state(settings).journal() as reader:
        lock = open_state(settings).write_lock(settings.lock_file).package("live", 5)
        lock.__enter__()
        write_id = writer.begin_write({"live/registry-meta.json": "0" * 64}, [JournalEvent("package:change", "live")], "bob", None, "t")
        execute = reader.db.execute

        def writer_finishes_first(sql: str, *args: object) -> object:
            if "pg_try_advisory_xact_lock" in sql:
                writer.finish_write(write_id, done=True)
                lock.__exit__(None, None, None)
                monkeypatch.setattr(reader.db, "execute", execute)
            return execute(sql, *args)

        monkeypatch.setattr(reader.db, "execute", writer_finishes_first)
        assert reader.pending_writes() == []
        assert [(e.package, e.kind) for e in reader.since(0)] == [("live", "package:change")]


def test_an_unreachable_database_answers_at_once(settings: Settings) -> None:
    settings = settings.with_updates(database_url="postgresql://postgres@127.0.0.1:9/none")
    started = time.monotonic()
    with pytest.raises(StateUnavailable):
        WriteService(settings).land_archive("any", tarball("any", "1.0.0"), ALICE)
    assert time.monotonic() - started < CONNECT_TIMEOUT_SECONDS + 1


def test_the_first_write_after_a_database_restart_lands(settings: Settings, state_postgres: PostgresServer) -> None:
    settings = _postgres_settings(settings, state_postgres)
    service = WriteService(settings)
    service.land_archive("restarted", tarball("restarted", "1.0.0"), ALICE)  # leaves idle connections in the pool
    state_postgres.halt()
    state_postgres.resume()
    service.land_archive("restarted", tarball("restarted", "1.0.1"), ALICE)  # on fresh connections, not a 503
    assert {row[0] for row in _pg(settings, "SELECT version FROM pins WHERE name = 'restarted'")} == {"1.0.0", "1.0.1"}


def test_a_parallel_build_on_postgresql_needs_no_state_folder_made_beforehand(settings: Settings, state_postgres: PostgresServer) -> None:
    """On PostgreSQL nothing else creates OUT_DIR.state: a build with enough packages for worker
    processes (an instance's first start on an empty work folder after `migrate`) hands them the
    names through a file there, and once stopped on the missing folder."""
    from registry_gen.build.write import PARALLEL_PACKAGES

    on_postgres = settings.with_updates(database_url=postgres_state_url(state_postgres))
    for index in range(PARALLEL_PACKAGES + 2):
        make_tarball(settings.content_dir, f"many-{index}", "1.0.0")
    assert not on_postgres.state_folder.exists()
    result = run_build(on_postgres)
    assert not result.errors and result.archives_read == PARALLEL_PACKAGES + 2
    assert (settings.out_dir / f"many-{PARALLEL_PACKAGES + 1}" / "index.html").is_file()
