"""The build's sync skips listing a package's content folder when this instance's copy of it is
known equal to the bucket (issue 28, acceptance 2; registry_gen.state.ledger, "Folder tokens";
registry_gen.objectstore.ContentMirror). Two api instances as `registry-gen api` runs them (the
write service with content and tree in one moto bucket, separate work folders, one real
PostgreSQL), in one process; the requests counted are what each instance's boto3 clients send.
The failure a wrong skip would cause: a version another writer added, or one a rolled-back write
left in the work folder, rendered from the stale copy (a served version missing, or one served
that the bucket does not hold)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen import writes
from registry_gen.layout import PACKAGE_DOCUMENT
from registry_gen.objectstore import ObjectStore, open_object_store
from registry_gen.refresher import IndexRefresher
from registry_gen.settings import Settings
from registry_gen.state import open_state
from registry_gen.state.ledger import JournalEvent
from registry_gen.writes import WriteService
from tests.conftest import postgres_state_url
from tests.registry_api.test_publish_cost_bucket import BUCKET, Request, moto, recorded  # noqa: F401 - moto: the module's server
from tests.registry_api.test_publish_cost_postgres import ALICE, _upload
from tests.storage.s3servers import S3Server, s3_credentials
from tests.user_api.pg_server import PostgresServer

pytestmark = pytest.mark.slow

Instance = tuple[WriteService, ObjectStore]


def _instance(folder: Path, database_url: str, storage: str, endpoint: str) -> Instance:
    settings = Settings(
        content_dir=folder / "content", out_dir=folder / "public", data_dir=folder / "data", base_url="http://127.0.0.1:9/",
        database_url=database_url, index_refresh_seconds=3600, storage=storage, storage_endpoint_url=endpoint,
    )  # fmt: skip
    objects = open_object_store(settings)
    assert objects is not None
    objects.start(settings)
    return WriteService(settings, refresher=IndexRefresher(settings), objects=objects), objects


@pytest.fixture
def instances(tmp_path: Path, state_postgres: PostgresServer, moto: S3Server) -> Iterator[tuple[Instance, Instance]]:
    """Two instances, A and B: one database, one bucket, each its own work folder."""
    url, storage = postgres_state_url(state_postgres), f"s3://{BUCKET}/{tmp_path.name}"
    with s3_credentials():
        yield _instance(tmp_path / "a", url, storage, moto.endpoint), _instance(tmp_path / "b", url, storage, moto.endpoint)


def _listings(sent: list[Request]) -> list[str]:
    return [request.key for request in sent if request.operation == "ListObjectsV2"]


def _served(objects: ObjectStore, name: str) -> set[str]:
    """The versions of the package document readers get: the tree bucket's."""
    data = objects.tree.bucket.read(f"{name}/{PACKAGE_DOCUMENT}")
    assert data is not None
    return set(json.loads(data)["versions"])


def test_a_second_publish_of_a_package_on_one_instance_lists_nothing(instances: tuple[Instance, Instance]) -> None:
    (service, objects), _ = instances
    service.publish(_upload(service.settings, "skip-kit", "1.0.0"), ALICE)
    sent = recorded(objects)
    service.publish(_upload(service.settings, "skip-kit", "1.0.1"), ALICE)
    assert _listings(sent) == [], sent
    assert _served(objects, "skip-kit") == {"1.0.0", "1.0.1"}


def test_a_publish_after_another_instance_wrote_the_package_lists_it_and_serves_every_version(
    instances: tuple[Instance, Instance],
) -> None:
    (a, a_objects), (b, _) = instances
    a.publish(_upload(a.settings, "shared-kit", "1.0.0"), ALICE)
    a.publish(_upload(a.settings, "shared-kit", "1.0.1"), ALICE)  # A's copy known: no listing from here on
    b.publish(_upload(b.settings, "shared-kit", "1.0.2"), ALICE)
    sent = recorded(a_objects)
    a.publish(_upload(a.settings, "shared-kit", "1.0.3"), ALICE)
    assert [key for key in _listings(sent) if key.endswith("/shared-kit/")], sent  # B moved the token: A lists
    assert _served(a_objects, "shared-kit") == {"1.0.0", "1.0.1", "1.0.2", "1.0.3"}
    assert (a.settings.content_dir / "shared-kit" / "shared-kit-1.0.2.tgz").is_file()


