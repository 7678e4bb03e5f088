"""Package documents: every field npm, pnpm and yarn read, as a pure function of releases and meta."""

from __future__ import annotations

import json
from typing import Any

from registry_gen.manifest import validate_manifest
from registry_gen.meta import PackageMeta
from registry_gen.packument import Release, abbreviate, all_index, build_packument, dumps, search_object, summarize

BASE = "https://registry.example.org/npm/"


def _release(version: str, time: str, **fields: Any) -> Release:
    manifest = validate_manifest({"name": fields.pop("name", "demo-pkg"), "version": version, **fields})
    return Release(
        version=version,
        manifest=manifest,
        shasum=f"sha1-of-{version}",
        integrity=f"sha512-of-{version}",
        size=100,
        file_count=3,
        unpacked_size=1234,
        time=time,
    )


RICH = {
    "description": "A demo package",
    "keywords": ["demo", "test"],
    "license": "MIT",
    "repository": {"type": "git", "url": "https://example.org/demo.git"},
    "homepage": "https://example.org/demo",
    "bugs": {"url": "https://example.org/demo/issues"},
    "author": "Ada Lovelace <ada@example.org> (https://example.org/ada)",
    "os": ["macos", "windows", "linux"],
    "cpu": ["x86_64", "x86"],
    "scripts": {"install": "node install.js"},
}


def _packument(releases: list[Release], meta: PackageMeta | None = None, name: str = "demo-pkg") -> dict[str, Any]:
    return build_packument(
        name, releases, meta or PackageMeta(name=name), base_url=BASE, readme="# demo", readme_filename="README.md"
    )


def test_full_packument_fields() -> None:
    releases = [
        _release("1.0.0", "2020-01-01T00:00:00.000Z", description="old one"),
        _release("1.1.0", "2020-02-01T00:00:00.000Z", **RICH),
        _release("2.0.0-beta.1", "2020-03-01T00:00:00.000Z", description="beta"),
    ]
    doc = _packument(releases)
    assert doc["_id"] == doc["name"] == "demo-pkg"
    # Top-level fields come from `latest` (1.1.0), not from the newest upload (the beta).
    assert doc["description"] == "A demo package"
    assert doc["keywords"] == ["demo", "test"]
    assert doc["license"] == "MIT"
    assert doc["repository"] == RICH["repository"]
    assert doc["homepage"] == RICH["homepage"]
    assert doc["bugs"] == RICH["bugs"]
    assert doc["dist-tags"] == {"latest": "1.1.0"}
    assert list(doc["versions"]) == ["1.0.0", "1.1.0", "2.0.0-beta.1"]
    assert doc["readme"] == "# demo" and doc["readmeFilename"] == "README.md"
    assert doc["maintainers"] == [{"name": "Ada Lovelace", "email": "ada@example.org"}]  # from author
    assert doc["time"] == {
        "created": "2020-01-01T00:00:00.000Z",
        "modified": "2020-03-01T00:00:00.000Z",
        "1.0.0": "2020-01-01T00:00:00.000Z",
        "1.1.0": "2020-02-01T00:00:00.000Z",
        "2.0.0-beta.1": "2020-03-01T00:00:00.000Z",
    }
    assert doc["modified"] == "2020-03-01T00:00:00.000Z"
    assert doc["_rev"].startswith("3-")


def test_version_documents() -> None:
    doc = _packument([_release("1.1.0", "2020-02-01T00:00:00.000Z", **RICH)])
    version = doc["versions"]["1.1.0"]
    assert version["_id"] == "demo-pkg@1.1.0"
    assert version["name"] == "demo-pkg" and version["version"] == "1.1.0"
    assert version["dist"] == {
        "tarball": BASE + "demo-pkg/-/demo-pkg-1.1.0.tgz",
        "shasum": "sha1-of-1.1.0",
        "integrity": "sha512-of-1.1.0",
        "fileCount": 3,
        "unpackedSize": 1234,
    }
    assert version["os"] == ["darwin", "win32", "linux"]
    assert version["cpu"] == ["x64", "ia32"]
    assert version["hasInstallScript"] is True
    assert version["_hasShrinkwrap"] is False


def test_scoped_tarball_url_is_absolute_under_base_url() -> None:
    doc = _packument([_release("1.0.0", "2020-01-01T00:00:00.000Z", name="@demo/strings")], name="@demo/strings")
    assert doc["versions"]["1.0.0"]["dist"]["tarball"] == BASE + "@demo/strings/-/strings-1.0.0.tgz"
    assert doc["versions"]["1.0.0"]["_id"] == "@demo/strings@1.0.0"


