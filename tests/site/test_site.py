"""The HTML site as the build writes it: paths, links, escaping, the name-range tree, incremental pages."""

from __future__ import annotations

import dataclasses
import json
import posixpath
import random
import re
from collections.abc import Mapping
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

import pytest

from registry_gen import site
from registry_gen.build import run_build
from registry_gen.errors import ConfigError
from registry_gen.settings import Settings
from tests.support import make_tarball


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, dict[str, str | None]]] = []  # (url, attributes of its tag)
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        for name in ("href", "src"):
            if attributes.get(name):
                self.links.append((attributes[name] or "", {"tag": tag, **attributes}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def web(settings: Settings, relative: str) -> Path:
    return settings.out_dir / "-/web" / relative


def page_of(settings: Settings, name: str) -> Path:
    return settings.out_dir / site.package_page_path(name)


def resolve(page: Path, href: str, out: Path) -> Path:
    """Where a relative link on `page` lands in the tree (a folder means its index.html)."""
    path = unquote(urlsplit(href).path)
    target = Path(*PurePosixPath(page.parent.relative_to(out).as_posix(), path).parts)
    parts: list[str] = []
    for part in target.parts:
        if part == "..":
            assert parts, f"{href} on {page} climbs above the tree root"
            parts.pop()
        elif part != ".":
            parts.append(part)
    landed = out.joinpath(*parts)
    return landed / "index.html" if landed.is_dir() else landed


def rows_of(html: str) -> list[str]:
    """The package names in a browse page's list (none when it lists only sub-ranges)."""
    section = re.search(r'<ol id="package-list".*?</ol>', html, re.S)
    return re.findall(r'class="package-name" href="[^"]+">([^<]+)</a>', section.group(0)) if section else []


def listed(range_page: Path) -> list[str]:
    """The package names in a name-range page's list."""
    names = rows_of(range_page.read_text())
    assert names, range_page
    return names


def chips_of(html: str) -> list[tuple[str, int, str]]:
    """A big range page's sub-ranges: (prefix, count, href) of each chip."""
    section = re.search(r'<ul class="subranges".*?</ul>', html, re.S)
    chip = r'<li><a href="([^"]+)"><code>([^<]+)</code> <span class="muted">(\d+)</span></a></li>'
    return [(key, int(count), href) for href, key, count in re.findall(chip, section.group(0))] if section else []


def crumbs_of(html: str) -> list[tuple[str, str]]:
    """The breadcrumb's links: (text, href), the front page first."""
    section = re.search(r'<nav class="crumbs".*?</nav>', html, re.S)
    assert section, html[:200]
    return [(text, href) for href, text in re.findall(r'<a href="([^"]+)">([^<]+)</a>', section.group(0))]


def browse_pages_on_disk(settings: Settings) -> dict[str, bytes]:
    """Every browse page of the built tree, by its path in the tree."""
    root = settings.out_dir / site.BROWSE_ROOT
    return {p.relative_to(settings.out_dir).as_posix(): p.read_bytes() for p in sorted(root.rglob("index.html"))}


def shard(settings: Settings, key: str) -> list[str]:
    """The package names in search shard `key`."""
    return [p["name"] for p in json.loads((settings.out_dir / site.search_shard_path(key)).read_bytes())["packages"]]


def build(settings: Settings) -> None:
    result = run_build(settings)
    assert not result.errors, result.errors


def test_every_relative_link_of_every_page_lands_on_a_file(settings: Settings) -> None:
    content = settings.content_dir
    make_tarball(content, "plain", "1.0.0", dependencies={"@scope/my.pkg_name-x": "^2.0.0", "left-pad": "^1.0.0"})
    make_tarball(content, "@scope/my.pkg_name-x", "2.0.0", keywords=["dots", "scoped"])
    make_tarball(content, "@scope/my.pkg_name-x", "2.1.0-beta.1")
    build(settings)
    pages = sorted((settings.out_dir / "-/web").rglob("index.html"))
    assert {p.relative_to(settings.out_dir).as_posix() for p in pages} == {
        "-/web/index.html",
        "-/web/browse/pl/index.html",  # a page per name range
        "-/web/browse/sc/index.html",
        "-/web/package/plain/index.html",
        "-/web/package/@scope/my.pkg_name-x/index.html",
        # a page per version (its files are its Code tab, read from the tarball in the browser)
        "-/web/package/plain/v/1.0.0/index.html",
        "-/web/package/@scope/my.pkg_name-x/v/2.0.0/index.html",
        "-/web/package/@scope/my.pkg_name-x/v/2.1.0-beta.1/index.html",
    }
    checked = 0
    for page in pages:
        for href, _ in parse(page).links:
            if href.startswith(("http://", "https://", "mailto:", "#")):
                continue
            assert resolve(page, href, settings.out_dir).is_file(), f"{href} on {page} leads nowhere"
            checked += 1
    assert checked > 60


def test_package_page_content(settings: Settings) -> None:
    content = settings.content_dir
    make_tarball(
        content,
        "@scope/my.pkg_name-x",
        "1.0.0",
        files={"README.md": "# Hello readme\n\nSome **bold** text.\n", "index.js": "x"},
        keywords=["alpha", "beta gamma"],
        license="Apache-2.0",
        homepage="https://example.org/home",
        repository={"type": "git", "url": "git+https://github.com/example/widget.git"},
        bugs={"url": "ftp://example.org/bugs"},
        dependencies={"in-registry": "^1.0.0", "not-here": "~2.0.0"},
    )
    make_tarball(content, "@scope/my.pkg_name-x", "0.9.0")
    make_tarball(content, "in-registry", "1.0.0")
    (content / "registry-meta.json").write_text(
        json.dumps(
            {
                "name": "@scope/my.pkg_name-x",
                "deprecated": {"1.0.0": "use something else"},
                "time": {"0.9.0": "2021-02-03T04:05:06.000Z", "1.0.0": "2022-03-04T05:06:07.000Z"},
                "maintainers": [{"name": "alice", "email": "alice@example.org"}],
            }
        )
    )
    build(settings)
    page = page_of(settings, "@scope/my.pkg_name-x")
    html = page.read_text()
    parsed = parse(page)
    links = {href: attrs for href, attrs in parsed.links}
    assert "<h1>Hello readme</h1>" in html and "<strong>bold</strong>" in html
    for command in (
        f"npm install @scope/my.pkg_name-x --registry={settings.base_url}",
        f"pnpm add @scope/my.pkg_name-x --registry={settings.base_url}",
        f"yarn add @scope/my.pkg_name-x --registry={settings.base_url}",
        f"@scope:registry={settings.base_url}",
    ):
        assert command in html
    assert "Deprecated:</strong> use something else" in html
    assert "2022-03-04 05:06 UTC" in html and "2021-02-03 04:05 UTC" in html
    assert "../../../package/in-registry/index.html" in links
    assert not any("not-here" in href for href in links) and "not-here" in html
    assert "https://github.com/example/widget" in links  # git+https → browsable https
    assert "https://example.org/home" in links
    assert not any(href.startswith("ftp:") for href in links)
    assert "../../../index.html?q=beta%20gamma" in links
    assert "Apache-2.0" in html and "alice" in html
    assert "../../../../../@scope/my.pkg_name-x/-/my.pkg_name-x-1.0.0.tgz" in links
    tarball = settings.out_dir / "@scope/my.pkg_name-x/-/my.pkg_name-x-1.0.0.tgz"
    assert f'id="tarball-size">{site.format_size(tarball.stat().st_size)}<' in html


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("homepage", "javascript:window.__pwned=1"),
        ("homepage", "  JAVASCRIPT:alert(1)"),
        ("repository", {"type": "git", "url": "javascript:alert(1)//.git"}),
        ("repository", "data:text/html,<script>alert(1)</script>"),
        ("homepage", 'https://example.org/" onmouseover="alert(1)'),
    ],
)
def test_only_http_urls_become_links(settings: Settings, field: str, value: object) -> None:
    make_tarball(settings.content_dir, "linky", "1.0.0", **{field: value})
    build(settings)
    page = page_of(settings, "linky")
    hrefs = [href for href, _ in parse(page).links]
    assert not any("alert" in href or "pwned" in href for href in hrefs), hrefs
    assert "onmouseover=" not in page.read_text().replace("onmouseover=&#34;", "")


