"""The content store's contract, the same tests for every implementation: a folder, memory, and
S3Storage on moto, SeaweedFS and s3rver (real processes on loopback, tests/storage/s3servers.py)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from registry_gen.errors import VersionConflict
from registry_gen.storage import ContentStorage, archive_key, meta_key
from tests.storage.conftest import Stores

pytestmark = pytest.mark.slow

# What npm names and versions make of keys: a scope, build metadata ('+', which a URL may turn
# into a space), capitals and punctuation of legacy names, a deep folder.
KEYS = [
    archive_key("@acme/widget", "1.0.0-beta.1+build.5"),
    meta_key("@acme/widget"),
    archive_key("Legacy_Name.js", "2.0.0"),
    archive_key("tilde~and!bang", "0.0.1"),
    "dropped/by/hand/some archive (copy).tgz",
]


def test_create_read_replace_remove(store: ContentStorage) -> None:
    key = archive_key("left-pad", "1.0.0")
    assert not store.exists(key) and store.read(key) is None and store.remove(key) is False
    store.create(key, b"first bytes")
    assert store.exists(key) and store.read(key) == b"first bytes"
    store.replace(key, b"second, longer bytes")
    assert store.read(key) == b"second, longer bytes"
    assert store.remove(key) is True
    assert not store.exists(key) and store.read(key) is None and store.remove(key) is False


def test_create_never_overwrites(store: ContentStorage) -> None:
    key = archive_key("left-pad", "1.0.0")
    store.create(key, b"published bytes")
    for other in (b"other bytes", b"published bytes"):
        with pytest.raises(VersionConflict):
            store.create(key, other)
    assert store.read(key) == b"published bytes"


@pytest.mark.parametrize("key", KEYS)
def test_keys_of_real_names_round_trip(store: ContentStorage, key: str) -> None:
    store.create(key, key.encode())
    assert store.read(key) == key.encode()
    listed = list(store.list(key.rsplit("/", 1)[0] + "/"))
    assert [item.key for item in listed] == [key]
    assert store.remove(key) is True and store.read(key) is None


@pytest.mark.parametrize("key", ["../escape.tgz", "/absolute.tgz", "a//b.tgz", "a/./b.tgz", ".hidden/x.tgz", "a/.tmp", "a/", ""])
def test_keys_that_could_leave_the_root_or_name_a_store_file_are_refused(store: ContentStorage, key: str) -> None:
    for call in (lambda: store.create(key, b"x"), lambda: store.replace(key, b"x"), lambda: store.read(key)):
        with pytest.raises(ValueError):
            call()


def test_list_is_sorted_filtered_by_prefix_and_carries_change_tokens(store: ContentStorage) -> None:
    keys = ["@acme/widget/registry-meta.json", "@acme/widget/widget-1.0.0.tgz", "@acme-other/x/x-1.0.0.tgz",
            "a-b/a-b-1.0.0.tgz", "a/a-1.0.0.tgz", "zeta/zeta-1.0.0.tgz"]  # fmt: skip
    for key in keys:
        store.create(key, key.encode() * 3)
    everything = list(store.list())
    assert sorted(item.key for item in everything) == sorted(keys)  # each once (SeaweedFS lists folder by folder)
    assert all(item.size == len(item.key.encode()) * 3 for item in everything)
    assert sorted(item.key for item in store.list("@acme/")) == keys[:2]
    assert sorted(item.key for item in store.list("@acme")) == sorted(keys[:3])
    assert [item.key for item in store.list("@acme/widget/widget-")] == [keys[1]]
    assert list(store.list("nothing/")) == []
    before = {item.key: item.token for item in everything}
    store.replace(keys[0], b"changed bytes")
    after = {item.key: item.token for item in store.list()}
    assert after[keys[0]] != before[keys[0]]
    assert {k: v for k, v in after.items() if k != keys[0]} == {k: v for k, v in before.items() if k != keys[0]}


def test_open_streams_and_spool_copies_to_a_local_file(store: ContentStorage, tmp_path: Path) -> None:
    key = archive_key("@acme/widget", "1.0.0")
    data = os.urandom(300_000)
    store.create(key, data)
    stream = store.open(key)
    assert stream is not None
    with stream:
        assert stream.read(1000) == data[:1000]
        assert stream.read() == data[1000:]
    target = tmp_path / "spool" / "widget.tgz"
    assert store.spool(key, target) is True and target.read_bytes() == data
    assert store.open("missing/x.tgz") is None and store.spool("missing/x.tgz", tmp_path / "no.tgz") is False
    assert not (tmp_path / "no.tgz").exists()
    assert [p.name for p in target.parent.iterdir()] == ["widget.tgz"]  # no temp file left beside it


def test_big_objects_are_written_and_read_as_streams(store: ContentStorage, tmp_path: Path) -> None:
    """24 MiB (the archive cap is 200 MiB): written in one conditional PUT, read back in blocks."""
    key = archive_key("big-package", "1.0.0")
    data = os.urandom(1 << 20) * 24
    store.create(key, data)
    with pytest.raises(VersionConflict):
        store.create(key, data[:-1] + b"!")
    [listed] = list(store.list("big-package/"))
    assert listed.size == len(data)
    target = tmp_path / "big.tgz"
    assert store.spool(key, target)
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(data).digest()
    stream = store.open(key)
    assert stream is not None
    digest = hashlib.sha256()
    with stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    assert digest.digest() == hashlib.sha256(data).digest()


def test_racing_creates_of_one_key_have_one_winner_where_the_store_can_tell(stores: Stores) -> None:
    """Two writers (each with its own client, as two machines) create the same keys at once. Where
    create is atomic exactly one wins each key and the bytes are its; where the store ignores
    If-None-Match (s3rver) the stored bytes are still one writer's, whole."""
    writers = [stores.open(), stores.open()]
    keys = [archive_key(f"race-{n}", "1.0.0") for n in range(12)]
    wins: dict[str, list[int]] = {key: [] for key in keys}
    start = threading.Barrier(2)

    def write(index: int) -> None:
        for key in keys:
            start.wait(timeout=30)
            try:
                writers[index].create(key, f"writer {index} ".encode() * 4096)
                wins[key].append(index)
            except VersionConflict:
                pass

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    for key in keys:
        stored = writers[0].read(key)
        assert stored in (b"writer 0 " * 4096, b"writer 1 " * 4096)
        if writers[0].atomic_create:
            assert len(wins[key]) == 1, (key, wins[key])
            assert stored == f"writer {wins[key][0]} ".encode() * 4096
        else:
            assert wins[key], key


def test_atomic_create_says_what_the_store_does(stores: Stores) -> None:
    expected = stores.server.conditional_writes if stores.server else True
    assert stores.first.atomic_create is expected
    # The probe left nothing behind that a listing would show as content.
    assert list(stores.first.list()) == []
