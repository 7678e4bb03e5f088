"""One leader at a time among `registry-gen api` processes on one PostgreSQL, fenced by an epoch
(issue 28, acceptance 3): an old leader whose session lock a restart dropped cannot act once a new
one took over; a leader killed between a write's commit and its render is healed by the other
instance within seconds; and across a PostgreSQL restart the records never show two leaders acting."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from registry_gen.errors import NotLeader
from registry_gen.layout import ALL_DOCUMENT
from registry_gen.state.postgres_base import LOCK_REGISTRY
from registry_gen.state.postgres_leader import LEADER, PgLeadership
from tests.conftest import postgres_state_url
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import (  # noqa: F401 - postgres: a fixture
    ACKNOWLEDGED,
    BASE_URL,
    Api,
    Registry,
    instance_config,
    postgres,
)
from tests.user_api.pg_server import PostgresServer

pytestmark = pytest.mark.slow

LEADER_LOCK_HOLDERS = (
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s AND objid = %s AND objsubid = 2"
)


def _rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def _until(condition: Callable[[], Any], seconds: float, what: str) -> Any:
    """Polls `condition` until it is truthy (a deadline, no sleeps as synchronisation)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


def test_an_old_leader_cannot_act_once_a_new_one_took_over(postgres: PostgresServer) -> None:  # noqa: F811
    url = postgres_state_url(postgres)
    old, new = PgLeadership(url, "old"), PgLeadership(url, "new")
    first = old.try_lead()
    assert first is not None and new.try_lead() is None  # one leader
    (holder,) = _rows(url, LEADER_LOCK_HOLDERS, (LOCK_REGISTRY, LEADER))
    _rows(url, "SELECT pg_terminate_backend(%s)", holder)  # what a restart does: the session lock is gone, unnoticed
    assert new.try_lead() == first + 1
    with pytest.raises(NotLeader):
        with old.fenced("rebuild"):
            raise AssertionError("the old leader acted")
    assert old.epoch is None
    with new.fenced("rebuild"):
        pass
    assert _rows(url, "SELECT epoch, holder FROM leader_actions") == [(first + 1, "new")]
    assert _rows(url, "SELECT epoch, holder FROM leader_terms ORDER BY epoch") == [(first, "old"), (first + 1, "new")]


def _instances(postgres: PostgresServer, tmp_path: Path, envs: tuple[dict[str, str], dict[str, str]], extra: str = "") -> Registry:  # noqa: F811
    """Instances A and B (not started), each with its environment, on a schema of their own."""
    url = postgres_state_url(postgres)
    shared = tmp_path / "shared"
    (shared / "content").mkdir(parents=True)
    apis = [Api(instance_config(tmp_path / host, shared, url, BASE_URL, extra), env=env) for host, env in zip("ab", envs)]
    return Registry(shared, apis)


def _leader_pid(url: str) -> int | None:
    """The process id of the current leader, as the leadership row names it (None: nobody yet)."""
    try:
        rows = _rows(url, "SELECT holder FROM leadership WHERE id = 1 AND holder IS NOT NULL")
    except psycopg.errors.UndefinedTable:
        return None  # no instance has tried to lead yet
    return int(rows[0][0].rsplit(":", 1)[1]) if rows else None


def _database_url(registry: Registry) -> str:
    """The URL every instance of `registry` has in its registry.yaml."""
    from registry_gen.settings import load_settings

    return str(load_settings(registry.apis[0].config).database_url)


@pytest.fixture
def crashing_leader(postgres: PostgresServer, tmp_path: Path) -> Iterator[Registry]:  # noqa: F811
    """Instance A dies after a write's files landed and before its build (REGISTRY_GEN_FAILPOINT); A leads."""
    registry = _instances(postgres, tmp_path, ({"REGISTRY_GEN_FAILPOINT": "after-store:kill"}, {}))
    a, b = registry.apis
    try:
        a.start()
        assert a.process is not None
        _until(lambda: _leader_pid(_database_url(registry)) == a.process.pid, 60, "A leads")  # type: ignore[union-attr]
        b.start()
        registry.token = add_user(b.base, "alice", "alice-password-1")
        yield registry
    finally:
        for api in registry.apis:
            api.stop()


