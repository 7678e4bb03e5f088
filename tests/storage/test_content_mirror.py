"""The work folder's copy of a content bucket (registry_gen.objectstore.ContentMirror), on each real
S3 server: two instances' folders get the same files with the same stat (so the shared state sees
no phantom change), a rewrite within the same second with the same size is still seen, the bucket's
listing decides what is gone, and the tree's folder inside the content prefix is never content."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from registry_gen.objectstore import ContentMirror, object_mtime_ns, package_folders
from registry_gen.storage import S3Location, StoredObject
from tests.storage.conftest import BUCKET, S3_KINDS, Servers, s3_store

pytestmark = pytest.mark.slow


def stats(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("kind", S3_KINDS)
def test_work_folders_synced_from_one_bucket_agree_and_follow_its_listing(kind: str, s3_servers: Servers, tmp_path: Path) -> None:
    server = s3_servers.get(kind)
    bucket = s3_store(server.endpoint, S3Location(BUCKET, f"m{secrets.token_hex(6)}/content"))
    bucket.replace("pkg/registry-meta.json", b'{"v": 1}')
    bucket.create("pkg/pkg-1.0.0.tgz", b"tarball bytes")
    bucket.replace("@scope/other/registry-meta.json", b"{}")
    bucket.replace("_tree/pkg", b"a built document, not content")
    first, second = ContentMirror(bucket, tmp_path / "a", "_tree/"), ContentMirror(bucket, tmp_path / "b", "_tree/")

    assert first.sync() == 3 and second.sync() == 3
    assert stats(tmp_path / "a") == stats(tmp_path / "b")
    assert sorted(stats(tmp_path / "a")) == ["@scope/other/registry-meta.json", "pkg/pkg-1.0.0.tgz", "pkg/registry-meta.json"]
    assert first.sync() == 0  # nothing changed: nothing fetched

    before = stats(tmp_path / "a")["pkg/registry-meta.json"]
    bucket.replace("pkg/registry-meta.json", b'{"v": 2}')  # same size, most likely the same second
    assert first.sync_packages(["pkg/registry-meta.json"]) == 1
    assert (tmp_path / "a/pkg/registry-meta.json").read_bytes() == b'{"v": 2}'
    assert stats(tmp_path / "a")["pkg/registry-meta.json"] != before

    bucket.remove("pkg/pkg-1.0.0.tgz")
    (tmp_path / "a/@scope/other/stray.tgz").write_bytes(b"only on this disk")
    assert first.sync_packages(["pkg/registry-meta.json"]) == 1  # the bucket's listing: the archive is gone
    assert not (tmp_path / "a/pkg/pkg-1.0.0.tgz").exists()
    assert (tmp_path / "a/@scope/other/stray.tgz").exists()  # another package's folder is left to its own sync
    assert first.sync() == 1 and not (tmp_path / "a/@scope/other/stray.tgz").exists()


def test_a_synced_copy_gets_a_stat_from_its_object_alone() -> None:
    one = StoredObject("pkg/registry-meta.json", 8, "8-aaaa", 1_700_000_000.9)
    other = StoredObject("pkg/registry-meta.json", 8, "8-bbbb", 1_700_000_000.2)
    assert object_mtime_ns(one) == object_mtime_ns(StoredObject(one.key, 8, "8-aaaa", 1_700_000_000.9))
    assert object_mtime_ns(one) // 1_000_000_000 == object_mtime_ns(other) // 1_000_000_000 == 1_700_000_000
    assert object_mtime_ns(one) != object_mtime_ns(other)
    assert package_folders(["foo/registry-meta.json", "@s/foo/foo-1.0.0.tgz", "foo/foo-1.0.0.tgz"]) == {"foo/", "@s/foo/"}


@pytest.mark.parametrize("kind", S3_KINDS)
def test_a_file_adopted_after_storing_it_is_not_read_back_unless_the_bucket_holds_other_bytes(
    kind: str, s3_servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a write stored in the bucket and adopted into its work folder costs the next sync no
    GET (the listing's ETag is the MD5 of the same bytes), and ends with the stat any other
    instance's sync gives it; an adopted copy whose bytes the bucket no longer holds is read again."""
    server = s3_servers.get(kind)
    bucket = s3_store(server.endpoint, S3Location(BUCKET, f"m{secrets.token_hex(6)}/content"))
    writer, reader = ContentMirror(bucket, tmp_path / "writer"), ContentMirror(bucket, tmp_path / "reader")
    fetched: list[str] = []
    spool = bucket.spool
    monkeypatch.setattr(bucket, "spool", lambda key, target: fetched.append(key) or spool(key, target))

    bucket.create("pkg/pkg-1.0.0.tgz", b"tarball bytes")
    writer.adopt("pkg/pkg-1.0.0.tgz", b"tarball bytes")
    # Adopted with the stat a sync gives it (this clock's second for LastModified): nothing to do,
    # or only its stat set when the PUT straddled a second...
    assert writer.sync_packages(["pkg/pkg-1.0.0.tgz"]) <= 1
    assert fetched == []  # ...without reading it back
    assert reader.sync() == 1 and fetched == ["pkg/pkg-1.0.0.tgz"]
    assert stats(tmp_path / "writer") == stats(tmp_path / "reader")

    bucket.replace("pkg/registry-meta.json", b'{"v": 2}')  # another writer's bytes won
    writer.adopt("pkg/registry-meta.json", b'{"v": 1}')
    assert writer.sync_packages(["pkg/registry-meta.json"]) == 1
    assert fetched[-1] == "pkg/registry-meta.json"
    assert (tmp_path / "writer/pkg/registry-meta.json").read_bytes() == b'{"v": 2}'
