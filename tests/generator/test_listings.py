"""The documents that list packages: a change rewrites O(1) of them (issue 15, goal 3).

The front page, the package's name range (`-/web/browse/<key>/`) and its search shards
(`-/web/search/<key>.json`) are written in the package's own build; `-/all` and `-/search.json`,
which list every package under one URL, are left to an IndexRefresher by the long-running writers.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from registry_gen import site
from registry_gen.build import read
from registry_gen.build import PathLog, run_build
from registry_gen.state.sqlite_cache import BuildState
from registry_gen.state.sqlite_schema import SCHEMA_VERSION
from registry_gen.state.sqlite_manifests import CACHE_FILE
from registry_gen.errors import ConfigError
from registry_gen.publish import Actor
from registry_gen.refresher import IndexRefresher
from registry_gen.search import search_registry
from registry_gen.state import open_state
from registry_gen.settings import Settings, load_settings
from registry_gen.verify import verify_tree
from registry_gen.writes import WriteService
from tests.support import make_tarball

NAMES = ["alpha", "alpine-tools", "beta", "@scope/gamma", "delta-kit"]


def _registry(settings: Settings) -> None:
    for name in NAMES:
        make_tarball(settings.content_dir, name, "1.0.0", keywords=["shared-word"])
    assert not run_build(settings).errors


def _names(settings: Settings, relative: str) -> list[str]:
    return [p["name"] for p in json.loads((settings.out_dir / relative).read_bytes())["packages"]]


def test_one_new_package_rewrites_its_own_range_and_shards_and_the_front_page_only(settings: Settings) -> None:
    _registry(settings)
    archive = make_tarball(settings.content_dir, "alps", "1.0.0", keywords=["mountain"])
    result = run_build(settings, changed=[archive])
    listings = {path for path in result.written if not path.startswith(("alps/", "-/package/alps/", "-/web/package/alps/"))}
    shards = {site.search_shard_path(key) for key in ("al", "mo", "tes", "pac")}  # its description: "alps test package"
    expected = {"-/web/index.html", f"{site.browse_folder('al')}/index.html", *shards, *(s + ".gz" for s in shards)}
    assert listings - {"-/all/index.html", "-/all/index.html.gz", "-/search.json", "-/search.json.gz"} == expected
    assert _names(settings, site.search_shard_path("al")) == ["alpha", "alpine-tools", "alps"]
    assert _names(settings, site.search_shard_path("mo")) == ["alps"]
    assert "alps" not in _names(settings, site.search_shard_path("sh"))  # not a word of its


def test_a_range_and_a_shard_that_empty_are_removed(settings: Settings) -> None:
    _registry(settings)
    (settings.content_dir / "delta-kit-1.0.0.tgz").unlink()
    result = run_build(settings)
    assert site.browse_page_path("de") in result.removed  # its file, which a bucket removes and a cache purges by name
    assert not (settings.out_dir / site.browse_folder("de")).exists()
    assert not (settings.out_dir / site.search_shard_path("ki")).exists()
    assert "delta-kit" not in (settings.out_dir / "-/web/index.html").read_text()
    assert (settings.out_dir / site.browse_folder("al")).is_dir()


def test_the_write_service_leaves_the_whole_documents_to_its_refresher(settings: Settings) -> None:
    settings = settings.with_updates(index_refresh_seconds=3600)  # never due by itself in this test
    _registry(settings)
    refresher = IndexRefresher(settings)
    service = WriteService(settings, refresher=refresher)
    service.land_archive("fresh-one", make_tarball(settings.out_dir.parent / "up", "fresh-one", "1.0.0").read_bytes(), Actor("admin"))
    everything = json.loads((settings.out_dir / "-/all/index.html").read_bytes())
    assert "fresh-one" not in everything  # deferred...
    assert "fresh-one" in _names(settings, site.search_shard_path("fr"))  # ...but the site search has it
    found = search_registry(open_state(settings), "fresh", size=20, offset=0, listed_only=True)
    assert [o["package"]["name"] for o in found["objects"]] == ["fresh-one"]  # and so does the API's
    refresher.flush()
    assert refresher.refreshes == 1
    assert "fresh-one" in json.loads((settings.out_dir / "-/all/index.html").read_bytes())
    assert "fresh-one" in (settings.out_dir / "-/search.json").read_text()


def test_a_deferred_rewrite_is_done_by_the_next_plain_build(settings: Settings) -> None:
    """A server that stops before its refresher runs leaves the mark; any CLI build honours it."""
    _registry(settings)
    archive = make_tarball(settings.content_dir, "zz-late", "1.0.0")
    run_build(settings, changed=[archive], defer_whole=True)
    assert "zz-late" not in (settings.out_dir / "-/all/index.html").read_text()
    report = verify_tree(settings.out_dir)  # a pending refresh is a note, not a broken tree
    assert report.problems == [] and [n.rule for n in report.notes] == ["index-refresh-pending"]
    result = run_build(settings)
    assert "-/all/index.html" in result.written and "zz-late" in (settings.out_dir / "-/all/index.html").read_text()
    assert "-/all/index.html" not in run_build(settings).written  # and the mark is gone
    assert verify_tree(settings.out_dir).notes == []


def test_a_schema_5_state_is_migrated_in_place_and_rebuilt_once(settings: Settings) -> None:
    _registry(settings)
    with sqlite3.connect(settings.state_file) as db:
        db.execute("DROP TABLE search_keys")
        db.execute("DROP TABLE prefixes")
        db.execute("DROP TABLE counters")
        db.execute("DROP TABLE listings")
        for column in ("listed", "search_text"):  # (schema 10 has no modified and range_key columns there)
            db.execute(f"ALTER TABLE packages DROP COLUMN {column}")
        db.execute("PRAGMA user_version=5")
    with sqlite3.connect(settings.state_folder / "ledger.sqlite3") as db:
        live = db.execute("SELECT COUNT(*) FROM pins").fetchone()[0]
    result = run_build(settings)
    assert not result.errors and result.packages == len(NAMES) and result.versions == len(NAMES)
    assert sorted(result.rebuilt_packages) == sorted(NAMES)  # the full build that fills the new columns
    with sqlite3.connect(settings.state_file) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with sqlite3.connect(settings.state_folder / "ledger.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM pins").fetchone()[0] == live == len(NAMES)  # pinned versions kept
    assert _names(settings, site.search_shard_path("sc")) == ["@scope/gamma"]


def test_totals_follow_adds_and_removals(settings: Settings) -> None:
    _registry(settings)
    make_tarball(settings.content_dir, "alpha", "1.1.0")
    assert (run_build(settings).versions, run_build(settings).packages) == (len(NAMES) + 1, len(NAMES))
    (settings.content_dir / "beta-1.0.0.tgz").unlink()
    result = run_build(settings)
    assert (result.packages, result.versions) == (len(NAMES) - 1, len(NAMES))


@pytest.mark.parametrize("value", ["soon", -1, 4000, True])
def test_a_bad_refresh_delay_is_one_line_naming_the_key(tmp_path: Path, value: object) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text(f"index_refresh_seconds: {json.dumps(value)}\n")
    with pytest.raises(ConfigError, match="index_refresh_seconds"):
        load_settings(config)


def test_a_shard_is_the_same_bytes_as_dumping_its_records(settings: Settings) -> None:
    """Shards are joined from records serialised when each package changed (no parse per write)."""
    make_tarball(settings.content_dir, "shard-unicode", "1.0.0", keywords=["grüße"], description="Grüße <b>&</b> \u2028 ✓")
    _registry(settings)
    data = (settings.out_dir / site.search_shard_path("sh")).read_bytes()
    packages = json.loads(data)["packages"]
    assert [p["name"] for p in packages] == sorted(p["name"] for p in packages) and len(packages) == len(NAMES) + 1
    assert data == json.dumps({"packages": packages}, ensure_ascii=False, separators=(",", ":")).encode()


def test_a_failed_refresh_is_one_warning_and_leaves_the_mark(settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    _registry(settings)
    archive = make_tarball(settings.content_dir, "zz-owed", "1.0.0")
    run_build(settings, changed=[archive], defer_whole=True)
    refresher = IndexRefresher(settings.with_updates(content_dir=settings.content_dir / "gone"))
    refresher.schedule()
    refresher.flush()
    assert refresher.refreshes == 0
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"could not rewrite -/all and -/search.json (the next write or build retries): content folder {settings.content_dir / 'gone'} "
        f"does not exist; nothing in {settings.out_dir} was changed (check the path, or create the folder first)"
    ]
    assert "zz-owed" not in (settings.out_dir / "-/all/index.html").read_text()  # the mark stays...
    run_build(settings)
    assert "zz-owed" in (settings.out_dir / "-/all/index.html").read_text()  # ...for the next build


def test_a_build_counts_every_file_it_writes_but_names_a_bounded_number(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first build of a million versions must not hold millions of path strings."""
    monkeypatch.setattr(PathLog, "KEPT", 10)
    for name in NAMES:
        make_tarball(settings.content_dir, name, "1.0.0")
    result = run_build(settings)
    assert len(result.written) == 10 and result.written.total > 40  # type: ignore[attr-defined]
    assert f"{result.written.total} files written" in result.summary()  # type: ignore[attr-defined]
    log = pickle.loads(pickle.dumps(result.written))  # worker outcomes cross processes
    assert (log, log.total) == (result.written, result.written.total)  # type: ignore[attr-defined]