def test_a_write_rolled_back_after_its_archive_put_leaves_the_next_publish_listing(
    instances: tuple[Instance, Instance], monkeypatch: pytest.MonkeyPatch
) -> None:
    (service, objects), _ = instances
    service.publish(_upload(service.settings, "undone-kit", "1.0.0"), ALICE)
    service.publish(_upload(service.settings, "undone-kit", "1.0.1"), ALICE)  # known: the next would not list

    def broken_build(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the build failed after the write's archive was stored")

    with monkeypatch.context() as patch:
        patch.setattr(writes, "build_locked", broken_build)
        with pytest.raises(RuntimeError):
            service.publish(_upload(service.settings, "undone-kit", "1.0.2"), ALICE)
    assert objects.content.read("undone-kit/undone-kit-1.0.2.tgz") is None  # rolled back in the bucket
    sent = recorded(objects)
    service.publish(_upload(service.settings, "undone-kit", "1.0.3"), ALICE)
    assert [key for key in _listings(sent) if key.endswith("/undone-kit/")], sent
    assert _served(objects, "undone-kit") == {"1.0.0", "1.0.1", "1.0.3"}  # not the rolled-back 1.0.2
    assert not (service.settings.content_dir / "undone-kit" / "undone-kit-1.0.2.tgz").exists()  # the copy equals the bucket


def test_a_writer_of_another_package_killed_after_a_writes_recovery_has_its_write_listed_by_the_builds_sync(
    instances: tuple[Instance, Instance], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writes killed-kit 1.0.2 and dies once it is stored (its write left pending, its lock
    gone), after B's publish of another package checked for pending writes before reading and
    before B's build syncs. B's sync must still see it: it lists killed-kit's folder (which B's
    copy knew at an older token) and the build resolves the write landed, so 1.0.2 is served."""
    (a, _), (b, b_objects) = instances
    b.publish(_upload(b.settings, "killed-kit", "1.0.0"), ALICE)  # B's copy of killed-kit known
    b.publish(_upload(b.settings, "living-kit", "1.0.0"), ALICE)
    sync, killed = b._sync_content, []

    def killed_in_between(touched: list[str], write_id: int | None = None) -> None:
        if write_id is not None and not killed:  # B's write's build, after its recovery check
            killed.append(write_id)
            with monkeypatch.context() as patch:  # A dies after storing: nothing undone, nothing finished
                patch.setattr(writes, "build_locked", _broken_build)
                for step in ("_roll_back", "_withdraw", "_abort"):
                    patch.setattr(a, step, lambda *args, **kwargs: None)
                with pytest.raises(RuntimeError):
                    a.publish(_upload(a.settings, "killed-kit", "1.0.2"), ALICE)
        sync(touched, write_id)

    monkeypatch.setattr(b, "_sync_content", killed_in_between)
    sent = recorded(b_objects)
    b.publish(_upload(b.settings, "living-kit", "1.0.1"), ALICE)
    assert killed and [key for key in _listings(sent) if key.endswith("/killed-kit/")], sent
    assert _served(b_objects, "killed-kit") == {"1.0.0", "1.0.2"}  # resolved landed, and built
    assert _served(b_objects, "living-kit") == {"1.0.0", "1.0.1"}
    with open_state(b.settings).journal() as journal:
        assert journal.pending_writes() == []


def _broken_build(*args: object, **kwargs: object) -> None:
    raise RuntimeError("the build failed after the write's archive was stored")


def test_the_pending_writes_and_folder_tokens_read_together_are_what_each_read_answers(
    state_postgres: PostgresServer, tmp_path: Path
) -> None:
    """PostgreSQL: one statement answers both (registry_gen.state.ledger, "Folder tokens"); a write
    whose writer holds its package's lock is live unless the caller holds it; ids in order."""
    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data",
                        database_url=postgres_state_url(state_postgres))  # fmt: skip
    folders = {"live/", "dead/", "never/"}
    with open_state(settings).journal() as journal:
        live = journal.begin_write({"live/registry-meta.json": "0" * 64}, [JournalEvent("package:change", "live")], "bob", None, "t")
        dead = journal.begin_write({"dead/registry-meta.json": "1" * 64}, [JournalEvent("package:change", "dead")], "bob", None, "t")
        journal.move_all_tokens()
        with open_state(settings).write_lock(settings.lock_file).package("live", 5):
            pending, tokens = journal.pending_and_tokens((), folders)
            assert [w.id for w in pending] == [dead] and pending == journal.pending_writes()
            assert tokens == {"live/": (1, 1), "dead/": (1, 1), "never/": (1, 0)} == journal.content_tokens(folders)
            pending, tokens = journal.pending_and_tokens({"live"}, ())
            assert [w.id for w in pending] == [live, dead] and tokens == {}
            assert pending[1].files == {"dead/registry-meta.json": "1" * 64}


