"""Issue 28, defect 2 of the no-write-lost run: a write that lost its package lock must not go on.

The package lock on PostgreSQL is a transaction-level advisory lock on one connection. A PostgreSQL
restart while a write holds it ends that connection and the lock with it, but the write itself used
to go on (its later statements reconnect through the pool, and the bucket needs no database):
another instance could then take the lock, pass a `_rev` check on the same old view, and the two
writes overwrote each other's meta, an acknowledged write lost. Here two write services on two
work folders (two instances) share one real PostgreSQL and one content folder; the database is
restarted at a chosen moment of the first write, and the second instance writes in that window."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from registry_gen import publish
from registry_gen.errors import StateUnavailable
from registry_gen.layout import PACKAGE_DOCUMENT
from registry_gen.packument import document_revision
from registry_gen.publish import Actor, PackageState, Upload
from registry_gen.settings import Settings
from registry_gen.state import open_state
from registry_gen.storage import archive_key
from registry_gen.writes import Change, WriteService
from tests.conftest import postgres_state_url
from tests.registry_api.helpers import tarball
from tests.user_api.pg_server import PostgresServer

pytestmark = pytest.mark.slow

ALICE = Actor("alice", account_id="acct-alice")
NAME = "raced-doc"


def _instance(settings: Settings, root: Path, url: str) -> WriteService:
    """One api instance's write service: its own work folder (tree), the shared content and database."""
    return WriteService(settings.with_updates(out_dir=root / "public", data_dir=root / "data", database_url=url))


def _upload(version: str) -> Upload:
    data = tarball(NAME, version)
    manifest, digests = publish.check_tarball(NAME, version, data, Settings().limits)
    return Upload(NAME, version, data, manifest, digests, {"latest": version})


def _deprecation(rev: str, message: str) -> Callable[[PackageState], Change]:
    """npm deprecate of 1.0.0 as the web layer runs it: the rule, then the `_rev` check."""

    def rule(state: PackageState) -> Change:
        change = Change(meta=publish.apply_deprecations(state, {"1.0.0": {"deprecated": message}}, ALICE, publish.now_iso()))
        publish.check_revision(state, rev)
        return change

    return rule


def _document(service: WriteService) -> dict:
    return json.loads((service.settings.out_dir / NAME / PACKAGE_DOCUMENT).read_bytes())


def _assert_1_1_0_left_nothing_then_lands(c: WriteService) -> None:
    """c's publish of 1.1.0 that lost its lock: not served, not in content/, not journalled, nothing
    pending; then npm's retry of the 503 lands."""
    current = c.reader.current(NAME).state
    assert current.published == {"1.0.0"} and "1.1.0" not in current.meta.time
    assert not (c.settings.content_dir / archive_key(NAME, "1.1.0")).exists()
    with open_state(c.settings).journal() as journal:
        assert [(e.kind, e.versions) for e in journal.since(0)] == [("package:publish", ("1.0.0",))]
        assert journal.pending_writes() == []
    c.publish(_upload("1.1.0"), ALICE)
    assert sorted(_document(c)["versions"]) == ["1.0.0", "1.1.0"]


def test_a_write_whose_lock_a_database_restart_dropped_fails_and_loses_no_other_write(
    settings: Settings, state_postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres_state_url(state_postgres)
    a, c = _instance(settings, tmp_path / "a", url), _instance(settings, tmp_path / "c", url)
    c.publish(_upload("1.0.0"), ALICE)
    rev = _document(c)["_rev"]  # what client 2 read
    deprecated: list[str] = []

    def publish_while_the_database_restarts(state: PackageState) -> Change:
        state_postgres.halt()  # c holds the lock and has read the package: the restart drops the lock
        state_postgres.resume()
        a.apply(NAME, _deprecation(rev, "use 2"), ALICE)  # instance a takes the free lock: rev still current
        deprecated.append("acknowledged")
        return Change(meta=publish.apply_publish(state, _upload("1.1.0"), ALICE, publish.now_iso()), upload=_upload("1.1.0"))

    with pytest.raises(StateUnavailable, match="lost its lock"):
        c.apply(NAME, publish_while_the_database_restarts, ALICE)
    assert deprecated == ["acknowledged"]
    current = a.reader.current(NAME).state  # the shared truth: the content's meta and the served versions
    assert current.meta.deprecated == {"1.0.0": "use 2"}, "a's acknowledged deprecation was overwritten"
    assert "1.1.0" not in current.meta.time and current.published == {"1.0.0"}
    assert not (settings.content_dir / archive_key(NAME, "1.1.0")).exists()  # c's refused publish left nothing
    document = _document(a)
    assert sorted(document["versions"]) == ["1.0.0"] and document["versions"]["1.0.0"]["deprecated"] == "use 2"
    assert document["_rev"] == document_revision(current.meta, current.published)
    with open_state(a.settings).journal() as journal:
        assert [(e.kind, e.versions) for e in journal.since(0)] == [("package:publish", ("1.0.0",)), ("package:deprecate", ("1.0.0",))]
        assert journal.pending_writes() == []
    c.publish(_upload("1.1.0"), ALICE)  # the same write again, as npm retries a 503: it lands
    assert sorted(_document(c)["versions"]) == ["1.0.0", "1.1.0"] and _document(c)["versions"]["1.0.0"]["deprecated"] == "use 2"


def test_a_write_whose_lock_went_while_its_files_were_stored_is_undone_before_its_build_commits(
    settings: Settings, state_postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart after c stored its meta and archive: c's build finds the lock gone just before
    its commit, rolls the state back and undoes its files; nothing of it is served or journalled."""
    url = postgres_state_url(state_postgres)
    c = _instance(settings, tmp_path / "c", url)
    c.publish(_upload("1.0.0"), ALICE)
    store_archive = c.storage.create

    def store_then_restart(key: str, data: bytes) -> None:
        store_archive(key, data)
        state_postgres.halt()
        state_postgres.resume()

    monkeypatch.setattr(c.storage, "create", store_then_restart)
    with pytest.raises(StateUnavailable, match="lost its lock"):
        c.publish(_upload("1.1.0"), ALICE)
    monkeypatch.undo()
    assert sorted(_document(c)["versions"]) == ["1.0.0"]
    _assert_1_1_0_left_nothing_then_lands(c)


def test_a_build_whose_write_lost_its_lock_while_rendering_does_not_commit(
    settings: Settings, state_postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the lock's connection ends (its server process terminated) while c's build renders: the
    build's own connection would commit, so the fence just before the commit is what stops it."""
    from registry_gen.build import run as build_run
    from registry_gen.state.postgres_base import LOCK_PACKAGE, package_key

    url = postgres_state_url(state_postgres)
    c = _instance(settings, tmp_path / "c", url)
    c.publish(_upload("1.0.0"), ALICE)
    render_keys = build_run.publish_keys

    def render_then_drop_the_lock(*args: object) -> object:
        with psycopg.connect(url, autocommit=True) as conn:
            holders = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s AND objid = %s",
                (LOCK_PACKAGE, package_key(NAME) & 0xFFFFFFFF),
            ).fetchall()
        assert holders == [(True,)]
        return render_keys(*args)

    monkeypatch.setattr(build_run, "publish_keys", render_then_drop_the_lock)
    with pytest.raises(StateUnavailable, match="lost its lock"):
        c.publish(_upload("1.1.0"), ALICE)
    monkeypatch.undo()
    _assert_1_1_0_left_nothing_then_lands(c)