def test_a_leader_killed_between_commit_and_render_is_healed_by_the_other_within_seconds(crashing_leader: Registry) -> None:
    registry, (a, b) = crashing_leader, crashing_leader.apis
    assert registry.publish(b, "healed", "1.0.0") == f"{ACKNOWLEDGED}:201"
    assert registry.publish(a, "healed", "1.1.0").startswith("unknown")  # A died with it: committed, not rendered
    assert a.process is not None and a.process.wait(timeout=30) == -9
    killed = time.monotonic()
    assert "1.1.0" not in registry.document("healed")["versions"]

    def published() -> list[list[str]]:
        return [e["versions"] for e in registry.feed(b) if e["name"] == "healed" and e["kind"] == "package:publish"]

    def healed() -> bool:  # rendered, and journalled done (the tree is written just before the state commits)
        return "1.1.0" in registry.document("healed")["versions"] and len(published()) == 2

    _until(healed, 30, "the other instance renders the crashed write and resolves its journal entry")
    assert time.monotonic() - killed < 15
    assert b.process is not None and _leader_pid(_database_url(registry)) == b.process.pid
    assert published() == [["1.0.0"], ["1.1.0"]]  # resolved done, once


def test_a_write_right_after_a_writer_died_resolves_the_dead_one_first(crashing_leader: Registry) -> None:
    """B has written before; A dies with 1.1.0 stored, not rendered; B's next write of the same
    package, at once, resolves A's pending write first although B holds the package's lock (its
    other connections could not take it to see A gone). Before the fix B overwrote the meta first,
    so A's write read as not landed (aborted, never journalled) while 1.1.0, in content/, was
    served a moment later: what test_no_write_lost reported as served but never journalled."""
    registry, (a, b) = crashing_leader, crashing_leader.apis
    assert registry.publish(b, "raced", "1.0.0") == f"{ACKNOWLEDGED}:201"
    assert registry.publish(a, "raced", "1.1.0").startswith("unknown")
    assert a.process is not None and a.process.wait(timeout=30) == -9
    assert registry.publish(b, "raced", "1.2.0") == f"{ACKNOWLEDGED}:201"
    published = [e["versions"] for e in registry.feed(b) if e["name"] == "raced" and e["kind"] == "package:publish"]
    assert published == [["1.0.0"], ["1.1.0"], ["1.2.0"]]  # A's stored write resolved done, before B's, once
    assert sorted(registry.document("raced")["versions"]) == ["1.0.0", "1.1.0", "1.2.0"]


@pytest.fixture
def refreshing(postgres: PostgresServer, tmp_path: Path) -> Iterator[Registry]:  # noqa: F811
    """Instances A and B rewriting -/all a second after writes (so the leader acts often)."""
    registry = _instances(postgres, tmp_path, ({}, {}), "index_refresh_seconds: 1\n")
    try:
        for api in registry.apis:
            api.start()
        registry.token = add_user(registry.apis[0].base, "alice", "alice-password-1")
        yield registry
    finally:
        for api in registry.apis:
            api.stop()


def _publish_until_acknowledged(registry: Registry, api: Api, name: str, version: str) -> None:
    """Retries a 503 (a pooled connection the restart left dead), within a deadline."""

    def attempt() -> bool:
        if registry.publish(api, name, version) == f"{ACKNOWLEDGED}:201":
            return True
        registry.outcomes.pop()  # refused during the restart: not a write to check
        return False

    _until(attempt, 60, f"{name}@{version} acknowledged")


def _actions(url: str) -> list[tuple[Any, ...]]:
    return _rows(url, "SELECT epoch, holder, started, finished FROM leader_actions ORDER BY started")


def _assert_one_leader_acting_at_a_time(url: str) -> None:
    """The records: each term after the last, each action inside its own term, and actions of two
    terms never overlapping (an old leader's action ends before a newer one's starts)."""
    terms = _rows(url, "SELECT epoch, holder, acquired FROM leader_terms ORDER BY epoch")
    acquired = {epoch: at for epoch, _, at in terms}
    assert [at for _, _, at in terms] == sorted(at for _, _, at in terms)
    actions = _actions(url)
    for epoch, holder, started, _ in actions:
        assert (epoch, holder, acquired[epoch]) in terms and started >= acquired[epoch]
        later = [at for e, _, at in terms if e > epoch]
        assert not later or started < min(later), "an action of an epoch that was over"
    for (epoch, _, _, finished), (next_epoch, _, started, _) in zip(actions, actions[1:]):
        assert next_epoch >= epoch and (next_epoch == epoch or finished <= started), "two leaders acting at once"