def test_the_embedded_ledger_answers_the_pending_writes_and_no_token(tmp_path: Path) -> None:
    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data")
    with open_state(settings).journal() as journal:
        write_id = journal.begin_write({"a/registry-meta.json": None}, [JournalEvent("package:change", "a")], "bob", None, "t")
        pending, tokens = journal.pending_and_tokens((), {"a/"})
        assert [w.id for w in pending] == [write_id] and tokens == {}


def test_a_file_put_into_the_bucket_by_hand_is_taken_in_after_any_instance_restarts(
    instances: tuple[Instance, Instance],
) -> None:
    (a, a_objects), (b, _) = instances
    a.publish(_upload(a.settings, "by-hand-kit", "1.0.0"), ALICE)
    a.publish(_upload(a.settings, "by-hand-kit", "1.0.1"), ALICE)
    a_objects.content.create("by-hand-kit/by-hand-kit-1.0.5.tgz", _upload(a.settings, "by-hand-kit", "1.0.5").data)
    b.objects.start(b.settings)  # type: ignore[union-attr] - a restart of B (docs/deploying/object-store.md)
    sent = recorded(a_objects)
    a.publish(_upload(a.settings, "by-hand-kit", "1.0.2"), ALICE)
    assert [key for key in _listings(sent) if key.endswith("/by-hand-kit/")], sent
    assert _served(a_objects, "by-hand-kit") == {"1.0.0", "1.0.1", "1.0.2", "1.0.5"}


def test_folder_tokens_move_with_each_write_naming_the_folder_and_all_at_once(state_postgres: PostgresServer, tmp_path: Path) -> None:
    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data",
                        database_url=postgres_state_url(state_postgres))  # fmt: skip
    with open_state(settings).journal() as journal:
        assert journal.content_tokens({"a/", "@s/b/"}) == {"a/": (0, 0), "@s/b/": (0, 0)}
        event = [JournalEvent("package:publish", "a", ("1.0.0",))]
        journal.begin_write({"a/registry-meta.json": None, "a/a-1.0.0.tgz": None}, event, "alice", None, "2026-11-29T00:00:00Z")
        assert journal.content_tokens({"a/", "@s/b/"}) == {"a/": (0, 1), "@s/b/": (0, 0)}  # once per write, not per key
        journal.move_all_tokens()
        assert journal.content_tokens({"a/", "@s/b/"}) == {"a/": (1, 1), "@s/b/": (1, 0)}
