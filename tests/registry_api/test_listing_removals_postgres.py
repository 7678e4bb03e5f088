"""A listing page the leader's render removes leaves the tree bucket too (issue 28, acceptance 3).
On PostgreSQL + bucket the registry-wide pages are rendered by the leader from the markings writes
left; when the last package of a browse range or of a search shard (or leaf) goes, the page goes:
named removed file by file (a bucket removes by key, not by folder), and named though the leader's
work folder never held it (another instance rendered it), so the bucket stops serving a package
that no longer exists. Real PostgreSQL and moto in process; two `registry-gen api` processes and
nginx in front of the tree bucket for the end-to-end case."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from registry_gen import publish, site as web
from registry_gen.build import indexes
from registry_gen.objectstore import ObjectStore, open_object_store
from registry_gen.publish import Actor
from registry_gen.readmodel import PackageState
from registry_gen.refresher import IndexRefresher, WholeRewrite
from registry_gen.settings import Settings
from registry_gen.writes import Change, WriteService
from tests.conftest import postgres_state_url
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import postgres  # noqa: F401 - postgres: a fixture
from tests.registry_api.test_api_object_store import Site, bucket_site, poll
from tests.registry_api.test_leader_postgres import _leader_pid
from tests.registry_api.test_listings_follow_postgres import _stale_rows
from tests.registry_api.test_publish_cost_bucket import bucket_service, moto  # noqa: F401 - fixtures
from tests.registry_api.test_publish_cost_postgres import ALICE, _upload

pytestmark = pytest.mark.slow

NAME = "zq-gone"  # alone in its browse range (zq) and its search shard (zq)
PAGE, SHARD = web.browse_page_path("zq"), web.search_shard_path("zq")
WITHIN_SECONDS = 30  # index_refresh_seconds is 1 in these instances, a leader's tick 1 s


def unpublish_all(actor: Actor = ALICE) -> Any:
    def rule(state: PackageState) -> Change:
        meta, removed = publish.apply_unpublish_all(state, actor, publish.now_iso())
        return Change(meta=meta, delete_meta=meta is None, removed=removed)

    return rule


def _tree_keys(objects: ObjectStore, prefix: str = web.WEB_ROOT) -> set[str]:
    return {item.key for item in objects.tree.bucket.list(prefix)}


def _other_instance(service: WriteService, root: Path) -> tuple[Settings, ObjectStore]:
    """Another process on its own, empty work folder, started now (its start builds everything)."""
    settings = dataclasses.replace(service.settings, content_dir=root / "content", out_dir=root / "public", data_dir=root / "data")
    objects = open_object_store(settings)
    assert objects is not None
    objects.start(settings)
    return settings, objects


def test_an_unpublish_on_a_bucket_removes_the_archive(bucket_service: tuple[WriteService, ObjectStore]) -> None:
    """The work folder's copy of a removed archive goes too: it raised ValueError (a key checked
    twice) once the archive had left the bucket, so every unpublish on PostgreSQL + bucket failed."""
    service, objects = bucket_service
    service.publish(_upload(service.settings, NAME, "1.0.0"), ALICE)
    archive = f"{NAME}/{NAME}-1.0.0.tgz"
    assert objects.content.read(archive) is not None
    service.apply(NAME, unpublish_all(), ALICE)
    assert objects.content.read(archive) is None and not (service.settings.content_dir / archive).exists()


def test_the_leader_removes_an_emptied_browse_page_and_shard_from_the_bucket(bucket_service: tuple[WriteService, ObjectStore]) -> None:
    service, objects = bucket_service
    service.publish(_upload(service.settings, NAME, "1.0.0"), ALICE)
    WholeRewrite(service.settings, objects)()
    assert {PAGE, SHARD} <= _tree_keys(objects)
    service.apply(NAME, unpublish_all(), ALICE)
    result = WholeRewrite(service.settings, objects)()
    assert PAGE in result.removed  # the page's file, which a bucket and a cache in front remove and purge
    assert not {PAGE, SHARD} & _tree_keys(objects)
    assert NAME.encode() not in (objects.tree.bucket.read(f"{web.WEB_ROOT}/index.html") or b"")


def test_a_leader_whose_folder_never_held_the_page_removes_it_from_the_bucket(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path
) -> None:
    """B started before the publish; A rendered the pages; B, leading now, renders their removal."""
    service, objects = bucket_service
    other = _other_instance(service, tmp_path / "b")
    service.publish(_upload(service.settings, NAME, "1.0.0"), ALICE)
    WholeRewrite(service.settings, objects)()
    assert {PAGE, SHARD} <= _tree_keys(objects)
    service.apply(NAME, unpublish_all(), ALICE)
    WholeRewrite(*other)()
    assert not (other[0].out_dir / PAGE).exists()  # never there: named removed from the state
    assert not {PAGE, SHARD} & _tree_keys(objects)


def test_a_leaf_the_leader_drops_leaves_the_bucket(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard cut into leaves (3 packages, leaves of 2), then emptied of one leaf's names: its
    leaf files in the bucket are exactly the ones its list names (none once it is one leaf again),
    also when the leader that renders the removal never held them."""
    monkeypatch.setattr(indexes, "SEARCH_LEAF_MAX", 2)
    service, objects = bucket_service
    other = _other_instance(service, tmp_path / "b")
    names = ["lf-aa", "lf-bb", "lf-cc"]
    for name in names:
        service.publish(_upload(service.settings, name, "1.0.0"), ALICE)
    WholeRewrite(service.settings, objects)()
    folder = f"{web.SEARCH_SHARD_ROOT}/lf/"
    assert _tree_keys(objects, folder), "the shard was not cut into leaves"
    for name in names[1:]:
        service.apply(name, unpublish_all(), ALICE)
    WholeRewrite(*other)()
    shard = json.loads(objects.tree.bucket.read(web.search_shard_path("lf")) or b"null")
    assert "lf-aa" in json.dumps(shard)
    assert not _tree_keys(objects, folder)


