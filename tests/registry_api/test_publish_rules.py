"""The pure write rules (registry_gen.publish) and the content/ storage, without a server."""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from registry_gen import publish
from registry_gen.errors import Forbidden, InvalidArchive, InvalidManifest, InvalidName, NotFound, VersionConflict
from registry_gen.meta import PackageMeta
from registry_gen.publish import Actor, BadRequest, PackageState
from registry_gen.settings import Limits
from registry_gen.storage import FolderStorage, MemoryStorage, archive_key, meta_key, read_meta, write_meta
from tests.registry_api.helpers import publish_body, tarball

NOW = "2025-03-01T12:00:00.000Z"
ALICE = Actor("alice", "alice@example.com", account_id="acct-alice")
BOB = Actor("bob", "bob@example.com", account_id="acct-bob")
ADMIN = Actor("root", None, is_admin=True)


def held(name: str = "pkg", published: tuple[str, ...] = ("1.0.0",), **meta: object) -> PackageState:
    fields = {"maintainers": [{"name": "alice", "email": "alice@example.com", "account": "acct-alice"}], **meta}
    return PackageState(name, PackageMeta(name=name, **fields), frozenset(published))  # type: ignore[arg-type]


def upload(name: str = "pkg", version: str = "1.1.0", tag: str = "latest") -> publish.Upload:
    return publish.decode_publish(name, publish_body(name, version, tarball(name, version), tag=tag), Limits())


def test_first_publisher_becomes_maintainer_and_tags_merge() -> None:
    fresh = PackageState("pkg", PackageMeta(name="pkg"), frozenset())
    meta = publish.apply_publish(fresh, upload(version="1.0.0"), BOB, NOW)
    assert meta.maintainers == [{"name": "bob", "email": "bob@example.com", "account": "acct-bob"}]
    assert (meta.dist_tags, meta.time, meta.created, meta.revision) == ({"latest": "1.0.0"}, {"1.0.0": NOW}, NOW, 1)
    later = publish.apply_publish(held(dist_tags={"latest": "1.0.0", "beta": "1.0.0"}), upload(tag="next"), ALICE, NOW)
    assert later.dist_tags == {"latest": "1.0.0", "beta": "1.0.0", "next": "1.1.0"}


@pytest.mark.parametrize(
    ("state", "actor", "words"),
    [
        (held(), BOB, "not a maintainer of pkg"),
        (held(maintainers=[]), ALICE, "no maintainers on record"),
    ],
)
def test_only_maintainers_write(state: PackageState, actor: Actor, words: str) -> None:
    with pytest.raises(Forbidden, match=words):
        publish.apply_publish(state, upload(), actor, NOW)
    assert publish.apply_publish(state, upload(), ADMIN, NOW).time["1.1.0"] == NOW  # administrators may


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (held(published=("1.1.0",)), "previously published"),
        (held(published=(), unpublished={"1.1.0": NOW}), "can never be used again"),
    ],
)
def test_a_version_number_is_used_once(state: PackageState, words: str) -> None:
    with pytest.raises(VersionConflict, match=words):
        publish.apply_publish(state, upload(), ALICE, NOW)


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        ({"versions": {}}, BadRequest, "exactly one version"),
        ({"name": "other"}, BadRequest, "does not match"),
        ({"_attachments": {}}, BadRequest, "exactly one .tgz"),
        ({"access": "private"}, BadRequest, "access must be"),
        ({"dist-tags": {"1.0": "1.1.0"}}, BadRequest, "dist-tag"),
    ],
)
def test_decode_publish_refuses_malformed_bodies(change: dict[str, object], error: type[Exception], words: str) -> None:
    body = {**publish_body("pkg", "1.1.0", tarball("pkg", "1.1.0")), **change}
    with pytest.raises(error, match=words):
        publish.decode_publish("pkg", body, Limits())


@pytest.mark.parametrize("access", ["restricted", "public", None])
def test_every_access_a_client_sends_is_accepted(access: str | None) -> None:
    """yarn 4 sends access=restricted for scoped packages by default; the read rules decide reads."""
    body = {**publish_body("@team/pkg", "1.1.0", tarball("@team/pkg", "1.1.0")), "access": access}
    decoded = publish.decode_publish("@team/pkg", body, Limits())
    assert decoded.manifest["version"] == "1.1.0" and "access" not in decoded.manifest


