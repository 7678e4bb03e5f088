"""-/all and -/search.json follow a write through the leader whatever stops it between its build
and its upload (issue 28, acceptance 3): on PostgreSQL + bucket the leader's rewrite leaves their
stale mark set when it commits, and clears it, if no write marked them again meanwhile, only
once the tree bucket holds the files. A rewrite whose upload the bucket refused, or whose process
was SIGKILLed before it, leaves them to the next turn or the next process."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from registry_gen.failpoints import FAILPOINT_ENV
from registry_gen.layout import ALL_DOCUMENT, SEARCH_DOCUMENT
from registry_gen.leader import Leader
from registry_gen.objectstore import ObjectStore, open_object_store
from registry_gen.refresher import WholeRewrite
from registry_gen.state import open_state
from registry_gen.writes import WriteService
from tests.conftest import postgres_state_url
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import postgres  # noqa: F401 - postgres: a fixture
from tests.registry_api.test_api_object_store import Site, bucket_site, poll
from tests.registry_api.test_leader_postgres import _leader_pid
from tests.registry_api.test_listings_follow_postgres import rewrite_refused_after_a_publish
from tests.registry_api.test_publish_cost_bucket import bucket_service, moto  # noqa: F401 - fixtures
from tests.registry_api.test_publish_cost_postgres import ALICE, _upload

pytestmark = pytest.mark.slow

WITHIN_SECONDS = 30  # index_refresh_seconds is 1 in these instances, a leader's tick 1 s


def _lists(document: bytes | None, name: str) -> bool:
    return document is not None and name in json.loads(document)


def _all_lists(site: Site, name: str) -> bool:
    read = http("GET", site.reads + "-/all")
    return read.status == 200 and _lists(read.body, name)


def _stale(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT value FROM settings WHERE key = 'whole_documents_stale'").fetchone()
    return bool(row and row[0])


def _marking(service: WriteService) -> str:
    session = open_state(service.settings).session()
    try:
        session.begin()
        return str(session.db.execute("SELECT value FROM settings WHERE key = 'whole_documents_stale'").fetchone()[0])  # type: ignore[attr-defined]
    finally:
        session.close()


def test_a_rewrite_whose_upload_of_all_failed_leaves_it_marked_and_the_next_process_uploads_it(
    bucket_service: tuple[WriteService, ObjectStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader rendered -/all after a write, then the tree bucket refused it: the mark stays.
    The next leader (another process, the same work folder, which already holds that render)
    uploads -/all and -/search.json all the same, then clears the mark."""
    settings, objects = bucket_service[0].settings, bucket_service[1]
    state = rewrite_refused_after_a_publish(bucket_service, monkeypatch, "whole-kit", lambda state: state.whole_documents_stale())
    assert state.whole_documents_stale()  # not in the bucket: still owed
    assert b"whole-kit" in (settings.out_dir / ALL_DOCUMENT).read_bytes()  # rendered here, though
    assert not _lists(objects.tree.bucket.read(ALL_DOCUMENT), "whole-kit")

    successor = open_object_store(settings)  # another process: nothing owed in its memory
    assert successor is not None
    WholeRewrite(settings, successor)()
    assert _lists(successor.tree.bucket.read(ALL_DOCUMENT), "whole-kit")
    assert b"whole-kit" in (successor.tree.bucket.read(SEARCH_DOCUMENT) or b"")
    assert not state.whole_documents_stale()


