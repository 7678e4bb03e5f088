"""The registry-wide listing pages follow a write through the leader (issue 28, acceptance 2): on
PostgreSQL + bucket a write's build only marks the front page, its browse pages and its search
shards stale in the state (in its transaction), and the leading instance renders, uploads and
settles them. Two real `registry-gen api` processes, a real PostgreSQL, a moto server and nginx in
front of the tree bucket: after a publish the front page and the search shard read through nginx
list the package within seconds, also when the publishing instance (the leader itself, or the
other one) is SIGKILLed right after its answer: the marks are rows in PostgreSQL, not in a process."""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from registry_gen import site as web
from registry_gen.errors import StorageUnavailable
from registry_gen.objectstore import ObjectStore, open_object_store
from registry_gen.refresher import IndexRefresher, WholeRewrite
from registry_gen.settings import Settings
from registry_gen.site_search import search_keys
from registry_gen.state import open_state
from registry_gen.state.records import StalePage
from registry_gen.verify import verify_tree
from registry_gen.writes import WriteService
from tests.conftest import postgres_state_url
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import postgres  # noqa: F401 - postgres: a fixture
from tests.registry_api.test_api_object_store import Site, bucket_site, poll
from tests.registry_api.test_leader_postgres import _leader_pid
from tests.registry_api.test_publish_cost_bucket import bucket_service, moto  # noqa: F401 - fixtures
from tests.registry_api.test_publish_cost_postgres import ALICE, _upload
from tests.user_api.pg_server import PostgresServer

pytestmark = pytest.mark.slow

NAME = "follow-pkg"
WITHIN_SECONDS = 30  # index_refresh_seconds is 1 in these instances, a leader's tick 1 s; a new leader's first turn at once