# ---------------------------------------------------------------- search shards cut into leaves


def _shard_names(settings: Settings, key: str) -> list[list[str]]:
    """The names of shard `key`, leaf by leaf (one list when the shard is a single file)."""
    data = json.loads((settings.out_dir / site.search_shard_path(key)).read_bytes())
    if "packages" in data:
        return [[p["name"] for p in data["packages"]]]
    folder = settings.out_dir / site.SEARCH_SHARD_ROOT / key
    return [[p["name"] for p in json.loads((folder / f"{leaf}.json").read_bytes())["packages"]] for leaf in data["leaves"]]


def _crowd(settings: Settings, count: int) -> list[str]:
    names = [f"crowd-{i:02d}" for i in range(count)]
    for name in names:
        make_tarball(settings.content_dir, name, "1.0.0")
    assert not run_build(settings).errors
    return names


def test_a_shard_too_big_for_one_file_is_cut_into_leaves_of_bounded_size(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 4)
    names = _crowd(settings, 11)
    leaves = _shard_names(settings, "cr")
    assert len(leaves) > 1 and all(1 <= len(leaf) <= 4 for leaf in leaves)
    assert [name for leaf in leaves for name in leaf] == names  # every member once, in name order
    assert (settings.out_dir / site.search_shard_path("cr")).with_suffix(".json.gz").is_file()