def test_text_from_archives_is_escaped_everywhere(settings: Settings) -> None:
    evil = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
    make_tarball(settings.content_dir, "escaped", "1.0.0", description=evil, keywords=[evil], license=evil)
    build(settings)
    for page in (web(settings, "index.html"), web(settings, "browse/es/index.html"), page_of(settings, "escaped")):
        html = page.read_text()
        assert "<script>window" not in html and "<img src=x" not in html
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    entry = json.loads(web(settings, "search/es.json").read_text())["packages"][0]
    assert entry["description"] == evil  # the JSON keeps it as data; the page script inserts it as text


def test_a_growing_range_splits_into_sub_ranges_and_shrinking_merges_them_back(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 3)
    archives = {name: make_tarball(settings.content_dir, name, "1.0.0") for name in ("pkg-0", "pkg-1", "other")}
    build(settings)
    assert list(browse_pages_on_disk(settings)) == ["-/web/browse/ot/index.html", "-/web/browse/pk/index.html"]
    assert listed(web(settings, "browse/pk/index.html")) == ["pkg-0", "pkg-1"]
    for name in ("pk", "pkg-2", "pkg-3", "pkx"):  # 6 names under "pk": past PAGE_SIZE
        archives[name] = make_tarball(settings.content_dir, name, "1.0.0")
    build(settings)
    assert sorted(browse_pages_on_disk(settings)) == [
        "-/web/browse/ot/index.html",
        "-/web/browse/pk/g/-/0/index.html",
        "-/web/browse/pk/g/-/1/index.html",
        "-/web/browse/pk/g/-/2/index.html",
        "-/web/browse/pk/g/-/3/index.html",
        "-/web/browse/pk/g/-/index.html",
        "-/web/browse/pk/g/index.html",
        "-/web/browse/pk/index.html",
        "-/web/browse/pk/x/index.html",
    ]
    top = web(settings, "browse/pk/index.html").read_text()
    assert chips_of(top) == [("pkg-", 4, "../../browse/pk/g/-/index.html"), ("pkx", 1, "../../browse/pk/x/index.html")]
    assert rows_of(top) == ["pk"]  # the one name whose key is the prefix itself
    assert '<span class="muted">(6)</span>' in top
    assert chips_of(web(settings, "browse/pk/g/-/index.html").read_text())[1] == ("pkg-1", 1, "../../../../browse/pk/g/-/1/index.html")
    assert listed(web(settings, "browse/pk/g/-/1/index.html")) == ["pkg-1"] and listed(web(settings, "browse/pk/x/index.html")) == ["pkx"]
    grown = browse_pages_on_disk(settings)
    assert not run_build(settings, full=True).errors
    assert browse_pages_on_disk(settings) == grown  # the incremental build wrote what a full one writes
    archives.pop("pkg-3").unlink()  # "pkg" is back to PAGE_SIZE: its page lists them, its sub-folders go
    result = run_build(settings)
    gone = ["-/web/browse/pk/g/-/index.html", *(f"-/web/browse/pk/g/-/{n}/index.html" for n in range(4))]  # each file (a bucket removes by key)
    assert sorted(p for p in result.removed if p.startswith(site.BROWSE_ROOT)) == sorted(gone) and not web(settings, "browse/pk/g/-").exists()
    assert listed(web(settings, "browse/pk/g/index.html")) == ["pkg-0", "pkg-1", "pkg-2"]
    assert [key for key, _, _ in chips_of(web(settings, "browse/pk/index.html").read_text())] == ["pkg", "pkx"]
    for name in ("pkg-2", "pkx", "other"):
        archives.pop(name).unlink()
    build(settings.with_updates(prune=True))  # 3 of 6 packages go
    assert list(browse_pages_on_disk(settings)) == ["-/web/browse/pk/index.html"]  # sub-ranges and "ot" gone
    page = web(settings, "browse/pk/index.html").read_text()
    assert rows_of(page) == ["pk", "pkg-0", "pkg-1"] and chips_of(page) == []
    front = web(settings, "index.html").read_text()
    assert "browse/ot/" not in front and '<strong id="package-count">3</strong>' in front