def test_a_mark_set_again_while_the_rewrite_uploaded_stays(
    bucket_service: tuple[WriteService, ObjectStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that marks -/all again between the rewrite's commit and its settling (another
    process's publish while the leader uploads) keeps it owed: the rewrite settles its own marking."""
    service, objects = bucket_service
    settings = service.settings
    service.publish(_upload(settings, "first-kit", "1.0.0"), ALICE)
    upload = objects.tree.publish
    markings: list[str] = []

    def upload_meanwhile_another_write(result: Any, *early: Any) -> None:
        upload(result, *early)
        if markings:
            return  # the second write's own upload
        markings.append(_marking(service))  # the rewrite's own, set in its build
        service.publish(_upload(settings, "second-kit", "1.0.0"), ALICE)
        markings.append(_marking(service))

    monkeypatch.setattr(objects.tree, "publish", upload_meanwhile_another_write)
    result = WholeRewrite(settings, objects)()
    assert result.whole_mark == markings[0] != markings[1] != ""
    assert open_state(settings).whole_documents_stale()  # the second write's mark


def test_all_lists_a_publish_though_the_leader_is_killed_between_its_rewrite_and_its_upload(
    postgres: Any, tmp_path: Path  # noqa: F811
) -> None:
    """Two `registry-gen api` processes; B dies (SIGKILL) right after its leader's rewrite committed,
    before the upload. A, the first leader, is killed first so that B leads; after B's publish both
    are gone, and A started again puts -/all listing the package in the bucket (read through nginx).
    Only B carries the failpoint: armed from its start, a leader would die at another instance's
    start, whose own marking of -/all it sees while that start uploads."""
    url = postgres_state_url(postgres)
    with bucket_site("moto", url, tmp_path, envs=({}, {FAILPOINT_ENV: "before-rewrite-upload:kill"})) as site:
        first, dying = site.apis
        assert poll(lambda: _leader_pid(url) is not None, 30), "no instance leads"
        assert first.process is not None and _leader_pid(url) == first.process.pid  # started first, leads
        first.kill()
        assert poll(lambda: dying.process is not None and _leader_pid(url) == dying.process.pid, WITHIN_SECONDS), "B never led"
        token = add_user(dying.base, "alice", "alice-password-1")
        assert http("PUT", dying.base + "killed-kit", token=token, body=publish_body("killed-kit", "1.0.0", tarball("killed-kit", "1.0.0"))).status == 201
        assert dying.process is not None
        dying.process.wait(timeout=WITHIN_SECONDS)  # the failpoint: its rewrite committed, nothing uploaded
        assert not _all_lists(site, "killed-kit")

        first.start()
        assert poll(lambda: _all_lists(site, "killed-kit"), WITHIN_SECONDS), (
            f"-/all did not list killed-kit within {WITHIN_SECONDS} s of a new process"
        )
        assert poll(lambda: not _stale(url), WITHIN_SECONDS)  # settled once uploaded


@pytest.mark.parametrize("bucket", ["holds the render", "holds the render, read through nginx only", "holds another -/all"])
def test_another_instance_s_start_makes_the_leader_rewrite_all_only_when_the_bucket_lacks_its_render(
    bucket: str, bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path
) -> None:
    """A rolling restart: every write rendered and uploaded, another instance starts (a full build,
    then the upload of what it wrote, both under the registry-wide lock). The leader ticks once the
    start is done. When the bucket already holds the start's render of -/all and -/search.json, the
    start leaves them unmarked and the leader rewrites nothing; when it holds other bytes (put
    there by hand), the start marks them and leaves its mark to the leader (a leader turn built
    before the start may upload after it). Read through nginx only (`tree_readers: nginx`), the
    render has no folder keys to look for."""
    service, objects = bucket_service
    settings = service.settings
    readers = "nginx" if bucket.endswith("nginx only") else settings.tree_readers
    objects.tree.folder_keys = readers == "any"
    service.publish(_upload(settings, "rolled-kit", "1.0.0"), ALICE)
    WholeRewrite(settings, objects)()  # all rendered, uploaded and settled
    if bucket == "holds another -/all":
        objects.tree.bucket.publish(ALL_DOCUMENT, b"{}", content_type="application/json", cache_control="no-cache")
    leader = Leader(settings, objects=objects)  # not started: its turns are run here, by hand
    try:
        assert leader.work() is False  # nothing owed
        other = dataclasses.replace(
            settings, content_dir=tmp_path / "b" / "content", out_dir=tmp_path / "b" / "public", data_dir=tmp_path / "b" / "data", tree_readers=readers
        )
        starting = open_object_store(other)
        assert starting is not None
        starting.start(other)
        assert [leader.work()] == [bucket == "holds another -/all"]
        assert settings.database_url is not None and not _stale(settings.database_url)
    finally:
        leader.stop()