def test_a_publish_into_a_cut_shard_rewrites_one_leaf_and_not_the_list(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 4)
    _crowd(settings, 11)
    before = _shard_names(settings, "cr")
    archive = make_tarball(settings.content_dir, "crowd-05a", "1.0.0")
    written = [p for p in run_build(settings, changed=[archive]).written if p.startswith(f"{site.SEARCH_SHARD_ROOT}/cr")]
    after = _shard_names(settings, "cr")
    assert len(after) == len(before)  # a leaf with room took it: no cut, the list untouched
    assert len(written) == 2 and all(p.startswith(f"{site.SEARCH_SHARD_ROOT}/cr/") for p in written)  # one leaf + its .gz
    assert sum("crowd-05a" in leaf for leaf in after) == 1


def test_a_full_leaf_splits_and_an_emptied_shard_becomes_one_file_again(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 4)
    names = _crowd(settings, 11)
    for extra in ("crowd-00a", "crowd-00b", "crowd-00c"):  # all land in the first leaf: it must split
        run_build(settings, changed=[make_tarball(settings.content_dir, extra, "1.0.0")])
    leaves = _shard_names(settings, "cr")
    assert all(len(leaf) <= 4 for leaf in leaves)
    assert [n for leaf in leaves for n in leaf] == sorted([*names, "crowd-00a", "crowd-00b", "crowd-00c"])
    for archive in sorted(settings.content_dir.glob("crowd-*.tgz"))[2:]:
        archive.unlink()
    run_build(dataclasses.replace(settings, prune=True))
    assert _shard_names(settings, "cr") == [["crowd-00", "crowd-00a"]]
    assert not (settings.out_dir / site.SEARCH_SHARD_ROOT / "cr").exists()  # its leaves went with the cut


def test_a_schema_7_state_gains_leaves_in_place_without_a_full_build(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    names = _crowd(settings, 11)
    for folder in ("a", "b"):  # two meta files for one name: the second is reported by every build
        (settings.content_dir / folder).mkdir()
        (settings.content_dir / folder / "registry-meta.json").write_text(json.dumps({"name": "crowd-00"}))
    assert [e.path for e in run_build(settings).errors] == ["b/registry-meta.json"]
    with sqlite3.connect(settings.state_file) as db:
        _as_schema_8(db)
        db.execute("DROP TABLE search_leaves")
        db.execute("DROP TABLE meta_duplicates")
        db.execute("PRAGMA user_version=7")
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 4)
    monkeypatch.setattr("registry_gen.state.sqlite_schema.SCHEMA_8_LEAF_FILL", 2)  # half a leaf, as the migration cuts them
    result = run_build(settings)
    assert result.rebuilt_packages == []  # no package read or rendered again
    assert [e.path for e in result.errors] == ["b/registry-meta.json"]  # the duplicate found in place
    leaves = _shard_names(settings, "cr")
    assert len(leaves) > 1 and [n for leaf in leaves for n in leaf] == names
    assert not any(p.startswith("-/web/search/") for p in run_build(settings).written)  # written once


