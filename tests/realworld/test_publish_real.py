"""A publish into a tree of real packages touches only what lists the package (issue 15, goal 3).

Three incremental-build rules, proven on synthetic fixtures in tests/generator/test_listings.py
and tests/site/test_site.py, here on real tarballs of the corpus (tests/realworld/corpus.py):

1. a new version of a listed package re-renders the one browse page that lists it, not the
   ranges above it (`ListingChanges.pages`);
2. in a search shard cut into leaves, only the leaves holding the package are written again;
3. a manifest-cache entry lost from the state folder is read again from its archive once, by
   the first publish that needs it, and put back (`ManifestCache.heal`).

The subset is small (31 packages, ~1 s for its builds), so the listing limits are lowered
(PAGE_SIZE 4, SEARCH_LEAF_MAX 4) to make real names split browse ranges (`co` -> `com` -> `comm`)
and real words cut shards (`co`, `op`, `pa`) as a big registry's would. commander is the package
published again: four real versions are in the corpus, 2.20.3 and 4.1.1 share their keywords.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from registry_gen import build, site
from registry_gen.build import indexes, packages, read, write
from registry_gen.state.sqlite_manifests import CACHE_FILE
from registry_gen.settings import Settings
from registry_gen.versions import sort_versions
from tests.realworld.corpus import Corpus, ensure_corpus

TARGET = "commander"
VERSIONS = ("2.20.3", "4.1.1", "7.2.0", "8.3.0")  # all four are in the lockfile's tree
# Names sharing commander's browse range (`co`) and its search words (co, op, pa); one version each.
NEIGHBOURS = (
    "co", "coa", "collect-v8-coverage", "color-convert", "color-name", "colord", "colorette", "combined-stream",
    "common-tags", "commondir", "compressible", "compression", "concat-map", "confusing-browser-globals",
    "connect-history-api-fallback", "content-disposition", "content-type", "convert-source-map", "cookie",
    "cookie-signature", "core-util-is", "cosmiconfig", "argparse", "body-parser", "has-flag", "http-parser-js",
    "glob-parent", "find-up", "human-signals",
    "html-minifier-terser",  # depends on commander: its page must not change when commander does
)  # fmt: skip
CUT_SHARDS = ("co", "op", "pa")  # commander's words that more than SEARCH_LEAF_MAX packages share
OWN_FOLDERS = (f"{TARGET}/", f"-/package/{TARGET}/", f"{site.package_folder(TARGET)}/")
WHOLE_DOCUMENTS = {"-/all/index.html", "-/all/index.html.gz", "-/search.json", "-/search.json.gz"}


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    """The cached corpus (fetched if missing): a network failure fails the test, as in test_conformance."""
    corpus = ensure_corpus()
    present = {entry.spec for entry in corpus.entries}
    wanted = [f"{TARGET}@{version}" for version in VERSIONS]
    assert set(wanted) <= present, f"the corpus lockfile no longer holds {wanted}: pick another package here"
    return corpus


@pytest.fixture
def small_listings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 4)
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 4)


def archive(corpus: Corpus, name: str, version: str | None = None) -> Path:
    """The cached tarball of `name` at `version` (None: the highest the corpus holds)."""
    entries = {entry.version: entry for entry in corpus.entries if entry.name == name}
    return corpus.content / entries[version or sort_versions(entries)[-1]].relpath


def content_with(corpus: Corpus, folder: Path, *versions: str, without: tuple[str, ...] = ()) -> Path:
    """content/ of the neighbours (but `without`) and commander at `versions`, each file with its
    cached mtime (a version's `time` is its file's mtime: a second tree of the same files builds the same)."""
    for name in NEIGHBOURS:
        if name in without:
            continue
        (folder / name).mkdir(parents=True)
        shutil.copy2(archive(corpus, name), folder / name)
    (folder / TARGET).mkdir()
    for version in versions:
        shutil.copy2(archive(corpus, TARGET, version), folder / TARGET)
    return folder


def publish(corpus: Corpus, settings: Settings, version: str) -> build.BuildResult:
    """What the write API does: the new file into content/ (its mtime now), then a build told its path."""
    target = settings.content_dir / TARGET / f"{TARGET}-{version}.tgz"
    shutil.copyfile(archive(corpus, TARGET, version), target)
    result = build.run_build(settings, changed=[target])
    assert not result.errors, result.errors
    return result


def settings_for(content: Path, out: Path) -> Settings:
    return Settings(content_dir=content, out_dir=out, base_url="http://127.0.0.1:9/", data_dir=out.parent / f"{out.name}-data")


def tree(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def fresh_build(settings: Settings, folder: Path) -> dict[str, bytes]:
    """A full build of the same content/ into a new tree (its own state folder)."""
    fresh = settings_for(settings.content_dir, folder / "public")
    assert not build.run_build(fresh).errors
    return tree(fresh.out_dir)


def document(files: dict[str, bytes], relative: str) -> Any:
    return json.loads(files[relative])


def records(data: bytes) -> list[str]:
    """The package names of a search file's records ([] for a shard's list of leaves)."""
    return [entry["name"] for entry in json.loads(data).get("packages", [])]


def search_files_holding(files: dict[str, bytes], name: str) -> set[str]:
    root = site.SEARCH_SHARD_ROOT + "/"
    return {p for p, data in files.items() if p.startswith(root) and p.endswith(".json") and name in records(data)}


def pages_listing(files: dict[str, bytes], name: str) -> set[str]:
    row = f"package/{name}/index.html".encode()
    return {p for p, data in files.items() if p.startswith(site.BROWSE_ROOT + "/") and row in data}


def recent_first(files: dict[str, bytes]) -> str:
    """The package the front page's "recently updated" list names first."""
    found = re.search(r'id="recent-list".*?class="package-name" href="[^"]*">([^<]+)<', files[site.FRONT_PAGE].decode(), re.S)
    assert found, "the front page lists no recent package"
    return found.group(1)