def test_decode_publish_checks_the_tarball_like_the_build() -> None:
    bad_version = publish_body("pkg", "1.1.0", tarball("pkg", "1.2.0"))
    with pytest.raises(BadRequest, match="says version 1.2.0"):
        publish.decode_publish("pkg", bad_version, Limits())
    with pytest.raises(InvalidManifest):
        publish.decode_publish("pkg", publish_body("pkg", "1.1.0", tarball("pkg", "one.one")), Limits())
    # What npm 11 publishes, the registry takes as written (dunder-proto@1.0.1 has "main": false).
    odd = publish.decode_publish("pkg", publish_body("pkg", "1.1.0", tarball("pkg", "1.1.0", main=False)), Limits())
    assert odd.manifest["main"] is False
    with pytest.raises(InvalidArchive):
        publish.decode_publish("pkg", publish_body("pkg", "1.1.0", tarball("pkg", "1.1.0")[:40]), Limits())
    damaged = publish_body("pkg", "1.1.0", tarball("pkg", "1.1.0"))
    damaged["versions"]["1.1.0"]["dist"]["shasum"] = "0" * 40
    with pytest.raises(BadRequest, match="dist.shasum"):
        publish.decode_publish("pkg", damaged, Limits())
    with pytest.raises(publish.ArchiveTooLarge, match="larger than"):
        publish.decode_publish("pkg", publish_body("pkg", "1.1.0", tarball("pkg", "1.1.0")), Limits(max_archive_bytes=64))


def test_legacy_create_stage_and_upload() -> None:
    fresh = PackageState("old", PackageMeta(name="old"), frozenset())
    created = publish.apply_create(fresh, ALICE, NOW)
    assert created is not None and created.maintainers[0]["name"] == "alice" and created.created == NOW
    assert publish.apply_create(held("old"), ALICE, NOW) is None  # never touches a package with versions
    with pytest.raises(Forbidden):
        publish.apply_create(held("old"), BOB, NOW)
    staged = publish.apply_stage(PackageState("old", created, frozenset()), "1.0.0", "latest", {"name": "old", "version": "1.0.0"}, ALICE, NOW)
    assert staged.pending["1.0.0"]["_tag"] == "latest" and not staged.time
    arrived = publish.decode_upload("old", "old-1.0.0.tgz", tarball("old", "1.0.0"), Limits())
    final = publish.apply_publish(PackageState("old", staged, frozenset()), arrived, ALICE, NOW)
    assert final.pending == {} and final.dist_tags == {"latest": "1.0.0"} and final.time == {"1.0.0": NOW}
    with pytest.raises(BadRequest, match="does not match"):
        publish.decode_upload("old", "old-9.9.9.tgz", tarball("old", "1.0.0"), Limits())


def test_deprecate_and_undeprecate_take_only_the_message() -> None:
    state = held(published=("1.0.0", "1.1.0"))
    body = {"1.0.0": {"deprecated": "use 1.1"}, "1.1.0": {"description": "ignored"}}
    meta = publish.apply_deprecations(state, body, ALICE, NOW)
    assert meta is not None and meta.deprecated == {"1.0.0": "use 1.1"} and meta.maintainers == state.meta.maintainers
    again = PackageState("pkg", meta, state.published)
    cleared = publish.apply_deprecations(again, {"1.0.0": {"deprecated": ""}}, ALICE, NOW)
    assert cleared is not None and cleared.deprecated == {}
    assert publish.apply_deprecations(state, {"1.0.0": {}}, ALICE, NOW) is None  # nothing changes
    with pytest.raises(BadRequest, match="not published"):
        publish.apply_deprecations(state, {"9.0.0": {"deprecated": "x"}}, ALICE, NOW)


def test_unpublish_keeps_numbers_and_moves_tags() -> None:
    state = held(published=("1.0.0", "1.1.0"), dist_tags={"latest": "1.1.0", "beta": "1.1.0"}, time={"1.0.0": NOW, "1.1.0": NOW})
    meta, removed = publish.apply_version_set(state, {"1.0.0"}, {"latest": "1.0.0", "beta": "1.1.0"}, ALICE, NOW)
    assert meta is not None and removed == {"1.1.0"}
    assert meta.dist_tags == {"latest": "1.0.0"} and meta.unpublished == {"1.1.0": NOW} and "1.1.0" not in meta.time
    with pytest.raises(BadRequest, match="cannot add versions"):
        publish.apply_version_set(state, {"1.0.0", "2.0.0"}, None, ALICE, NOW)
    everything, gone = publish.apply_version_set(state, set(), None, ALICE, NOW)
    assert everything is not None and gone == {"1.0.0", "1.1.0"}
    assert set(everything.unpublished) == {"1.0.0", "1.1.0"} and everything.maintainers == state.meta.maintainers
    never_published = PackageState("pkg", PackageMeta(name="pkg", maintainers=[{"name": "alice", "account": "acct-alice"}], created=NOW), frozenset())
    assert publish.apply_unpublish_all(never_published, ALICE, NOW) == (None, set())


