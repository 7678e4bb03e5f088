"""registry-meta.json: parsing names every bad field; dumping round-trips."""

from __future__ import annotations

import json

import pytest

from registry_gen.errors import InvalidManifest
from registry_gen.meta import PackageMeta, dump_meta, parse_meta


def test_round_trip() -> None:
    meta = PackageMeta(
        name="@demo/strings",
        dist_tags={"latest": "1.0.0", "next": "2.0.0-rc.1"},
        maintainers=[{"name": "demo", "email": "demo@example.org"}],
        deprecated={"0.9.0": "too old"},
        time={"1.0.0": "2021-01-01T00:00:00.000Z"},
        unpublished={"0.8.0": "2020-01-01T00:00:00.000Z"},
        pending={"3.0.0": {"name": "@demo/strings", "version": "3.0.0"}},
        created="2019-01-01T00:00:00.000Z",
        modified="2021-01-01T00:00:00.000Z",
        revision=7,
    )
    assert parse_meta(dump_meta(meta)) == meta


def test_minimal_meta() -> None:
    assert parse_meta(b'{"name": "demo-core"}') == PackageMeta(name="demo-core")


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        (b"{not json", {"(root)"}),
        (b"[1, 2]", {"(root)"}),
        (b"\xff\xfe", {"(root)"}),
        (json.dumps({"name": "Bad Name"}).encode(), {"name"}),
        (json.dumps({}).encode(), {"name"}),
        (
            json.dumps(
                {
                    "name": "x",
                    "dist-tags": {"latest": 1},
                    "maintainers": "me",
                    "time": [],
                    "pending": [],
                    "revision": "2",
                }
            ).encode(),
            {"dist-tags", "maintainers", "time", "pending", "revision"},
        ),
    ],
)
def test_bad_meta_names_each_field(body: bytes, fields: set[str]) -> None:
    with pytest.raises(InvalidManifest) as caught:
        parse_meta(body)
    assert {p.field for p in caught.value.problems} == fields


def test_the_same_meta_bytes_are_parsed_once_and_changed_bytes_again() -> None:
    """A mirrored package's meta is read for each tarball landed and by the build: the same bytes
    give the same meta without parsing again; other bytes (a write in between) are parsed anew, and
    a bad file is refused every time."""
    record = {"uplink": "up", "url": "http://u/", "refreshed": "2026-01-01T00:00:00.000Z", "versions": {"1.0.0": {"name": "m"}}}
    raw = json.dumps({"name": "m", "mirror": record}).encode()
    first = parse_meta(raw)
    assert parse_meta(bytes(raw)) is first
    changed = parse_meta(json.dumps({"name": "m", "mirror": {**record, "refreshed": "2026-02-01T00:00:00.000Z"}}).encode())
    assert changed is not first and changed.mirror is not None and changed.mirror.refreshed.startswith("2026-02")
    assert parse_meta(dump_meta(changed)) == changed
    for _ in range(2):
        with pytest.raises(InvalidManifest):
            parse_meta(json.dumps({"name": "m", "revision": "x"}).encode())
