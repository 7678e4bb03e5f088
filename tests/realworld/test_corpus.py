"""Unit tests of the corpus fetcher's pure parts (synthetic lockfiles and bytes)."""

from __future__ import annotations

import base64
import hashlib
import json

from tests.realworld.corpus import LOCKFILE, Entry, batches, integrity_matches, lock_entries, lock_key


def sri(algorithm: str, data: bytes) -> str:
    return f"{algorithm}-" + base64.b64encode(hashlib.new(algorithm, data).digest()).decode()


def test_integrity_uses_the_strongest_hash_listed() -> None:
    data = b"tarball bytes"
    assert integrity_matches(data, sri("sha512", data))
    assert integrity_matches(data, f"{sri('sha1', b'other')} {sri('sha512', data)}")  # sha1 is ignored
    assert not integrity_matches(data, f"{sri('sha1', data)} {sri('sha512', b'other')}")
    assert not integrity_matches(data, "md5-abc")


def test_lock_entries_are_distinct_registry_tarballs() -> None:
    lock = {"packages": {
        "": {"name": "root"},
        "node_modules/a": {"version": "1.0.0", "integrity": "sha512-a"},
        "node_modules/b/node_modules/a": {"version": "1.0.0", "integrity": "sha512-a"},
        "node_modules/alias": {"name": "@s/real", "version": "2.0.0", "integrity": "sha512-r"},
        "node_modules/linked": {"resolved": "packages/linked", "link": True},
        "node_modules/b": {"version": "1.0.0", "integrity": "sha512-b"},
        "node_modules/b/node_modules/inside": {"version": "1.0.0", "inBundle": True},
        "node_modules/stale": {"version": "1.0.0", "integrity": "sha512-s", "extraneous": True},
    }}  # fmt: skip
    assert [e.spec for e in lock_entries(lock)] == ["@s/real@2.0.0", "a@1.0.0", "b@1.0.0"]


def test_batches_never_put_two_equal_pack_file_names_together() -> None:
    scoped, plain = Entry("@babel/core", "7.0.0", ""), Entry("babel-core", "7.0.0", "")
    assert scoped.filename == plain.filename  # npm pack names both babel-core-7.0.0.tgz
    groups = batches([scoped, plain, Entry("c", "1.0.0", "")], size=40)
    assert all(len({e.filename for e in group}) == len(group) for group in groups)
    assert sorted(e.spec for group in groups for e in group) == ["@babel/core@7.0.0", "babel-core@7.0.0", "c@1.0.0"]
    assert [len(g) for g in batches([Entry(f"p{i}", "1.0.0", "") for i in range(5)], size=2)] == [2, 2, 1]


def test_the_committed_lockfile_names_no_registry_and_keys_its_cache() -> None:
    """`--omit-lockfile-registry-resolved`: no registry host is committed; npm ci asks the one configured."""
    packages = json.loads(LOCKFILE.read_text())["packages"]
    assert [path for path, record in packages.items() if "resolved" in record] == []
    assert len(lock_key(LOCKFILE.read_bytes())) == 16 and lock_key(b"x") != lock_key(b"y")
