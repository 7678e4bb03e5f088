"""The HTML site as the build writes it: paths, links, escaping, pagination, incremental pages."""

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


def listed(range_page: Path) -> list[str]:
    """The package names in a name-range page's list."""
    section = re.search(r'<ol id="package-list".*?</ol>', range_page.read_text(), re.S)
    assert section, range_page
    return re.findall(r'class="package-name" href="[^"]+">([^<]+)</a>', section.group(0))


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
        # a page per version, and its file list
        "-/web/package/plain/v/1.0.0/index.html",
        "-/web/package/plain/v/1.0.0/files/index.html",
        "-/web/package/@scope/my.pkg_name-x/v/2.0.0/index.html",
        "-/web/package/@scope/my.pkg_name-x/v/2.0.0/files/index.html",
        "-/web/package/@scope/my.pkg_name-x/v/2.1.0-beta.1/index.html",
        "-/web/package/@scope/my.pkg_name-x/v/2.1.0-beta.1/files/index.html",
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


def test_range_pages_paginate_and_shrink(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    for index in range(5):
        make_tarball(settings.content_dir, f"pkg-{index}", "1.0.0")
    make_tarball(settings.content_dir, "other", "1.0.0")
    build(settings)
    first, second, third = (web(settings, f"browse/pk/{n}index.html") for n in ("", "2/", "3/"))
    assert all(p.is_file() for p in (first, second, third)) and not web(settings, "browse/pk/4").exists()
    assert listed(first) == ["pkg-0", "pkg-1"]
    assert listed(second) == ["pkg-2", "pkg-3"] and listed(third) == ["pkg-4"]
    second_links = [href for href, _ in parse(second).links]
    assert "../../../browse/pk/index.html" in second_links and "../../../browse/pk/3/index.html" in second_links
    assert "../../../package/pkg-2/index.html" in second_links
    front_links = [href for href, _ in parse(web(settings, "index.html")).links]
    assert "browse/pk/index.html" in front_links and "browse/ot/index.html" in front_links
    for index in (2, 3, 4):
        next(settings.content_dir.glob(f"pkg-{index}-*.tgz")).unlink()
    next(settings.content_dir.glob("other-*.tgz")).unlink()
    build(settings.with_updates(prune=True))  # 4 of 6 packages go: more than half
    assert first.is_file() and not web(settings, "browse/pk/2").exists() and listed(first) == ["pkg-0", "pkg-1"]
    assert not web(settings, "browse/ot").exists()  # a range with no package left goes
    front = web(settings, "index.html").read_text()
    assert "pkg-4" not in front and "browse/ot/" not in front and '<strong id="package-count">2</strong>' in front


def test_page_links_mark_gaps() -> None:
    links = site.page_links(50, 100, "../../../", "ab")
    numbers = [n for n, _ in links]
    assert numbers == [1, None, 48, 49, 50, 51, 52, None, 100]
    assert dict(links)[1] == "../../../browse/ab/index.html" and dict(links)[49] == "../../../browse/ab/49/index.html"


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


def site_of(summaries: list[dict[str, object]], settings: Settings) -> dict[str, bytes]:
    """Front page, every range's pages and the assets, as the build would call them."""
    by_key: dict[str, list[Mapping[str, object]]] = {}
    for s in sorted(summaries, key=lambda s: str(s["name"])):
        by_key.setdefault(site.browse_key(str(s["name"])), []).append(s)
    recent = sorted(summaries, key=lambda s: (str(s["modified"]), str(s["name"])), reverse=True)[: site.RECENT_COUNT]
    files = site.front_page(recent, len(summaries), sorted((k, len(v)) for k, v in by_key.items()), settings)
    for key, members in by_key.items():
        files.update(site.browse_pages(key, members, settings))
    files.update(site.site_assets(settings))
    return files


def test_front_page_and_range_pages_link_only_to_files_the_site_has(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 3)
    names = ["@scope/ab-x", "ab", "abc", "abd", "abe", "a", "a.b", "zed", "0day", "~tilde", "-dash"]
    summaries = [summary(n, f"2024-01-{i + 1:02d}T00:00:00.000Z") for i, n in enumerate(names)]
    files = site_of(summaries, settings)
    packages = {site.package_page_path(n) for n in names}
    assert sorted(p for p in files if p.startswith(site.BROWSE_ROOT)) == [
        "-/web/browse/-d/index.html", "-/web/browse/-t/index.html", "-/web/browse/0d/index.html", "-/web/browse/a-/index.html",
        "-/web/browse/ab/2/index.html", "-/web/browse/ab/index.html", "-/web/browse/sc/index.html", "-/web/browse/ze/index.html",
    ]
    checked = 0
    for path, data in files.items():
        if not path.endswith(".html") or path == site.NOT_FOUND_PAGE:  # the not-found page links absolutely
            continue
        for href in page_hrefs(data):
            target = landing(path, href)
            assert target in files or target in packages, f"{href} on {path} leads nowhere"
            checked += 1
    assert checked > 60
    front = files[site.FRONT_PAGE].decode()
    shards = re.search(r'data-shards="([^"]+)"', front)
    assert shards and landing(site.FRONT_PAGE, shards.group(1) + "ab.json") == site.search_shard_path("ab")
    # Every package is reachable from the front page through its range's pages.
    reached = {landing(p, h) for p, d in files.items() if p.startswith(site.BROWSE_ROOT) for h in page_hrefs(d)}
    assert packages <= reached


def test_range_pages_paginate_inside_the_range(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site, "PAGE_SIZE", 2)
    members = [summary(f"ab-{n}") for n in range(5)]
    pages = site.browse_pages("ab", members, settings)
    assert list(pages) == ["-/web/browse/ab/index.html", "-/web/browse/ab/2/index.html", "-/web/browse/ab/3/index.html"]
    rows = {path: re.findall(r'class="package-name" href="[^"]+">([^<]+)</a>', html.decode()) for path, html in pages.items()}
    assert list(rows.values()) == [["ab-0", "ab-1"], ["ab-2", "ab-3"], ["ab-4"]]
    second = page_hrefs(pages["-/web/browse/ab/2/index.html"])
    assert {"../../../browse/ab/index.html", "../../../browse/ab/3/index.html", "../../../index.html#ranges"} <= set(second)
    assert "../../../package/ab-2/index.html" in second
    assert '<ol id="package-list" class="packages" start="3">' in pages["-/web/browse/ab/2/index.html"].decode()
    assert "(3–4 of 5)" in pages["-/web/browse/ab/2/index.html"].decode()
    assert site.browse_pages("ab", [], settings) == {}
    single = site.browse_pages("cd", [summary("cd")], settings)
    assert list(single) == ["-/web/browse/cd/index.html"] and 'class="pagination"' not in single["-/web/browse/cd/index.html"].decode()


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
        **site.browse_pages("ev", [hostile], settings),
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
    assert shards == ["bo.json", "br.json", "fi.json", "se.json", "te.json", "to.json"]
    assert shard(settings, "to") == ["@team/finder", "toaster"] and shard(settings, "br") == ["toaster"]
    assert web(settings, "search/fi.json.gz").is_file()


def test_a_new_package_rewrites_the_front_page_its_range_and_its_shards_only(settings: Settings) -> None:
    for name in ("aaa", "bbb", "ccc"):
        make_tarball(settings.content_dir, name, "1.0.0", keywords=["shared"])
    build(settings)
    untouched = [site.browse_page_path("aa", 1), site.browse_page_path("cc", 1), site.search_shard_path("aa")]
    before = {p: (settings.out_dir / p).stat().st_mtime_ns for p in untouched}
    make_tarball(settings.content_dir, "bbx", "1.0.0", keywords=["shared"])
    result = run_build(settings)
    web_written = sorted(p for p in result.written if p.startswith("-/web/") and not p.startswith("-/web/package/"))
    assert [p.removesuffix(".gz") for p in web_written if p.endswith(".gz")] == [p for p in web_written if p.endswith(".json")]
    assert [p for p in web_written if not p.endswith(".gz")] == [
        "-/web/browse/bb/index.html",
        "-/web/index.html",
        "-/web/search/bb.json",
        "-/web/search/sh.json",
    ]
    assert {p: (settings.out_dir / p).stat().st_mtime_ns for p in untouched} == before
    assert shard(settings, "sh") == ["aaa", "bbb", "bbx", "ccc"] and listed(web(settings, "browse/bb/index.html")) == ["bbb", "bbx"]


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
        "-/web/package/bbb/v/1.1.0/files/index.html",
        "-/web/package/bbb/v/1.1.0/index.html",
        "-/web/search/bb.json",
        "-/web/search/bb.json.gz",
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


def test_each_version_has_its_own_page_with_its_readme_deps_bin_engines_and_files(settings: Settings) -> None:
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
    # The file list of each version, from its archive, with sizes.
    files = web(settings, "package/tool/v/1.0.0/files/index.html").read_text()
    rows = re.findall(r'<tr><td class="path">(.*?)</td><td class="size" data-bytes="(\d+)">', files)
    paths = [(re.sub(r"<[^>]+>", "", cell), int(size)) for cell, size in rows]
    assert [p for p, _ in paths] == ["README.md", "cli.js", "lib/a.js", "package.json"]
    assert dict(paths)["cli.js"] == 1234 and dict(paths)["lib/a.js"] == 1
    assert "4 files" in files
    # The package page links to its versions, its files, and shows the latest one's commands.
    main = page_of(settings, "tool").read_text()
    assert 'href="../../package/tool/v/1.0.0/index.html">1.0.0</a>' in main
    assert 'id="browse-files" href="../../package/tool/v/2.0.0/files/index.html"' in main
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