def test_a_postgresql_restart_never_gives_two_leaders_acting(refreshing: Registry, postgres: PostgresServer) -> None:  # noqa: F811
    registry, (a, b) = refreshing, refreshing.apis
    url = _database_url(registry)
    for k, api in enumerate((a, b, a, b)):
        assert registry.publish(api, f"before-{k}", "1.0.0") == f"{ACKNOWLEDGED}:201"
    _until(lambda: _actions(url), 30, "the leader rewrote -/all")
    (epoch_before,) = _rows(url, "SELECT epoch FROM leadership")[0]
    postgres.halt()  # every session lock dropped, every connection cut
    postgres.resume()
    for k, api in enumerate((a, b, a, b)):
        _publish_until_acknowledged(registry, api, f"after-{k}", "1.0.0")
    _until(lambda: [row for row in _actions(url) if row[0] > epoch_before], 60, "a new term acted")
    names = {f"{when}-{k}" for when in ("before", "after") for k in range(4)}
    _until(lambda: names <= set(json.loads((registry.shared / "public" / ALL_DOCUMENT).read_bytes())), 30, "-/all lists every package")
    _assert_one_leader_acting_at_a_time(url)
    assert len(_rows(url, LEADER_LOCK_HOLDERS, (LOCK_REGISTRY, LEADER))) == 1


def test_the_leader_sends_a_purge_an_instance_owed_when_it_died(postgres: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    """A writer records its purge in the ledger before it stores anything; killed before it sent
    it, the purge is not lost: the leader's next tick, in another process, sends it once due."""
    from registry_gen.build import run_build
    from registry_gen.leader import Leader
    from registry_gen.purge import parse_purge, purger_for
    from registry_gen.settings import Settings
    from registry_gen.state import open_state
    from tests.hosts.servers import recording_upstream

    with recording_upstream() as (port, records):
        settings = Settings(
            content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data",
            database_url=postgres_state_url(postgres), purge=parse_purge({"url": f"http://127.0.0.1:{port}/", "key_header": "xkey"}),
        )  # fmt: skip
        (tmp_path / "content").mkdir()
        run_build(settings)
        dying = purger_for(settings)
        assert dying is not None and dying.owe(["gone-writer/index.html"]) is not None  # and then the writer dies
        leader = Leader(settings)
        try:
            _until(lambda: (leader.work(), any(r.headers.get("xkey") == "gone-writer" for r in records))[1], 20, "the leader's purge")
        finally:
            leader.stop()
        assert [r.method for r in records] == ["PURGE"]
        with open_state(settings).journal() as journal:
            assert journal.owed_purges(float("inf")) == []


def test_a_failure_every_turn_is_logged_once_then_its_end(postgres: PostgresServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    """The leader retries every second while a part is down (a bucket, the tree's store): the log
    gets one line for the failure, not one per turn, and one line when the rebuild runs again."""
    from registry_gen.build import run_build
    from registry_gen.leader import Leader
    from registry_gen.settings import Settings

    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data",
                        database_url=postgres_state_url(postgres))  # fmt: skip
    (tmp_path / "content").mkdir()
    run_build(settings)
    leader = Leader(settings)
    working = leader.rewrite

    class BucketDown:
        purger = None

        def __call__(self) -> None:
            raise OSError("the tree bucket answered 503 SlowDown")

    leader._due = lambda force: True  # type: ignore[method-assign]  # a write pending every turn
    try:
        leader.rewrite = BucketDown()  # type: ignore[assignment]
        with caplog.at_level("WARNING", logger="registry_gen.leader"):
            assert [leader.work(force=True) for _ in range(5)] == [False] * 5
            leader.rewrite = working
            assert leader.work(force=True)
    finally:
        leader.stop()
    lines = [record.getMessage() for record in caplog.records if record.name == "registry_gen.leader"]
    assert lines == [
        "the leader's rebuild did not run (the next turn retries): the tree bucket answered 503 SlowDown",
        "the leader's rebuild runs again, after 5 failed turn(s)",
    ]