def _as_schema_9(db: sqlite3.Connection) -> None:
    """Turns a current state into what schema 9 kept: a listed package's browse key and modified
    time in the packages table as well as in the listings table."""
    for column in ("modified", "range_key"):
        db.execute(f"ALTER TABLE packages ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
        db.execute(f"UPDATE packages SET {column} = (SELECT l.{column} FROM listings l WHERE l.name = packages.name) WHERE listed")
    db.execute("PRAGMA user_version=9")


def _as_schema_8(db: sqlite3.Connection) -> None:
    """Turns a current state into what schema 8 kept: the listing rows inside the packages table."""
    _as_schema_9(db)
    db.execute("ALTER TABLE packages ADD COLUMN search_entry BLOB NOT NULL DEFAULT x''")
    db.execute("UPDATE packages SET search_entry = (SELECT l.search_entry FROM listings l WHERE l.name = packages.name) WHERE listed")
    db.execute("DROP TABLE listings")
    db.execute("CREATE INDEX packages_listed_by_range ON packages (range_key, name) WHERE listed")
    db.execute("CREATE INDEX packages_listed_by_modified ON packages (modified, name) WHERE listed")
    db.execute("PRAGMA user_version=8")


def test_a_schema_8_state_moves_its_listings_in_place_and_writes_nothing(settings: Settings) -> None:
    names = _crowd(settings, 11)
    tree = {p: p.read_bytes() for p in sorted(settings.out_dir.rglob("*")) if p.is_file()}
    with sqlite3.connect(settings.state_file) as db:
        _as_schema_8(db)
    result = run_build(settings)
    assert result.rebuilt_packages == [] and result.written == [] and result.removed == []
    with sqlite3.connect(settings.state_file) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert "search_entry" not in {row[1] for row in db.execute("PRAGMA table_info(packages)")}
        assert {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}.isdisjoint(
            {"packages_listed_by_range", "packages_listed_by_modified"}
        )
    assert {p: p.read_bytes() for p in sorted(settings.out_dir.rglob("*")) if p.is_file()} == tree
    archive = make_tarball(settings.content_dir, "crowd-07", "2.0.0")  # a publish replaces a moved row
    run_build(settings, changed=[archive])
    shard = json.loads((settings.out_dir / site.search_shard_path("cr")).read_bytes())["packages"]
    assert [(p["name"], p["version"]) for p in shard] == [(n, "2.0.0" if n == "crowd-07" else "1.0.0") for n in names]
    assert '<span class="version">2.0.0</span>' in (settings.out_dir / site.browse_page_path("cr")).read_text()


def test_a_schema_9_state_loses_its_listing_copies_in_place_and_writes_nothing(settings: Settings) -> None:
    names = _crowd(settings, 11)
    tree = {p: p.read_bytes() for p in sorted(settings.out_dir.rglob("*")) if p.is_file()}
    with sqlite3.connect(settings.state_file) as db:
        _as_schema_9(db)
        assert {"modified", "range_key"} <= {row[1] for row in db.execute("PRAGMA table_info(packages)")}
    result = run_build(settings)
    assert result.rebuilt_packages == [] and result.written == [] and result.removed == []
    with sqlite3.connect(settings.state_file) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 12
        assert {"modified", "range_key"}.isdisjoint(row[1] for row in db.execute("PRAGMA table_info(packages)"))
    assert {p: p.read_bytes() for p in sorted(settings.out_dir.rglob("*")) if p.is_file()} == tree
    # The browse key a package leaves now comes from the listings table: its old range loses it.
    (settings.content_dir / "crowd-03-1.0.0.tgz").unlink()
    archive = make_tarball(settings.content_dir, "zed", "1.0.0")
    run_build(settings, changed=[archive, settings.content_dir / "crowd-03-1.0.0.tgz"])
    assert _names(settings, site.search_shard_path("cr")) == [n for n in names if n != "crowd-03"]
    assert "crowd-03" not in (settings.out_dir / site.browse_page_path("cr")).read_text()
    assert "zed" in (settings.out_dir / site.browse_page_path("ze")).read_text()


def test_a_schema_10_state_gains_the_unwritten_table_in_place_and_writes_nothing(settings: Settings) -> None:
    _crowd(settings, 3)
    with sqlite3.connect(settings.state_file) as db:
        db.execute("DROP TABLE unwritten")
        db.execute("PRAGMA user_version=10")
    result = run_build(settings)
    assert result.rebuilt_packages == [] and result.written == [] and result.removed == []
    with sqlite3.connect(settings.state_file) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("SELECT COUNT(*) FROM unwritten").fetchone()[0] == 0


def test_a_state_migration_keeps_the_manifest_cache_and_a_lost_entry_is_read_once(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _crowd(settings, 3)
    cache = settings.state_folder / CACHE_FILE
    with sqlite3.connect(cache) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION - 1}")  # written by the previous release
        kept = db.execute("SELECT COUNT(*) FROM manifests").fetchone()[0]
    with sqlite3.connect(settings.state_file) as db:
        _as_schema_8(db)
    reads: list[str] = []
    real = read.inspect_archive
    monkeypatch.setattr(read, "inspect_archive", lambda *a, **k: reads.append(a[2]) or real(*a, **k))
    assert run_build(settings).rebuilt_packages == []
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT COUNT(*) FROM manifests").fetchone()[0] == kept == len(names)
        db.execute("DELETE FROM manifests")  # lost (a cleaned state folder, a crash mid-write)
    for version in ("2.0.0", "3.0.0"):
        run_build(settings, changed=[make_tarball(settings.content_dir, "crowd-01", version)])
    assert sorted(reads) == ["crowd-01-1.0.0.tgz", "crowd-01-2.0.0.tgz", "crowd-01-3.0.0.tgz"]  # each once


def test_leaves_emptied_by_removals_join_their_neighbours(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 8)
    names = _crowd(settings, 40)
    before = _shard_names(settings, "cr")
    gone = [name for index, name in enumerate(names) if index % 5]  # four in five leave, one at a time
    for name in gone:
        (settings.content_dir / f"{name}-1.0.0.tgz").unlink()
        run_build(dataclasses.replace(settings, prune=True), changed=[settings.content_dir / f"{name}-1.0.0.tgz"])
    after = _shard_names(settings, "cr")
    assert [n for leaf in after for n in leaf] == [n for n in names if n not in gone]
    assert len(after) < len(before) and all(len(leaf) >= 2 for leaf in after)  # joined, not left as crumbs
    kept = {leaf_id + ".json" for leaf_id in json.loads((settings.out_dir / site.search_shard_path("cr")).read_bytes())["leaves"]}
    assert {p.name for p in (settings.out_dir / site.SEARCH_SHARD_ROOT / "cr").glob("*.json")} == kept  # joined leaves' files went


def test_a_current_state_opens_without_its_schema_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every publish opens the state: its DDL is run only for a state of another version.
    path = tmp_path / "state.sqlite3"
    BuildState(path).close()
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db = connect(*args, **kwargs)
        db.set_trace_callback(statements.append)
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    BuildState(path).close()
    assert any("user_version" in s for s in statements)
    assert not [s for s in statements if s.lstrip().upper().startswith(("CREATE", "ALTER", "DROP"))]


def test_a_range_that_went_past_page_size_is_marked_split_and_read_back() -> None:
    """The write's build marks the prefixes its moves took past PAGE_SIZE (one at a time: lowest
    before <= PAGE_SIZE < highest after), a `range` marking bound `split` that the leader reads back
    as a tree to render whole; a prefix that grew but stayed on one side is not marked."""
    from registry_gen.build.indexes import SPLIT, ListingChanges, split_ranges
    from registry_gen.state.records import StalePage

    growth = {"zq": (2, 3), "zqa": (0, 1), "zr": (3, 5), "zs": (1, 2)}
    assert split_ranges(growth, 2) == {"zq"}
    changes = ListingChanges(split={"zq"})
    assert [page for page in changes.stale_pages() if page.bound == SPLIT] == [StalePage("range", "zq", SPLIT)]
    read = ListingChanges()
    read.take(changes.stale_pages())
    assert read.split == {"zq"} and not read.ranges