def _stale_rows(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM stale_listings").fetchone()[0])


def _front_lists(site: Site, name: str) -> bool:
    front = http("GET", site.reads + f"{web.WEB_ROOT}/")
    return front.status == 200 and name.encode() in front.body


def _shard_lists(site: Site, name: str, key: str) -> bool:
    shard = http("GET", site.reads + web.search_shard_path(key))
    return shard.status == 200 and name in json.dumps(json.loads(shard.body))


@pytest.mark.parametrize("killed", ["the leader", "the other instance"])
def test_the_front_page_and_the_search_shard_list_a_publish_within_seconds_though_its_instance_is_killed(
    killed: str, postgres: Any, tmp_path: Path  # noqa: F811
) -> None:
    url = postgres_state_url(postgres)
    with bucket_site("moto", url, tmp_path) as site:
        assert poll(lambda: _leader_pid(url) is not None, 30), "no instance leads"
        leader = next(api for api in site.apis if api.process is not None and api.process.pid == _leader_pid(url))
        publisher = leader if killed == "the leader" else next(api for api in site.apis if api is not leader)
        survivor = next(api for api in site.apis if api is not publisher)
        token = add_user(survivor.base, "alice", "alice-password-1")
        key = search_keys({"name": NAME})[0]  # "fo": the first word of its name
        assert not _front_lists(site, NAME) and not _shard_lists(site, NAME, key)

        body = publish_body(NAME, "1.0.0", tarball(NAME, "1.0.0"))
        assert http("PUT", publisher.base + NAME, token=token, body=body).status == 201
        publisher.kill()  # SIGKILL right after the answer: nothing it held in memory survives
        assert http("GET", site.reads + NAME).json["versions"].keys() == {"1.0.0"}  # the package's own files came with the answer

        assert poll(lambda: _front_lists(site, NAME) and _shard_lists(site, NAME, key), WITHIN_SECONDS), (
            f"the front page or the shard {key} did not list {NAME} within {WITHIN_SECONDS} s"
        )
        assert poll(lambda: _stale_rows(url) == 0, WITHIN_SECONDS)  # settled once uploaded
        assert survivor.process is not None and survivor.process.poll() is None


def _refused(result: object) -> None:
    raise StorageUnavailable("the tree bucket refused the upload")


def rewrite_refused_after_a_publish(
    bucket_service: tuple[WriteService, ObjectStore], monkeypatch: pytest.MonkeyPatch, name: str, marked: Callable[[Any], bool]
) -> Any:
    """A publish of `name` (which leaves `marked(state)` true), then the leader's rewrite with the
    tree bucket refusing its upload (it raises); the state, for the caller's checks."""
    service, objects = bucket_service
    service.publish(_upload(service.settings, name, "1.0.0"), ALICE)
    state = open_state(service.settings)
    assert marked(state)
    monkeypatch.setattr(objects.tree, "publish", _refused)
    with pytest.raises(StorageUnavailable):
        WholeRewrite(service.settings, objects)()
    return state


def test_a_rewrite_whose_upload_failed_leaves_its_pages_marked_and_the_next_process_uploads_them(
    bucket_service: tuple[WriteService, ObjectStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader rendered the pages a write left, then the tree bucket refused them (or it died
    before its upload): their marks stay. The next leader (another process: a new tree sink, the
    same work folder, which already holds those renders) uploads them all the same, then settles."""
    settings, objects = bucket_service[0].settings, bucket_service[1]
    state = rewrite_refused_after_a_publish(bucket_service, monkeypatch, "retried-kit", lambda state: state.listings_stale())
    assert state.listings_stale()  # nothing settled: the pages are not in the bucket
    assert b"retried-kit" in (settings.out_dir / web.WEB_ROOT / "index.html").read_bytes()  # rendered here, though
    assert b"retried-kit" not in (objects.tree.bucket.read(f"{web.WEB_ROOT}/index.html") or b"")

    successor = open_object_store(settings)  # another process: nothing owed in its memory
    assert successor is not None
    WholeRewrite(settings, successor)()
    assert b"retried-kit" in (successor.tree.bucket.read(f"{web.WEB_ROOT}/index.html") or b"")
    assert b"retried-kit" in (successor.tree.bucket.read(web.search_shard_path("re")) or b"")
    assert not state.listings_stale()


def test_a_page_marked_again_while_the_rewrite_worked_stays_marked(bucket_service: tuple[WriteService, ObjectStore]) -> None:
    """The rewrite settles only the markings it read: a write that marks one of its pages again
    between the rewrite's render and its settling (another process's build) keeps that page owed."""
    service, _ = bucket_service
    settings = service.settings
    service.publish(_upload(settings, "marked-kit", "1.0.0"), ALICE)
    state = open_state(settings)
    session = state.session()
    try:
        session.begin()
        read = session.stale_listings()
        session.commit()
        assert StalePage("front", "") in [StalePage(p.kind, p.key, p.bound) for p in read]
        session.begin()
        session.mark_listings_stale([StalePage("front", "")])  # a later write's build
        session.commit()
    finally:
        session.close()
    state.settle_stale_listings(read)
    session = state.session()
    try:
        session.begin()
        left = session.stale_listings()
        session.commit()
    finally:
        session.close()
    assert [(p.kind, p.key) for p in left] == [("front", "")]


def test_verify_notes_the_pending_listing_pages_and_does_not_fail(tmp_path: Path, state_postgres: PostgresServer) -> None:
    """`registry-gen verify` on the tree of a PostgreSQL state whose writes left listing pages to the
    leader: a note (the pages follow within index_refresh_seconds), never a failure."""
    settings = Settings(
        content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data", base_url="http://127.0.0.1:9/",
        database_url=postgres_state_url(state_postgres), index_refresh_seconds=3600,
    )  # fmt: skip
    settings.content_dir.mkdir()
    service = WriteService(settings, refresher=IndexRefresher(settings))
    for name in ("first-kit", "noted-kit"):  # the first build of a state is a full one, which defers nothing
        service.publish(_upload(settings, name, "1.0.0"), ALICE)
    report = verify_tree(settings.out_dir, settings=settings)
    assert report.ok, [str(problem) for problem in report.problems]
    assert "listings-refresh-pending" in {note.rule for note in report.notes}
    service.refresher.flush()  # type: ignore[union-attr] - the refresh renders them: the note goes
    assert "listings-refresh-pending" not in {note.rule for note in verify_tree(settings.out_dir, settings=settings).notes}
