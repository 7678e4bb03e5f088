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
import threading
from concurrent.futures import ThreadPoolExecutor
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
from registry_gen.state import open_state
from registry_gen.state.postgres_base import PgDb
from registry_gen.writes import Change, WriteService
from tests.conftest import postgres_state_url
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import postgres  # noqa: F401 - postgres: a fixture
from tests.registry_api.test_api_object_store import Site, bucket_site, poll
from tests.registry_api.test_leader_postgres import _leader_pid
from tests.registry_api.test_listings_follow_postgres import _stale_rows
from tests.registry_api.test_publish_cost_bucket import bucket_service, moto, recorded  # noqa: F401 - fixtures
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


# ---------------------------------------------------------------- a range that shrank, a shard that lost leaves (issue 28)
# An unpublish that brings a browse range back to PAGE_SIZE or under makes its page list packages
# again: its sub-range pages are no longer linked. The leader that renders it may never have held
# them (another instance rendered the split): it asks the tree bucket what the range's folder holds.

SPLIT = ["zqa-one", "zqb-one", "zqb-two"]  # 3 names under "zq": past a PAGE_SIZE of 2, cut into zqa and zqb


def _lists(sent: list[Any], prefix: str = "") -> int:
    """The LISTs among `sent` (of the folder `prefix`; a request's key names the bucket's prefix first)."""
    return sum(1 for request in sent if request.operation == "ListObjectsV2" and request.key.endswith(prefix))


def _browse_keys(objects: ObjectStore, prefix: str) -> set[str]:
    return _tree_keys(objects, web.browse_folder(prefix) + "/")


def _sub_range_keys(objects: ObjectStore, prefix: str) -> set[str]:
    """The keys under `prefix`'s folder that are not its own page: its sub-ranges'."""
    folder = web.browse_folder(prefix) + "/"
    return {key for key in _browse_keys(objects, prefix) if "/" in key[len(folder) :]}


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web, "PAGE_SIZE", 2)


@pytest.mark.usefixtures("small_pages")
def test_a_leader_whose_folder_never_held_a_shrunk_range_s_sub_ranges_removes_them_from_the_bucket(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path
) -> None:
    """A renders zq split (zq/a, zq/b); one unpublish brings zq back to 2 names; B, leading now,
    started before the split: one LIST of zq's folder finds the sub-range pages, which go (and are
    purged: named removed). A new package's turn lists nothing."""
    service, objects = bucket_service
    other = _other_instance(service, tmp_path / "b")
    for name in SPLIT:
        service.publish(_upload(service.settings, name, "1.0.0"), ALICE)
    WholeRewrite(service.settings, objects)()
    assert _sub_range_keys(objects, "zq") >= {web.browse_page_path("zqa"), web.browse_page_path("zqb")}, "zq was not split"
    sent = recorded(other[1])
    service.publish(_upload(service.settings, "yy-new", "1.0.0"), ALICE)  # enters a range: no LIST
    WholeRewrite(*other)()
    assert _lists(sent) == 0, [request for request in sent if request.operation == "ListObjectsV2"]
    service.apply("zqb-two", unpublish_all(), ALICE)
    result = WholeRewrite(*other)()
    assert not _sub_range_keys(objects, "zq")
    assert web.browse_page_path("zqa") in result.removed  # purged too
    assert _lists(sent) == 1  # zq's folder, once
    page = (objects.tree.bucket.read(web.browse_page_path("zq")) or b"").decode()
    assert "zqa-one" in page and "zqb-one" in page and "zqb-two" not in page


@pytest.mark.usefixtures("small_pages")
def test_a_range_emptied_while_split_leaves_the_bucket_with_its_sub_ranges(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path
) -> None:
    """Every package of a split range goes in one window of the leader (B, whose folder never held
    the range): its page and every sub-range page under it leave the bucket."""
    service, objects = bucket_service
    other = _other_instance(service, tmp_path / "b")
    for name in SPLIT:
        service.publish(_upload(service.settings, name, "1.0.0"), ALICE)
    WholeRewrite(service.settings, objects)()
    assert _sub_range_keys(objects, "zq"), "zq was not split"
    for name in SPLIT:
        service.apply(name, unpublish_all(), ALICE)
    WholeRewrite(*other)()
    assert not _browse_keys(objects, "zq")