def test_meta_overrides_tags_maintainers_times_and_deprecations() -> None:
    meta = PackageMeta(
        name="demo-pkg",
        dist_tags={"latest": "1.0.0", "next": "2.0.0-beta.1", "gone": "9.9.9"},
        maintainers=[{"name": "owner", "email": "owner@example.org"}],
        deprecated={"1.0.0": "use 1.1.0"},
        unpublished={"0.9.0": "2019-06-01T00:00:00.000Z"},
        created="2019-01-01T00:00:00.000Z",
    )
    releases = [
        _release("1.0.0", "2020-01-01T00:00:00.000Z", maintainers=[{"name": "ignored"}]),
        _release("1.1.0", "2020-02-01T00:00:00.000Z"),
        _release("2.0.0-beta.1", "2020-03-01T00:00:00.000Z"),
    ]
    doc = _packument(releases, meta)
    assert doc["dist-tags"] == {"latest": "1.0.0", "next": "2.0.0-beta.1"}
    assert doc["maintainers"] == [{"name": "owner", "email": "owner@example.org"}]
    assert doc["versions"]["1.0.0"]["deprecated"] == "use 1.1.0"
    assert "deprecated" not in doc["versions"]["1.1.0"]
    assert doc["time"]["created"] == "2019-01-01T00:00:00.000Z"
    assert doc["time"]["0.9.0"] == "2019-06-01T00:00:00.000Z"  # an unpublished number keeps its time
    assert "0.9.0" not in doc["versions"]


def test_maintainers_from_the_manifest_when_meta_has_none() -> None:
    doc = _packument(
        [
            _release(
                "1.0.0",
                "2020-01-01T00:00:00.000Z",
                maintainers=[{"name": "m", "email": "m@example.org", "web": "x"}, "s <s@example.org>"],
            )
        ]
    )
    assert doc["maintainers"] == [{"name": "m", "email": "m@example.org"}, {"name": "s", "email": "s@example.org"}]


def test_the_document_is_a_pure_function_of_its_inputs() -> None:
    releases = [_release("1.0.0", "2020-01-01T00:00:00.000Z", **RICH), _release("1.2.0", "2020-05-01T00:00:00.000Z")]
    assert dumps(_packument(releases)) == dumps(_packument(list(reversed(releases))))


def test_abbreviated_document_keeps_install_fields_and_time() -> None:
    doc = _packument(
        [
            _release(
                "1.1.0", "2020-02-01T00:00:00.000Z", **RICH, dependencies={"demo-core": "^1.0.0"}, bin={"x": "bin/x"}
            )
        ]
    )
    short = abbreviate(doc)
    assert set(short) == {"name", "modified", "dist-tags", "versions", "time"}
    version = short["versions"]["1.1.0"]
    assert version["dependencies"] == {"demo-core": "^1.0.0"}
    assert version["bin"] == {"x": "bin/x"}
    assert version["dist"]["integrity"] == "sha512-of-1.1.0"
    assert version["hasInstallScript"] is True
    assert "description" not in version and "readme" not in short


def test_indexes_and_search() -> None:
    doc = _packument([_release("1.1.0", "2020-02-01T00:00:00.000Z", **RICH)])
    summary = summarize(doc)
    assert summary["version"] == "1.1.0" and summary["keywords"] == ["demo", "test"]
    index = all_index([summary])
    assert index["demo-pkg"]["dist-tags"] == {"latest": "1.1.0"}
    hit = search_object(summary, BASE)
    assert hit["package"]["name"] == "demo-pkg"
    assert hit["package"]["maintainers"] == [{"username": "Ada Lovelace", "email": "ada@example.org"}]
    assert hit["package"]["links"]["npm"] == BASE + "-/web/package/demo-pkg/index.html"


def test_dumps_is_compact_utf8_json() -> None:
    assert dumps({"a": "é", "b": [1]}) == '{"a":"é","b":[1]}'.encode()
    assert json.loads(dumps({"x": 1})) == {"x": 1}


def test_a_mirrored_documents_rev_hashes_the_same_bytes_as_before() -> None:
    """The record is serialised once and its `_rev` hashed in pieces: the same revision as the
    hash of the whole meta and versions (documents in existing trees keep their `_rev`), and it
    still moves with anything in the record."""
    import dataclasses
    import hashlib

    from registry_gen.mirror.record import MirrorRecord
    from registry_gen.packument import document_revision

    manifest = {"name": "m", "description": "<b>&é</b> ünïcode", "dist": {"integrity": "sha512-x", "tarball": "http://u/m.tgz"}}
    record = MirrorRecord("up", "http://u/", "2026-01-01T00:00:00.000Z", versions={"1.0.0": manifest, "2.0.0": manifest},
                          times={"1.0.0": "2025-01-01T00:00:00.000Z"}, held={"2.0.0": "too young"}, readme="# <m> & co")  # fmt: skip
    meta = PackageMeta(name="m", dist_tags={"next": "1.0.0"}, revision=0, mirror=record)
    whole = hashlib.blake2b(dumps([meta.to_json(), ["1.0.0"]]), digest_size=20).hexdigest()
    assert document_revision(meta, ["1.0.0"]) == f"1-{whole}"
    assert build_packument("m", [], meta, base_url="http://r/", readme=None, readme_filename=None)["_rev"] == f"1-{whole}"
    released = dataclasses.replace(meta, mirror=dataclasses.replace(record, held={}))
    assert document_revision(released, ["1.0.0"]) != document_revision(meta, ["1.0.0"])
    plain = PackageMeta(name="m", dist_tags={"latest": "1.0.0"})
    assert document_revision(plain, ["1.0.0"]) == "1-" + hashlib.blake2b(dumps([plain.to_json(), ["1.0.0"]]), digest_size=20).hexdigest()