def test_a_range_emptied_while_split_removes_every_page_under_it(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded default's tree is its work folder: a split range whose every package goes in one
    build takes its sub-range pages with it, each named removed (for a cache in front). On a bucket
    the leader asks the bucket instead (tests/registry_api/test_listing_removals_postgres.py)."""
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    archives = {name: make_tarball(settings.content_dir, name, "1.0.0") for name in ("pkg-0", "pkg-1", "pkx", "other")}
    build(settings)
    split = [path for path in browse_pages_on_disk(settings) if path.startswith(f"{site.BROWSE_ROOT}/pk/")]
    assert f"{site.BROWSE_ROOT}/pk/g/index.html" in split and f"{site.BROWSE_ROOT}/pk/x/index.html" in split
    for name in ("pkg-0", "pkg-1", "pkx"):
        archives.pop(name).unlink()
    result = run_build(settings.with_updates(prune=True))
    assert list(browse_pages_on_disk(settings)) == [f"{site.BROWSE_ROOT}/ot/index.html"]
    assert set(split) <= set(result.removed)


# ---------------------------------------------------------------- front page, ranges, shards (pure)

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'


def summary(name: str, modified: str = "2024-01-02T03:04:05.000Z", **fields: object) -> dict[str, object]:
    """A package summary as the build keeps it (registry_gen.packument.summarize)."""
    return {
        "name": name, "description": f"About {name}", "version": "1.0.0", "dist-tags": {"latest": "1.0.0"},
        "keywords": [], "maintainers": [{"name": "ann", "email": "ann@example.org"}], "modified": modified,
        "date": modified, "license": "MIT", "versions": 1, "deprecated": None, **fields,
    }


def page_hrefs(html: bytes) -> list[str]:
    parser = _Links()
    parser.feed(html.decode())
    return [href for href, _ in parser.links]


def landing(page_path: str, href: str) -> str:
    """The tree path a relative link on the page at `page_path` leads to."""
    path = unquote(urlsplit(href).path)
    landed = posixpath.normpath(posixpath.join(posixpath.dirname(page_path), path))
    assert not landed.startswith(".."), f"{href} on {page_path} climbs above the tree root"
    return landed


def browse_tree(prefix: str, members: list[tuple[str, Mapping[str, object]]], settings: Settings) -> dict[str, bytes]:
    """The page of `prefix` and the pages under it, as the build's walk writes them: `members` are
    (key, summary) of the packages whose key starts with `prefix`, sorted by key and name."""
    if len(members) <= site.PAGE_SIZE:
        return site.browse_page(prefix, len(members), [s for _, s in members], [], settings)
    own = [s for key, s in members if key == prefix]
    children: dict[str, list[tuple[str, Mapping[str, object]]]] = {}
    for key, s in members:
        if key != prefix:
            children.setdefault(key[: len(prefix) + 1], []).append((key, s))
    files = site.browse_page(prefix, len(members), own, [(c, len(m)) for c, m in children.items()], settings)
    for child, below in children.items():
        files.update(browse_tree(child, below, settings))
    return files


def site_of(summaries: list[dict[str, object]], settings: Settings) -> dict[str, bytes]:
    """Front page, every range's page tree and the assets, as the build would call them."""
    by_root: dict[str, list[tuple[str, Mapping[str, object]]]] = {}
    keyed = sorted(((site.name_key(str(s["name"])), s) for s in summaries), key=lambda ks: (ks[0], str(ks[1]["name"])))
    for key, s in keyed:
        by_root.setdefault(key[:2], []).append((key, s))
    recent = sorted(summaries, key=lambda s: (str(s["modified"]), str(s["name"])), reverse=True)[: site.RECENT_COUNT]
    files = site.front_page(recent, len(summaries), [(k, len(v)) for k, v in by_root.items()], settings)
    for root, members in by_root.items():
        files.update(browse_tree(root, members, settings))
    files.update(site.site_assets(settings))
    return files


def through_the_range_tree(files: Mapping[str, bytes]) -> set[str]:
    """What a reader reaches from the front page by following links down the browse pages: the
    browse pages opened and everything they link to."""
    opened: set[str] = set()
    reached: set[str] = set()
    todo = [landing(site.FRONT_PAGE, h) for h in page_hrefs(files[site.FRONT_PAGE])]
    while todo:
        path = todo.pop()
        if path in opened or not path.startswith(site.BROWSE_ROOT):
            continue
        opened.add(path)
        reached |= {landing(path, href) for href in page_hrefs(files[path])}
        todo.extend(reached - opened)
    return opened | reached


def test_front_page_and_range_pages_link_only_to_files_the_site_has(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 3)
    names = ["@scope/ab-x", "ab", "abc", "abd", "abe", "abe-1", "abe.2", "abe_3", "a", "a.b", "a-c", "a_d", "zed", "0day", "~tilde", "-dash"]
    summaries = [summary(n, f"2024-01-{i + 1:02d}T00:00:00.000Z") for i, n in enumerate(names)]
    files = site_of(summaries, settings)
    packages = {site.package_page_path(n) for n in names}
    assert sorted(p for p in files if p.startswith(site.BROWSE_ROOT)) == [
        "-/web/browse/-d/index.html", "-/web/browse/-t/index.html", "-/web/browse/0d/index.html",
        "-/web/browse/a-/b/index.html", "-/web/browse/a-/c/index.html", "-/web/browse/a-/d/index.html", "-/web/browse/a-/index.html",
        "-/web/browse/ab/c/index.html", "-/web/browse/ab/d/index.html",
        "-/web/browse/ab/e/-/index.html",  # abe-1, abe.2, abe_3: under "abe", which lists "abe" itself
        "-/web/browse/ab/e/index.html", "-/web/browse/ab/index.html",
        "-/web/browse/sc/index.html", "-/web/browse/ze/index.html",
    ]
    checked = 0
    for path, data in files.items():
        if not path.endswith(".html") or path == site.NOT_FOUND_PAGE:  # the not-found page links absolutely
            continue
        for href in page_hrefs(data):
            target = landing(path, href)
            assert target in files or target in packages, f"{href} on {path} leads nowhere"
            checked += 1
    assert checked > 100
    front = files[site.FRONT_PAGE].decode()
    shards = re.search(r'data-shards="([^"]+)"', front)
    assert shards and landing(site.FRONT_PAGE, shards.group(1) + "ab.json") == site.search_shard_path("ab")
    # Every package, and every browse page, is reachable from the front page down the range tree.
    reached = through_the_range_tree(files)
    assert packages <= reached and {p for p in files if p.startswith(site.BROWSE_ROOT)} <= reached
    # Each page of the tree is bounded: at most PAGE_SIZE rows, or sub-ranges and the prefix's own names.
    for path, data in files.items():
        if path.startswith(site.BROWSE_ROOT):
            assert len(rows_of(data.decode())) <= site.PAGE_SIZE, path


def test_a_range_over_page_size_lists_its_sub_ranges_and_its_own_names(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    big = site.browse_page("ab", 5, [summary("ab")], [("ab-", 2), ("abc", 2)], settings)
    assert list(big) == ["-/web/browse/ab/index.html"]
    html = big["-/web/browse/ab/index.html"].decode()
    assert chips_of(html) == [("ab-", 2, "../../browse/ab/-/index.html"), ("abc", 2, "../../browse/ab/c/index.html")]
    assert rows_of(html) == ["ab"] and "../../package/ab/index.html" in page_hrefs(big["-/web/browse/ab/index.html"])
    assert '<span class="muted">(5)</span>' in html and crumbs_of(html) == [("All packages", "../../index.html")]
    split_only = site.browse_page("abc", 2, [], [("abcd", 1), ("abce", 1)], settings)["-/web/browse/ab/c/index.html"].decode()
    assert rows_of(split_only) == [] and 'id="package-list"' not in split_only and len(chips_of(split_only)) == 2
    # A range of at most PAGE_SIZE lists its packages, with a breadcrumb up through every ancestor.
    small = site.browse_page("abcd", 2, [summary("abcd"), summary("abcd-x")], [], settings)
    assert list(small) == ["-/web/browse/ab/c/d/index.html"]
    html = small["-/web/browse/ab/c/d/index.html"].decode()
    assert rows_of(html) == ["abcd", "abcd-x"] and chips_of(html) == [] and 'class="subranges"' not in html
    assert crumbs_of(html) == [
        ("All packages", "../../../../index.html"),
        ("ab", "../../../../browse/ab/index.html"),
        ("abc", "../../../../browse/ab/c/index.html"),
    ]
    assert "<span>abcd</span></nav>" in html and "../../../../index.html#ranges" in page_hrefs(small["-/web/browse/ab/c/d/index.html"])
    for path, data in (*big.items(), *small.items()):
        assert all(landing(path, href) for href in page_hrefs(data))  # none climbs above the tree
    assert 'class="pagination"' not in html


def test_front_page_size_does_not_grow_with_the_registry(settings: Settings) -> None:
    recent = [summary(f"pkg-{n}", f"2024-02-{28 - n:02d}T00:00:00.000Z") for n in range(site.RECENT_COUNT + 5)]
    ranges = [("pk", 10)]
    small = site.front_page(recent, 10, ranges, settings)[site.FRONT_PAGE]
    huge = site.front_page(recent, 10_000_000, [("pk", 10_000_000)], settings)[site.FRONT_PAGE]
    assert len(huge) - len(small) < 40  # only the digits of the counts differ
    listed = re.findall(r'class="package-name" href="[^"]+">([^<]+)</a>', small.decode())
    assert listed == [f"pkg-{n}" for n in range(site.RECENT_COUNT)]  # as given, never more than RECENT_COUNT
    every_range = [(a + b, 1) for a in "-0123456789abcdefghijklmnopqrstuvwxyz" for b in "-0123456789abcdefghijklmnopqrstuvwxyz"]
    full = site.front_page(recent, len(every_range), every_range, settings)[site.FRONT_PAGE]
    assert full.count(b'href="browse/') == 37 * 37 and len(full) < 200_000
    assert "No packages yet" in site.front_page([], 0, [], settings)[site.FRONT_PAGE].decode()


def test_hostile_text_is_escaped_on_the_front_page_and_range_pages(settings: Settings) -> None:
    settings = dataclasses.replace(settings, site_title=EVIL)
    hostile = summary("evil", description=EVIL, license=EVIL, keywords=[EVIL], version=EVIL)
    pages = {
        **site.front_page([hostile], 1, [("ev", 1)], settings),
        **site.browse_page("ev", 1, [hostile], [], settings),
        **site.browse_page("evil", 3, [hostile], [("evil-", 2)], settings),  # a split range lists its own names too
        site.NOT_FOUND_PAGE: site.site_assets(settings)[site.NOT_FOUND_PAGE],
    }
    for path, data in pages.items():
        html = data.decode()
        assert "<script>window" not in html and "<img src=x" not in html, path
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html, path
    entry = json.loads(site.search_shard([hostile]))["packages"][0]
    assert entry["description"] == EVIL and entry["keywords"] == [EVIL]  # data: the page script inserts it as text


def test_search_shard_holds_what_the_search_box_filters_on_in_a_stable_order() -> None:
    members = [
        summary("@team/finder", description="Finds things", keywords=["search", "tools"], maintainers=[{"name": "bob"}], version="1.2.3"),
        summary("zeta", description="ünïcode", maintainers=["not a mapping", {"email": "no-name@example.org"}]),
        summary("alpha", keywords=None, maintainers=[]),
    ]
    shard = site.search_shard(members)
    assert json.loads(shard)["packages"] == [
        {"name": "@team/finder", "description": "Finds things", "keywords": ["search", "tools"], "maintainers": ["bob"],
         "version": "1.2.3", "modified": "2024-01-02T03:04:05.000Z"},
        {"name": "alpha", "description": "About alpha", "keywords": [], "maintainers": [], "version": "1.0.0",
         "modified": "2024-01-02T03:04:05.000Z"},
        {"name": "zeta", "description": "ünïcode", "keywords": [], "maintainers": [""], "version": "1.0.0",
         "modified": "2024-01-02T03:04:05.000Z"},
    ]
    assert b" " not in shard.replace(b"Finds things", b"").replace(b"About alpha", b"")  # compact
    assert "ünïcode".encode() in shard  # UTF-8, not \u escapes
    for _ in range(5):
        random.shuffle(members)
        assert site.search_shard(members) == shard
    assert json.loads(site.search_shard([])) == {"packages": []}


def test_pages_are_byte_reproducible(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    summaries = [summary(n) for n in ("ab", "abc", "abd", "x1")]
    first = site_of(summaries, settings)
    again = site_of([dict(s) for s in reversed(summaries)], settings)
    assert first == again


def test_search_shards_hold_what_the_search_box_filters_on(settings: Settings) -> None:
    make_tarball(
        settings.content_dir,
        "@team/finder",
        "1.2.3",
        description="Finds things",
        keywords=["search", "tools"],
        maintainers=[{"name": "bob", "email": "bob@example.org"}],
    )
    make_tarball(settings.content_dir, "toaster", "1.0.0", keywords=["bread"])
    build(settings)
    entry = json.loads(web(settings, "search/fi.json").read_text())["packages"][0]
    assert entry == {
        "name": "@team/finder",
        "description": "Finds things",
        "keywords": ["search", "tools"],
        "maintainers": ["bob"],
        "version": "1.2.3",
        "modified": entry["modified"],
    }
    shards = sorted(p.name for p in web(settings, "search").glob("*.json"))
    # two characters for words of names, keywords and maintainers; three for words of descriptions
    assert shards == ["bo.json", "br.json", "fi.json", "fin.json", "pac.json", "se.json", "te.json", "tes.json", "thi.json", "to.json"]
    assert shard(settings, "fin") == ["@team/finder"] and shard(settings, "tes") == ["toaster"]  # "toaster test package"
    assert shard(settings, "to") == ["@team/finder", "toaster"] and shard(settings, "br") == ["toaster"]
    assert web(settings, "search/fi.json.gz").is_file()


def test_a_new_package_rewrites_the_front_page_its_range_and_its_shards_only(settings: Settings) -> None:
    for name in ("aaa", "bbb", "ccc"):
        make_tarball(settings.content_dir, name, "1.0.0", keywords=["shared"])
    build(settings)
    untouched = [site.browse_page_path("aa"), site.browse_page_path("cc"), site.search_shard_path("aa")]
    before = {p: (settings.out_dir / p).stat().st_mtime_ns for p in untouched}
    make_tarball(settings.content_dir, "bbx", "1.0.0", keywords=["shared"])
    result = run_build(settings)
    web_written = sorted(p for p in result.written if p.startswith("-/web/") and not p.startswith("-/web/package/"))
    assert [p.removesuffix(".gz") for p in web_written if p.endswith(".gz")] == [p for p in web_written if p.endswith(".json")]
    assert [p for p in web_written if not p.endswith(".gz")] == [
        "-/web/browse/bb/index.html",
        "-/web/index.html",
        "-/web/search/bb.json",
        "-/web/search/pac.json",  # its description, "bbx test package"
        "-/web/search/sh.json",
        "-/web/search/tes.json",
    ]
    assert {p: (settings.out_dir / p).stat().st_mtime_ns for p in untouched} == before
    assert shard(settings, "sh") == ["aaa", "bbb", "bbx", "ccc"] and listed(web(settings, "browse/bb/index.html")) == ["bbb", "bbx"]


def test_a_new_package_renders_only_the_browse_pages_on_its_key_path(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    for name in ("aaa", "bb", "bbx-1", "bbx-2", "bby", "bbz"):
        make_tarball(settings.content_dir, name, "1.0.0")
    build(settings)
    assert sorted(browse_pages_on_disk(settings)) == [
        "-/web/browse/aa/index.html", "-/web/browse/bb/index.html", "-/web/browse/bb/x/index.html",
        "-/web/browse/bb/y/index.html", "-/web/browse/bb/z/index.html",
    ]
    rendered: list[str] = []
    real = site.browse_page
    monkeypatch.setattr(site, "browse_page", lambda prefix, *rest: rendered.append(prefix) or real(prefix, *rest))
    before = {p: (settings.out_dir / p).stat().st_mtime_ns for p in browse_pages_on_disk(settings)}
    make_tarball(settings.content_dir, "bbz-1", "1.0.0")  # "bbz" grows to 2: no split
    result = run_build(settings)
    assert rendered == ["bb", "bbz"]  # its range and the sub-range that lists it, nothing beside them
    assert sorted(p for p in result.written if p.startswith(site.BROWSE_ROOT)) == ["-/web/browse/bb/index.html", "-/web/browse/bb/z/index.html"]
    after = {p: (settings.out_dir / p).stat().st_mtime_ns for p in before}
    assert {p for p in before if after[p] != before[p]} == {"-/web/browse/bb/index.html", "-/web/browse/bb/z/index.html"}
    assert listed(web(settings, "browse/bb/z/index.html")) == ["bbz", "bbz-1"]
    assert ("bbz", 2) in [(key, count) for key, count, _ in chips_of(web(settings, "browse/bb/index.html").read_text())]
    rendered.clear()
    make_tarball(settings.content_dir, "bbx-3", "1.0.0")  # "bbx" grows to 3 and splits: its new sub-tree is written
    result = run_build(settings)
    assert rendered == ["bb", "bbx", "bbx-", "bbx-1", "bbx-2", "bbx-3"]
    assert sorted(p for p in result.written if p.startswith(site.BROWSE_ROOT)) == [
        "-/web/browse/bb/index.html", "-/web/browse/bb/x/-/1/index.html", "-/web/browse/bb/x/-/2/index.html",
        "-/web/browse/bb/x/-/3/index.html", "-/web/browse/bb/x/-/index.html", "-/web/browse/bb/x/index.html",
    ]
    assert listed(web(settings, "browse/bb/x/-/2/index.html")) == ["bbx-2"]
    for path in ("-/web/browse/aa/index.html", "-/web/browse/bb/y/index.html"):
        assert (settings.out_dir / path).stat().st_mtime_ns == before[path]
    rendered.clear()
    next(settings.content_dir.glob("bby-*.tgz")).unlink()  # a sub-range empties: its folder goes, its parent is rewritten
    result = run_build(settings)
    assert rendered == ["bb"] and [p for p in result.removed if p.startswith(site.BROWSE_ROOT)] == ["-/web/browse/bb/y/index.html"]
    assert [key for key, _, _ in chips_of(web(settings, "browse/bb/index.html").read_text())] == ["bbx-", "bbz"]  # past "bbx", which only narrows to "bbx-"
    assert (settings.out_dir / "-/web/browse/aa/index.html").stat().st_mtime_ns == before["-/web/browse/aa/index.html"]


def test_a_new_version_renders_only_the_browse_page_that_lists_its_package(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    for name in ("bb", "bbx-1", "bbx-2", "bbx-3", "bby"):
        make_tarball(settings.content_dir, name, "1.0.0")
    build(settings)
    rendered: list[str] = []
    real = site.browse_page
    monkeypatch.setattr(site, "browse_page", lambda prefix, *rest: rendered.append(prefix) or real(prefix, *rest))
    before = {p: (settings.out_dir / p).read_bytes() for p in browse_pages_on_disk(settings)}
    # The counts and links of the pages above it did not change: only the page listing it is rendered
    # (a range split into sub-ranges lists its own key's package itself).
    for name, prefix, page in (("bbx-2", "bbx-2", "-/web/browse/bb/x/-/2/index.html"), ("bb", "bb", "-/web/browse/bb/index.html")):
        rendered.clear()
        make_tarball(settings.content_dir, name, "1.1.0")
        result = run_build(settings)
        assert rendered == [prefix]
        assert [p for p in result.written if p.startswith(site.BROWSE_ROOT)] == [page]
        assert '<span class="version">1.1.0</span>' in (settings.out_dir / page).read_text()
    assert {p for p, data in before.items() if (settings.out_dir / p).read_bytes() != data} == {
        "-/web/browse/bb/x/-/2/index.html", "-/web/browse/bb/index.html"
    }


def test_a_build_of_many_changes_renders_each_browse_page_once(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import of many packages under one prefix: every changed key walks its path, and the pages
    the paths share are rendered once, not once per package (which made a batch of k packages
    under one range cost k renders and k scans of that range)."""
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    make_tarball(settings.content_dir, "syn", "1.0.0")
    build(settings)
    rendered: list[str] = []
    real = site.browse_page
    monkeypatch.setattr(site, "browse_page", lambda prefix, *rest: rendered.append(prefix) or real(prefix, *rest))
    for index in range(12):
        make_tarball(settings.content_dir, f"syn-{index:02d}", "1.0.0")
    build(settings)
    pages = ["".join(PurePosixPath(path).parts[3:-1]) for path in browse_pages_on_disk(settings)]  # their prefixes
    assert {"sy", "syn", "syn-", "syn-0", "syn-1"} <= set(pages)
    assert sorted(rendered) == sorted(pages)  # every page of the grown range once (all of them are under "sy")


def browse_tree_on_disk(settings: Settings) -> dict[str, tuple[list[tuple[str, int]], list[str]]]:
    """Every browse page of the tree as what it shows: its sub-ranges with counts, its rows."""
    return {
        path: ([(key, count) for key, count, _ in chips_of(html.decode())], rows_of(html.decode()))
        for path, html in browse_pages_on_disk(settings).items()
    }


def versions_shown(settings: Settings) -> dict[str, list[str]]:
    return {path: re.findall(r'<span class="version">([^<]*)</span>', html.decode()) for path, html in browse_pages_on_disk(settings).items()}


def test_incremental_builds_keep_the_tree_a_fresh_build_makes(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random publishes, new versions and removals, built one after the other, against a fresh full build of the
    same content/ after each step: the same pages, sub-ranges, counts and rows."""
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    rng, bumps = random.Random(15), random.Random(16)
    # Few letters, so that names pile up under shared prefixes and the tree splits and merges at several depths.
    pool = sorted({"".join(rng.choice("ab-") for _ in range(rng.randint(1, 5))).strip("-") or "a" for _ in range(200)} | {"@ab/a", "ab.b", "ab_b"})
    settings = settings.with_updates(prune=True)
    archives: dict[str, list[Path]] = {}
    merged: list[str] = []  # sub-range folders removed by the incremental builds
    depth = 0
    for step in range(8):
        for name in rng.sample(sorted(archives), k=min(len(archives), rng.randint(0, 3))):
            for archive in archives.pop(name):
                archive.unlink()
        for name in bumps.sample(sorted(archives), k=min(len(archives), bumps.randint(0, 2))):  # new versions: pages in place
            archives[name].append(make_tarball(settings.content_dir, name, f"1.0.{step + 1}", filename=f"{pool.index(name)}-{step}.tgz"))
        for name in rng.sample([n for n in pool if n not in archives], k=min(len(pool) - len(archives), rng.randint(1, 6))):
            # @ab/a and ab-a would share make_tarball's default file name
            archives[name] = [make_tarball(settings.content_dir, name, "1.0.0", filename=f"{pool.index(name)}.tgz")]
        result = run_build(settings)
        assert not result.errors, result.errors
        merged += [path for path in result.removed if path.startswith(site.BROWSE_ROOT + "/") and path.count("/") > 3]
        fresh = dataclasses.replace(settings, out_dir=tmp_path / f"fresh-{step}", data_dir=tmp_path / f"fresh-data-{step}")
        build(fresh)
        tree = browse_tree_on_disk(settings)
        assert tree == browse_tree_on_disk(fresh), f"step {step}: {sorted(archives)}"
        assert versions_shown(settings) == versions_shown(fresh)  # new versions were listed in place
        assert sorted(n for _, rows in tree.values() for n in rows) == sorted(archives)  # each package listed once
        depth = max(depth, *(path.count("/") - 4 for path in tree))
    assert merged and depth >= 3  # the walk was tested on ranges that split several levels deep, and merged back


def test_one_changed_package_rewrites_only_its_pages_range_and_shards(settings: Settings) -> None:
    for name in ("aaa", "bbb", "ccc"):
        make_tarball(settings.content_dir, name, "1.0.0")
    build(settings)
    untouched = {name: page_of(settings, name).stat().st_mtime_ns for name in ("aaa", "ccc")}
    make_tarball(settings.content_dir, "bbb", "1.1.0")
    result = run_build(settings)
    web_written = sorted(p for p in result.written if p.startswith("-/web/"))
    assert web_written == [
        "-/web/browse/bb/index.html",
        "-/web/index.html",
        "-/web/package/bbb/index.html",
        "-/web/package/bbb/v/1.0.0/index.html",  # no longer tagged latest
        "-/web/package/bbb/v/1.1.0/index.html",
        "-/web/search/bb.json",
        "-/web/search/bb.json.gz",
        "-/web/search/pac.json",  # its description, "bbb test package"
        "-/web/search/pac.json.gz",
        "-/web/search/tes.json",
        "-/web/search/tes.json.gz",
    ]
    assert {name: page_of(settings, name).stat().st_mtime_ns for name in ("aaa", "ccc")} == untouched
    assert "1.1.0" in page_of(settings, "bbb").read_text()


def test_version_pages_whose_inputs_did_not_change_are_not_rendered_again(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for version in ("1.0.0", "1.1.0"):
        make_tarball(settings.content_dir, "bbb", version, files={"README.md": f"# bbb {version}\n"})
    build(settings)
    rendered: list[str] = []
    real = site.version_pages
    monkeypatch.setattr(site, "version_pages", lambda packument, version, *a, **k: rendered.append(version) or real(packument, version, *a, **k))
    make_tarball(settings.content_dir, "bbb", "1.2.0", files={"README.md": "# bbb 1.2.0\n"})
    build(settings)
    # 1.1.0 lost its `latest` tag; 1.0.0 changed in nothing and is left as it is.
    assert sorted(rendered) == ["1.1.0", "1.2.0"]
    assert "bbb 1.0.0" in web(settings, "package/bbb/v/1.0.0/index.html").read_text()
    # A page deleted by hand comes back with the next build.
    web(settings, "package/bbb/v/1.0.0/index.html").unlink()
    rendered.clear()
    make_tarball(settings.content_dir, "bbb", "1.2.1")
    build(settings)
    assert "1.0.0" in rendered and web(settings, "package/bbb/v/1.0.0/index.html").is_file()


def test_dependency_links_follow_packages_arriving_and_leaving(settings: Settings) -> None:
    make_tarball(settings.content_dir, "app", "1.0.0", dependencies={"lib": "^1.0.0"})
    make_tarball(settings.content_dir, "other", "1.0.0")
    build(settings)
    link = "../../package/lib/index.html"
    assert link not in page_of(settings, "app").read_text()
    other_mtime = page_of(settings, "other").stat().st_mtime_ns
    lib = make_tarball(settings.content_dir, "lib", "1.0.0")
    result = run_build(settings)
    assert sorted(result.rebuilt_packages) == ["app", "lib"]
    assert link in page_of(settings, "app").read_text()
    assert page_of(settings, "other").stat().st_mtime_ns == other_mtime
    lib.unlink()
    build(settings)
    assert link not in page_of(settings, "app").read_text()
    assert not (settings.out_dir / "-/web/package/lib").exists()


def test_a_template_folder_overrides_single_files(settings: Settings, tmp_path: Path) -> None:
    theme = tmp_path / "theme"
    (theme / "static").mkdir(parents=True)
    (theme / "index.html").write_text(
        '{% extends "_base.html" %}{% block content %}<h1 id="brand">ACME packages: {{ total }}</h1>'
        "{% for p in recent %}<a href=\"{{ p.href }}\">{{ p.name }}</a>{% endfor %}{% endblock %}"
    )
    (theme / "static/site.css").write_text("body { background: hotpink; }")
    settings = dataclasses.replace(settings, template_dir=theme, site_title="ACME <Registry>")
    make_tarball(settings.content_dir, "widget", "1.0.0")
    build(settings)
    front = web(settings, "index.html").read_text()
    assert '<h1 id="brand">ACME packages: 1</h1>' in front and "<title>ACME &lt;Registry&gt;</title>" in front
    assert web(settings, "static/site.css").read_text() == "body { background: hotpink; }"
    assert web(settings, "static/site.js").is_file()  # not overridden: the default
    assert "npm install widget" in page_of(settings, "widget").read_text()  # default package.html
    before = page_of(settings, "widget").read_bytes()
    (theme / "package.html").write_text('{% extends "_base.html" %}{% block content %}<p>custom {{ name }}</p>{% endblock %}')
    build(settings)  # a template change re-renders every page
    assert page_of(settings, "widget").read_bytes() != before
    assert "<p>custom widget</p>" in page_of(settings, "widget").read_text()


def test_a_broken_template_is_reported_by_file_and_line(settings: Settings, tmp_path: Path) -> None:
    theme = tmp_path / "theme"
    theme.mkdir()
    (theme / "index.html").write_text("line one\n{% for x in %}\n")
    settings = dataclasses.replace(settings, template_dir=theme)
    with pytest.raises(ConfigError, match=r"index.html, line 2"):
        site.front_page([], 0, [], settings)


def test_a_missing_template_folder_is_named(settings: Settings, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="template_dir .*nowhere is not a folder"):
        run_build(dataclasses.replace(settings, template_dir=tmp_path / "nowhere"))


def test_not_found_page_uses_absolute_links(settings: Settings) -> None:
    build(settings)
    page = web(settings, "404.html")
    hrefs = [href for href, _ in parse(page).links]
    assert f"{settings.base_url}-/web/index.html" in hrefs
    assert f"{settings.base_url}-/web/static/site.css" in {h.split("?")[0] for h in hrefs}
    assert "No packages yet" in web(settings, "index.html").read_text()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"type": "git", "url": "git+https://github.com/a/b.git"}, "https://github.com/a/b"),
        ("github:a/b", "https://github.com/a/b"),
        ("a/b", "https://github.com/a/b"),
        ("gitlab:group/proj", "https://gitlab.com/group/proj"),
        ("https://example.org/repo", "https://example.org/repo"),
        ("git@github.com:a/b.git", None),
        ("git://github.com/a/b.git", None),
        ({"url": "javascript:alert(1)"}, None),
        (42, None),
    ],
)
def test_repository_urls(value: object, expected: str | None) -> None:
    assert site.repository_url(value) == expected


def test_each_version_has_its_own_page_with_its_readme_deps_bin_engines_and_code_tab(settings: Settings) -> None:
    content = settings.content_dir
    make_tarball(
        content,
        "tool",
        "1.0.0",
        files={"README.md": "# Tool one\n\nThe old docs.\n", "cli.js": "x" * 1234, "lib/a.js": "a"},
        bin="./cli.js",
        engines={"node": ">=14"},
        dependencies={"helper": "^1.0.0"},
    )
    make_tarball(
        content,
        "tool",
        "2.0.0",
        files={"README.md": "# Tool two\n", "bin/run.js": "r", "index.js": "i", "index.d.ts": "export {};"},
        bin={"tool-run": "bin/run.js", "tr": "bin/run.js"},
        engines={"node": ">=18"},
        repository={"type": "git", "url": "https://github.com/acme/tools.git", "directory": "packages/tool"},
    )
    make_tarball(content, "helper", "1.0.0")
    (content / "registry-meta.json").write_text(
        json.dumps({"name": "tool", "time": {"1.0.0": "2020-01-02T03:04:05.000Z", "2.0.0": "2021-01-02T03:04:05.000Z"}})
    )
    build(settings)
    old = web(settings, "package/tool/v/1.0.0/index.html")
    html = old.read_text()
    assert "Tool one" in html and "The old docs." in html and "Tool two" not in html
    assert 'id="published" datetime="2020-01-02T03:04:05.000Z">2020-01-02 03:04 UTC' in html
    assert 'id="not-latest"' in html
    assert '<a href="../../../../package/helper/index.html">helper</a> <code>^1.0.0</code>' in html
    assert "<code>tool</code> <span class=\"muted\">./cli.js</span>" in html  # a string bin is named after the package
    assert "node <code>&gt;=14</code>" in html
    assert "npm install tool@1.0.0 --registry=" in html
    assert 'id="types-badge"' not in html
    new = web(settings, "package/tool/v/2.0.0/index.html").read_text()
    assert "Tool two" in new and 'id="not-latest"' not in new and '<span class="badge">latest</span>' in new
    assert "<code>tool-run</code>" in new and "<code>tr</code>" in new and "node <code>&gt;=18</code>" in new
    assert 'id="types-badge" title="Bundled TypeScript declarations">TS</span>' in new  # index.d.ts in the tarball
    # No page lists a version's files: each page's Code tab reads them from the tarball it names
    # (relative, so from this tree), of the size it says; the package page's, from the latest.
    assert not list(settings.out_dir.rglob("files"))
    for page, version in ((old, "1.0.0"), (page_of(settings, "tool"), "2.0.0")):
        panel = re.search(r'<section class="panel code" id="code"[^>]*data-tarball="([^"]+)" data-tarball-bytes="(\d+)"', page.read_text())
        assert panel is not None, page
        tarball = resolve(page, panel[1], settings.out_dir)
        assert tarball == settings.out_dir / f"tool/-/tool-{version}.tgz" and tarball.stat().st_size == int(panel[2])
    main = page_of(settings, "tool").read_text()
    assert 'href="../../package/tool/v/1.0.0/index.html">1.0.0</a>' in main
    assert 'id="browse-files" href="#code">' in main
    assert "<code>tool-run</code>" in main and 'id="types-badge"' in main


def test_readme_relative_urls_point_into_the_repository(settings: Settings) -> None:
    make_tarball(
        settings.content_dir,
        "pictured",
        "1.0.0",
        files={"README.md": "![shot](docs/shot.png)\n\n[guide](GUIDE.md) and https://example.org/bare\n\n- [x] done\n"},
        repository={"type": "git", "url": "git+https://github.com/acme/mono.git", "directory": "packages/pictured"},
    )
    build(settings)
    for page in (page_of(settings, "pictured"), web(settings, "package/pictured/v/1.0.0/index.html")):
        html = page.read_text()
        assert 'src="https://raw.githubusercontent.com/acme/mono/HEAD/packages/pictured/docs/shot.png"' in html
        assert 'href="https://github.com/acme/mono/blob/HEAD/packages/pictured/GUIDE.md"' in html
        assert '<a href="https://example.org/bare" rel="nofollow noopener noreferrer">https://example.org/bare</a>' in html
        assert 'class="task task-done"' in html


def test_types_from_the_manifest_or_definitely_typed(settings: Settings) -> None:
    make_tarball(settings.content_dir, "typed", "1.0.0", types="dist/main.d.ts")
    make_tarball(settings.content_dir, "untyped", "1.0.0")
    make_tarball(settings.content_dir, "@types/untyped", "1.0.0")
    make_tarball(settings.content_dir, "bare", "1.0.0")
    build(settings)
    assert 'title="Bundled TypeScript declarations (dist/main.d.ts)">TS' in page_of(settings, "typed").read_text()
    assert 'href="../../package/@types/untyped/index.html" title="Types in @types/untyped">DT' in page_of(settings, "untyped").read_text()
    assert 'id="types-badge"' not in page_of(settings, "bare").read_text()


def dependents_of(settings: Settings, name: str) -> list[str]:
    section = re.search(r'<section class="panel deps" id="dependents">.*?</section>', page_of(settings, name).read_text(), re.S)
    assert section, name
    return re.findall(r'<li><a href="[^"]+">([^<]+)</a></li>', section.group(0))


def test_dependents_follow_the_packages_that_depend(settings: Settings) -> None:
    content = settings.content_dir
    make_tarball(content, "lib", "1.0.0")
    make_tarball(content, "zed", "1.0.0", dependencies={"lib": "^1.0.0"})
    build(settings)
    assert dependents_of(settings, "lib") == ["zed"]
    # A package arriving after lib (and built after it, by name) still shows up on lib's page.
    app = make_tarball(content, "app", "1.0.0", devDependencies={"lib": "^1.0.0"})
    build(settings)
    assert dependents_of(settings, "lib") == ["app", "zed"]
    assert dependents_of(settings, "app") == []
    # A new version that drops the dependency, and a package that goes away.
    make_tarball(content, "zed", "2.0.0")
    app.unlink()
    build(settings)
    assert dependents_of(settings, "lib") == []
    assert "No package in this registry depends on lib." in page_of(settings, "lib").read_text()


def test_a_full_build_renders_each_page_once_with_its_final_dependents(settings: Settings) -> None:
    content = settings.content_dir
    make_tarball(content, "aaa", "1.0.0")  # built first, depended on by packages built after it
    make_tarball(content, "mmm", "1.0.0", dependencies={"aaa": "^1.0.0", "zzz": "^1.0.0"})
    make_tarball(content, "zzz", "1.0.0", peerDependencies={"aaa": "^1.0.0"})
    result = run_build(settings)
    assert dependents_of(settings, "aaa") == ["mmm", "zzz"]
    assert dependents_of(settings, "zzz") == ["mmm"]
    assert dependents_of(settings, "mmm") == []
    # Each page written once: the Dependents list was known before the first render.
    assert len(result.written) == len(set(result.written))


def test_browse_links_land_past_single_narrowings_and_stop_at_a_name_of_their_own(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link jumps to the longest prefix all names under it share ("cc-"), but not past a name that
    is itself that prefix ("dd-x" is a package and the range of "dd-x-1" and "dd-x-2")."""
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    for name in ("cc-a", "cc-a-1", "cc-a-2", "cc-b", "dd-x", "dd-x-1", "dd-x-2", "dd-y"):
        make_tarball(settings.content_dir, name, "1.0.0")
    assert not run_build(settings).errors
    assert [key for key, _, _ in chips_of(web(settings, "browse/cc/index.html").read_text())] == ["cc-"]
    assert [key for key, _, _ in chips_of(web(settings, "browse/cc/-/index.html").read_text())] == ["cc-a", "cc-b"]
    assert [key for key, _, _ in chips_of(web(settings, "browse/dd/-/index.html").read_text())] == ["dd-x", "dd-y"]
    assert [key for key, _, _ in chips_of(web(settings, "browse/dd/-/x/index.html").read_text())] == ["dd-x-"]


def test_a_changed_setting_renders_every_version_page_again(settings: Settings) -> None:
    # A version page's key holds the settings it was rendered with (kept once per Settings object).
    make_tarball(settings.content_dir, "keyed", "1.0.0")
    make_tarball(settings.content_dir, "keyed", "1.1.0")
    build(settings)
    moved = settings.with_updates(base_url="http://registry.example.test/npm/")
    result = run_build(moved)
    pages = [site.version_page_path("keyed", v) for v in ("1.0.0", "1.1.0")]
    assert set(pages) <= set(result.written)
    assert all("registry.example.test/npm/" in (settings.out_dir / page).read_text() for page in pages)