def test_a_start_that_renders_pending_removals_removes_the_pages_from_the_bucket(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page emptied and a leaf dropped by writes the leader has not rendered yet: an instance's
    start (a full build from an empty folder) renders those markings; the page and the leaf leave
    the bucket (they stayed, and nothing would name them again). It leaves the markings to the
    leader (a leader turn built before the start may upload after it), whose turn settles them
    and puts nothing back."""
    monkeypatch.setattr(indexes, "SEARCH_LEAF_MAX", 2)
    service, objects = bucket_service
    names = ["lf-aa", "lf-bb", "lf-cc"]
    for name in [*names, NAME]:
        service.publish(_upload(service.settings, name, "1.0.0"), ALICE)
    WholeRewrite(service.settings, objects)()
    folder = f"{web.SEARCH_SHARD_ROOT}/lf/"
    assert PAGE in _tree_keys(objects) and _tree_keys(objects, folder), "the page was not rendered, or the shard not cut"
    for name in [*names[1:], NAME]:
        service.apply(name, unpublish_all(), ALICE)
    _other_instance(service, tmp_path / "b")
    assert PAGE not in _tree_keys(objects) and not _tree_keys(objects, folder)
    assert _stale_rows(str(service.settings.database_url)) > 0  # left to the leader
    WholeRewrite(service.settings, objects)()
    assert _stale_rows(str(service.settings.database_url)) == 0
    assert PAGE not in _tree_keys(objects) and not _tree_keys(objects, folder)


def test_a_shard_that_lost_a_leaf_leaves_no_leaf_an_earlier_render_cut_in_the_bucket(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leaf file the leader's markings do not name (an earlier release cut the shard otherwise, or
    a start before this change settled its removal): once the shard loses a leaf, one LIST of its
    leaf folder finds it and it goes; the leaves still listed stay."""
    monkeypatch.setattr(indexes, "SEARCH_LEAF_MAX", 2)
    service, objects = bucket_service
    other = _other_instance(service, tmp_path / "b")
    names = ["lf-aa", "lf-bb", "lf-cc", "lf-dd", "lf-ee"]
    for name in names:
        service.publish(_upload(service.settings, name, "1.0.0"), ALICE)
    WholeRewrite(service.settings, objects)()
    folder = f"{web.SEARCH_SHARD_ROOT}/lf/"
    stray = f"{folder}{web.search_leaf_id('lf-zz')}.json"
    objects.tree.bucket.publish(stray, b'{"packages": []}', content_type="application/json", cache_control="no-cache")
    sent = recorded(other[1])
    service.apply("lf-bb", unpublish_all(), ALICE)  # its leaf empties and goes
    WholeRewrite(*other)()
    index = json.loads(objects.tree.bucket.read(web.search_shard_path("lf")) or b"null")
    listed = {key for key in _tree_keys(objects, folder) if key.endswith(".json")}
    assert stray not in listed and len(listed) == len(index["leaves"]), (listed, index)
    assert _lists(sent, folder) == 1


def _publish_all(api_bases: list[str], token: str, names: list[str]) -> None:
    """Each name at 1.0.0, spread over the instances, a few at once (distinct packages)."""

    def one(n: int) -> int:
        name = names[n]
        return http("PUT", api_bases[n % len(api_bases)] + name, token=token, body=publish_body(name, "1.0.0", tarball(name, "1.0.0"))).status

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert set(pool.map(one, range(len(names)))) == {201}


def test_a_range_shrunk_under_a_new_leader_stops_serving_its_sub_range_pages_through_nginx(postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    """Two `registry-gen api` processes behind nginx, PAGE_SIZE as shipped. A leads and renders zq
    split (PAGE_SIZE + 1 names: zq/a and zq/b). A is killed, B leads (its work folder, started
    empty, never held zq's sub-ranges) and one name is unpublished: zq lists its PAGE_SIZE names
    again, and zq/a and zq/b answer 404 through nginx. (A is not started again: its start would
    render the unpublish's markings itself, from a folder that holds the sub-ranges.)"""
    names = [f"zqa-{n}" for n in range(web.PAGE_SIZE // 2 + 1)] + [f"zqb-{n}" for n in range(web.PAGE_SIZE // 2)]
    sub_pages = [web.browse_page_path("zqa"), web.browse_page_path("zqb")]
    url = postgres_state_url(postgres)
    with bucket_site("moto", url, tmp_path) as site:
        assert poll(lambda: _leader_pid(url) is not None, 30), "no instance leads"
        first = next(api for api in site.apis if api.process is not None and api.process.pid == _leader_pid(url))
        second = next(api for api in site.apis if api is not first)
        token = add_user(second.base, "alice", "alice-password-1")
        _publish_all([second.base, first.base], token, names)

        def split() -> bool:
            return b"zqa-0" in (_served(site, sub_pages[0]) or b"") and b"zqb-0" in (_served(site, sub_pages[1]) or b"")

        assert poll(split, WITHIN_SECONDS), "the leader never rendered zq's sub-ranges"
        # Every marking rendered by A: else B's first turn renders the last publishes' paths through
        # zq, and the sub-ranges with them, into its own folder.
        assert poll(lambda: _stale_rows(url) == 0, WITHIN_SECONDS)
        first.kill()
        assert poll(lambda: second.process is not None and _leader_pid(url) == second.process.pid, WITHIN_SECONDS), "B never led"
        held = site.works[site.apis.index(second)] / "public"
        assert not any((held / path).exists() for path in sub_pages), "B's folder holds zq's sub-ranges: nothing to test"
        gone = names[-1]
        rev = http("GET", site.reads + gone).json["_rev"]
        assert http("DELETE", f"{second.base}{gone}/-rev/{rev}", token=token).status == 200

        def shrunk() -> bool:
            page = _served(site, web.browse_page_path("zq")) or b""
            return gone.encode() not in page and b"zqb-0" in page and b"zqa-0" in page

        assert poll(shrunk, WITHIN_SECONDS), f"zq never listed its {web.PAGE_SIZE} names"
        assert poll(lambda: all(_served(site, path) is None for path in sub_pages), WITHIN_SECONDS), (
            f"{sub_pages} still served {WITHIN_SECONDS} s after zq shrank back to {web.PAGE_SIZE} names"
        )
        assert poll(lambda: _stale_rows(url) == 0, WITHIN_SECONDS)


# ---------------------------------------------------------------- a range that splits again (issue 28)
# A leader renders a split and keeps its sub-range pages in its folder; the range shrinks under
# another leader, which removes them from the tree bucket; a publish splits it again while the first
# leads: its folder's copies are not what the bucket holds, so every page under the range is uploaded.


@pytest.mark.usefixtures("small_pages")
def test_a_range_that_splits_again_under_the_first_leader_has_every_linked_sub_range_page_in_the_bucket(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path
) -> None:
    """A renders zq split (zq/a, zq/b, in its folder and the bucket); an unpublish shrinks zq and B,
    leading, removes them from the bucket; a publish of zqc-one splits zq again and A, leading again,
    renders it: zq/a and zq/b, which A's folder still holds unchanged, are uploaded too (A skipped
    them: linked from zq's page, 404). That turn lists nothing."""
    service, objects = bucket_service
    other = _other_instance(service, tmp_path / "b")
    for name in SPLIT:
        service.publish(_upload(service.settings, name, "1.0.0"), ALICE)
    WholeRewrite(service.settings, objects)()
    held = {web.browse_page_path("zqa"), web.browse_page_path("zqb")}
    assert _sub_range_keys(objects, "zq") >= held, "zq was not split"
    service.apply("zqb-two", unpublish_all(), ALICE)
    WholeRewrite(*other)()
    assert not _sub_range_keys(objects, "zq"), "B did not remove zq's sub-ranges"
    assert all((service.settings.out_dir / path).is_file() for path in held), "A's folder lost them: nothing to test"
    service.publish(_upload(service.settings, "zqc-one", "1.0.0"), ALICE)
    sent = recorded(objects)  # the leader's turn (the publish lists its new content folder)
    WholeRewrite(service.settings, objects)()
    assert _lists(sent) == 0  # counted before this test's own LISTs below
    assert b"zqa-one" not in (objects.tree.bucket.read(web.browse_page_path("zq")) or b""), "zq was not split again"
    linked = held | {web.browse_page_path("zqc")}  # zq's page links its three sub-ranges
    missing = linked - _sub_range_keys(objects, "zq")
    assert not missing, f"{sorted(missing)} linked from zq's page, not in the bucket"


# ---------------------------------------------------------------- a write finishing as another reads it (issue 28)
# A write's build resolves the pending writes whose writer is gone: it reads the pending rows, then
# tries each one's package lock. A live writer that journals its write done and releases its lock
# in between is not gone, and its package is not this instance's to remove.


def test_a_write_finished_while_another_write_s_build_checks_it_stays_listed(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B publishes zqa-live; after B's build and upload, before B journals it done, A's publish of
    zqa-other starts: its sync sees zqa-live's writer alive (nothing synced), its build reads the
    write pending; then (the order forced) B finishes and releases its lock, and A's build tries
    that lock. A's build resolved the finished write from a folder without its files: aborted,
    zqa-live dropped from the state and its tree files deleted, although B answered 201."""
    service, objects = bucket_service
    other_settings, other_objects = _other_instance(service, tmp_path / "b")
    writer = WriteService(other_settings, refresher=IndexRefresher(other_settings), objects=other_objects)
    main, checking, released = threading.current_thread(), threading.Event(), threading.Event()
    outcome: list[Any] = []

    def a_publishes() -> None:
        outcome.append(service.publish(_upload(service.settings, "zqa-other", "1.0.0"), ALICE))

    reader = threading.Thread(target=a_publishes)

    def b_pauses_before_done(name: str) -> None:
        if name == "after-upload" and threading.current_thread() is main:
            reader.start()
            assert checking.wait(60), "A's build never checked zqa-live's lock"

    execute = PgDb.execute

    def a_checks_after_b_is_done(db: PgDb, sql: str, *args: Any) -> Any:
        in_build = threading.current_thread() is reader and db.in_transaction  # the sync's check runs outside one
        if in_build and "pg_try_advisory_xact_lock" in sql and not checking.is_set():
            checking.set()
            assert released.wait(60)
        return execute(db, sql, *args)

    monkeypatch.setattr("registry_gen.writes.failpoint", b_pauses_before_done)
    monkeypatch.setattr(PgDb, "execute", a_checks_after_b_is_done)
    writer.publish(_upload(other_settings, "zqa-live", "1.0.0"), ALICE)  # answered: its writer is done
    released.set()
    reader.join(60)
    assert outcome, "A's publish did not finish"
    assert not [path for path in outcome[0].removed if "zqa-live" in path], "A's build removed the acknowledged zqa-live"
    with open_state(service.settings).view() as view:
        assert "zqa-live" in set(view.present_names())
    assert _tree_keys(objects, "zqa-live/")