def test_owners_and_dist_tags() -> None:
    people = {"alice": {"name": "alice", "email": "a@x.org"}, "bob": {"name": "bob"}}
    meta = publish.apply_owners(held(), [{"name": "alice"}, {"name": "bob"}], ALICE, NOW, people.get)
    assert meta is not None and meta.maintainers == [people["alice"], people["bob"]]
    with pytest.raises(NotFound, match="carol"):
        publish.apply_owners(held(), [{"name": "carol"}], ALICE, NOW, people.get)
    with pytest.raises(BadRequest, match="at least one"):
        publish.apply_owners(held(), [], ALICE, NOW, people.get)
    tagged = publish.apply_dist_tag(held(), "beta", "1.0.0", ALICE, NOW)
    assert tagged is not None and tagged.dist_tags == {"beta": "1.0.0"}
    with pytest.raises(NotFound):
        publish.apply_dist_tag(held(), "beta", "3.0.0", ALICE, NOW)
    for tag in ("1.0.0", "v2", "x", "has space", ""):
        with pytest.raises(BadRequest):
            publish.validate_tag(tag)
    with pytest.raises(BadRequest, match="latest"):
        publish.apply_dist_tag_removal(held(dist_tags={"latest": "1.0.0"}), "latest", ALICE, NOW)


@pytest.mark.parametrize("kind", ["folder", "memory"])
def test_storage_creates_once_replaces_and_removes(kind: str, tmp_path: Path) -> None:
    storage = FolderStorage(tmp_path / "content") if kind == "folder" else MemoryStorage()
    key = archive_key("@scope/pkg", "1.0.0")
    assert key == "@scope/pkg/pkg-1.0.0.tgz" and meta_key("@scope/pkg") == "@scope/pkg/registry-meta.json"
    storage.create(key, b"one")
    with pytest.raises(VersionConflict):
        storage.create(key, b"two")
    assert storage.read(key) == b"one"
    write_meta(storage, meta_key("@scope/pkg"), PackageMeta(name="@scope/pkg", revision=3))
    stored = json.loads(storage.read(meta_key("@scope/pkg")) or b"{}")  # read independently of meta.py
    assert stored["name"] == "@scope/pkg" and stored["revision"] == 3
    round_trip = read_meta(storage, meta_key("@scope/pkg"))
    assert round_trip is not None and (round_trip.name, round_trip.revision) == ("@scope/pkg", 3)
    assert storage.remove(key) and not storage.remove(key) and storage.read(key) is None
    with pytest.raises(ValueError):
        storage.read("../outside")
    if kind == "folder":
        storage.remove(meta_key("@scope/pkg"))
        assert not (tmp_path / "content" / "@scope").exists()  # emptied folders go
        assert not list((tmp_path / "content").rglob(".*"))  # no temp files left behind


def test_a_new_name_follows_npms_rule_for_new_packages_but_a_held_legacy_name_takes_new_versions() -> None:
    upload = publish.decode_publish("LegacyName", publish_body("LegacyName", "1.1.0", tarball("LegacyName", "1.1.0")), Limits())
    fresh = PackageState("LegacyName", PackageMeta(name="LegacyName"), frozenset())
    with pytest.raises(InvalidName, match="lowercase"):
        publish.apply_publish(fresh, upload, ALICE, NOW)
    with pytest.raises(InvalidName, match="lowercase"):
        publish.apply_create(fresh, ALICE, NOW)
    held_legacy = PackageState("LegacyName", PackageMeta(name="LegacyName", maintainers=[{"name": "alice", "account": "acct-alice"}]), frozenset({"1.0.0"}))
    assert publish.apply_publish(held_legacy, upload, ALICE, NOW).time["1.1.0"] == NOW