def _served(site: Site, path: str) -> bytes | None:
    read = http("GET", site.reads + path)
    return read.body if read.status == 200 else None


def _listed_everywhere(site: Site) -> bool:
    return all(NAME.encode() in (_served(site, path) or b"") for path in (PAGE, SHARD, f"{web.WEB_ROOT}/index.html"))


def _gone_everywhere(site: Site) -> bool:
    front = _served(site, f"{web.WEB_ROOT}/index.html")
    return _served(site, PAGE) is None and _served(site, SHARD) is None and front is not None and NAME.encode() not in front


@pytest.mark.parametrize("leader", ["the same leader", "a new leader"])
def test_an_unpublished_package_leaves_its_browse_page_and_shard_through_nginx(
    leader: str, postgres: Any, tmp_path: Path  # noqa: F811
) -> None:
    """Two `registry-gen api` processes behind nginx. A leads and renders the pages of B's publish.
    Then B unpublishes (not the leader); or A is killed and started again, B leads, and A (no longer
    the leader) unpublishes, so B renders the removal of pages its folder never held."""
    url = postgres_state_url(postgres)
    with bucket_site("moto", url, tmp_path) as site:
        assert poll(lambda: _leader_pid(url) is not None, 30), "no instance leads"
        first = next(api for api in site.apis if api.process is not None and api.process.pid == _leader_pid(url))
        second = next(api for api in site.apis if api is not first)
        token = add_user(second.base, "alice", "alice-password-1")
        assert http("PUT", second.base + NAME, token=token, body=publish_body(NAME, "1.0.0", tarball(NAME, "1.0.0"))).status == 201
        assert poll(lambda: _listed_everywhere(site), WITHIN_SECONDS), "the leader never listed the package"
        unpublisher = second
        if leader == "a new leader":
            first.kill()
            assert poll(lambda: second.process is not None and _leader_pid(url) == second.process.pid, WITHIN_SECONDS), "B never led"
            first.start()
            unpublisher = first
        rev = http("GET", site.reads + NAME).json["_rev"]
        assert http("DELETE", f"{unpublisher.base}{NAME}/-rev/{rev}", token=token).status == 200
        assert poll(lambda: _gone_everywhere(site), WITHIN_SECONDS), (
            f"{PAGE} or {SHARD} still served, or the front page still lists {NAME}, {WITHIN_SECONDS} s after the unpublish"
        )
        assert poll(lambda: _stale_rows(url) == 0, WITHIN_SECONDS)


def test_an_unpublish_removes_the_files_another_instance_wrote_from_the_bucket(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path
) -> None:
    """B publishes a second version; A, whose work folder never held that version's files, unpublishes
    the package: its tarball and its page leave the tree bucket too (the state recorded them)."""
    service, objects = bucket_service
    service.publish(_upload(service.settings, NAME, "1.0.0"), ALICE)
    settings, other = _other_instance(service, tmp_path / "b")
    WriteService(settings, refresher=IndexRefresher(settings), objects=other).publish(_upload(settings, NAME, "2.0.0"), ALICE)
    assert {f"{NAME}/-/{NAME}-2.0.0.tgz", f"{web.package_folder(NAME)}/v/2.0.0/index.html"} <= _tree_keys(objects, NAME) | _tree_keys(objects)
    service.apply(NAME, unpublish_all(), ALICE)
    assert not _tree_keys(objects, f"{NAME}/") and not _tree_keys(objects, web.package_folder(NAME) + "/")