def changed_paths(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


@pytest.fixture
def offered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every listing file the build renders and offers to write (written or not: the bytes may be
    the same), as a tree path: a page rendered again for nothing is caught too."""
    paths: list[str] = []
    real = indexes.write_if_changed

    def spy(target: Path, data: bytes) -> bool:
        paths.append(target.as_posix())
        return real(target, data)

    for phase in (write, indexes, packages):  # the package's files, the listings, the Dependents refresh
        monkeypatch.setattr(phase, "write_if_changed", spy)
    yield paths


def test_a_new_real_version_rewrites_its_documents_one_browse_page_and_its_leaves_only(
    corpus: Corpus, tmp_path: Path, small_listings: None, offered: list[str]
) -> None:
    settings = settings_for(content_with(corpus, tmp_path / "content", VERSIONS[0]), tmp_path / "public")
    assert not build.run_build(settings).errors
    before = tree(settings.out_dir)
    for key in CUT_SHARDS:  # the subset does cut these shards: a leaf rule is under test
        assert len(document(before, site.search_shard_path(key))["leaves"]) >= 2, key
    (listing_page,) = pages_listing(before, TARGET)
    assert listing_page == site.browse_page_path("comm")  # below the split ranges co and com
    holders = search_files_holding(before, TARGET)
    assert {p.split("/")[3] for p in holders} >= set(CUT_SHARDS)

    offered.clear()
    result = publish(corpus, settings, VERSIONS[1])
    after = tree(settings.out_dir)

    # The package's documents list both versions; latest moved; the old tarball is the same bytes.
    for relative in (f"{TARGET}/index.html", f"{TARGET}/abbreviated.json"):
        assert sorted(document(after, relative)["versions"]) == sorted(VERSIONS[:2]), relative
        assert document(before, relative)["dist-tags"] == {"latest": VERSIONS[0]}
        assert document(after, relative)["dist-tags"] == {"latest": VERSIONS[1]}
    for version in VERSIONS[:2]:
        assert after[f"{TARGET}/-/{TARGET}-{version}.tgz"] == archive(corpus, TARGET, version).read_bytes()
    assert before[f"{TARGET}/-/{TARGET}-{VERSIONS[0]}.tgz"] == after[f"{TARGET}/-/{TARGET}-{VERSIONS[0]}.tgz"]

    # One browse page and the leaves holding commander were rendered; nothing above them, no list.
    out = settings.out_dir.as_posix() + "/"
    rendered = {p.removeprefix(out) for p in offered if p.startswith(out + "-/web/")}
    assert {p for p in rendered if p.startswith(site.BROWSE_ROOT + "/")} == {listing_page}
    assert pages_listing(after, TARGET) == {listing_page}
    assert search_files_holding(after, TARGET) == holders
    search_rendered = {p for p in rendered if p.startswith(site.SEARCH_SHARD_ROOT + "/")}
    assert search_rendered == holders | {p + ".gz" for p in holders}

    # Everything else of the tree is the same bytes; what changed was all written, and named.
    changed = changed_paths(before, after)
    expected = {listing_page, site.FRONT_PAGE, *search_rendered, *WHOLE_DOCUMENTS}
    assert {p for p in changed if not p.startswith(OWN_FOLDERS)} == expected
    assert set(result.written) == changed
    assert site.package_page_path("html-minifier-terser") not in changed  # a dependent's page: the link is the same
    assert recent_first(after) == TARGET  # its file is the newest: it leads "recently updated"

    # The incremental tree is the tree a full build of the same content/ writes.
    assert changed_paths(after, fresh_build(settings, tmp_path / "fresh")) == set()


def browse_pages(out: Path, offered: list[str]) -> set[str]:
    root = f"{out.as_posix()}/{site.BROWSE_ROOT}/"
    return {p.removeprefix(out.as_posix() + "/") for p in offered if p.startswith(root)}


def test_a_real_package_entering_or_leaving_a_range_renders_its_whole_path(
    corpus: Corpus, tmp_path: Path, small_listings: None, offered: list[str]
) -> None:
    """The other half of rule 1: the counts on every page above the range change, so the
    package's whole path is rendered (co -> com -> comm), and nothing beside it."""
    entering = "common-tags"
    settings = settings_for(content_with(corpus, tmp_path / "content", VERSIONS[0], without=(entering,)), tmp_path / "public")
    assert not build.run_build(settings).errors
    path = {site.browse_page_path(prefix) for prefix in ("co", "com", "comm")}
    before = tree(settings.out_dir)
    offered.clear()
    (settings.content_dir / entering).mkdir()
    added = Path(shutil.copy2(archive(corpus, entering), settings.content_dir / entering))
    assert not build.run_build(settings, changed=[added]).errors
    assert browse_pages(settings.out_dir, offered) == path
    after = tree(settings.out_dir)
    assert {p for p in changed_paths(before, after) if p.startswith(site.BROWSE_ROOT + "/")} == path  # each count moved
    assert pages_listing(after, entering) == {site.browse_page_path("comm")}
    offered.clear()
    added.unlink()
    assert not build.run_build(settings, changed=[added]).errors
    assert browse_pages(settings.out_dir, offered) == path
    assert changed_paths(before, tree(settings.out_dir)) == set()  # gone again: the tree it was


def lose_cache_entries(settings: Settings, versions: tuple[str, ...]) -> set[str]:
    """Deletes the manifest-cache rows (manifest, README, file list) of commander's `versions`, as
    a cleaned state folder or a crash mid-write would; returns their sha1s."""
    shasums = {hashlib.sha1(archive_bytes(settings, v)).hexdigest() for v in versions}
    with sqlite3.connect(settings.state_folder / CACHE_FILE) as db:
        for table in ("manifests", "file_lists"):
            deleted = db.executemany(f"DELETE FROM {table} WHERE shasum = ?", [(s,) for s in sorted(shasums)]).rowcount
            assert deleted == len(shasums), table
    return shasums


def archive_bytes(settings: Settings, version: str) -> bytes:
    return (settings.content_dir / TARGET / f"{TARGET}-{version}.tgz").read_bytes()


def cached(settings: Settings, shasums: set[str]) -> set[str]:
    with sqlite3.connect(settings.state_folder / CACHE_FILE) as db:
        rows = db.execute("SELECT m.shasum FROM manifests m JOIN file_lists f USING (shasum)").fetchall()
    return {s for (s,) in rows} & shasums


def test_lost_cache_entries_of_real_archives_are_read_once_across_two_publishes(
    corpus: Corpus, tmp_path: Path, small_listings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(content_with(corpus, tmp_path / "content", *VERSIONS[:2]), tmp_path / "public")
    assert not build.run_build(settings).errors
    lost = lose_cache_entries(settings, VERSIONS[:2])
    reads: list[str] = []
    real = read.inspect_archive
    monkeypatch.setattr(read, "inspect_archive", lambda *a, **k: reads.append(a[2]) or real(*a, **k))

    publish(corpus, settings, VERSIONS[2])
    assert cached(settings, lost) == lost  # put back by the build that read them again
    publish(corpus, settings, VERSIONS[3])
    assert sorted(reads) == sorted(f"{TARGET}/{TARGET}-{v}.tgz" for v in VERSIONS)  # each archive once

    after = tree(settings.out_dir)
    assert sorted(document(after, f"{TARGET}/index.html")["versions"]) == sorted(VERSIONS)
    # What was put back is what a read of the archive gives: the tree is a fresh build's.
    assert changed_paths(after, fresh_build(settings, tmp_path / "fresh")) == set()
