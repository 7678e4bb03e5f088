"""The HTML site in a real headless Chromium (Debian's), driven by Playwright, over plain http.server."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, expect, sync_playwright

from registry_gen import site
from registry_gen.site_search import MATCH_REASONS, match_rank
from registry_gen.build import indexes
from registry_gen.build import run_build
from registry_gen.settings import Settings
from tests.support import make_tarball, static_server

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PAGE_SIZE = 10  # small pages so that a range splits into sub-ranges with a lean tree
LEAF_MAX = 5  # small search leaves so that the fillers' shard is cut into several
FILLERS = 12

RICH_README = """# Widget kit

Build **widgets** in no time.

## Usage

```js
const kit = require('@acme/widget.kit_core-x');
kit.make({ size: 3 });
```

| option | default |
| --- | --- |
| size | 3 |
| colour | blue |
"""

HOSTILE_README = """# Totally normal package

<script>window.__pwned = 'script'; document.title = 'PWNED';</script>

<img src="does-not-exist.png" onerror="window.__pwned = 'onerror'; document.title = 'PWNED'">

[a javascript link](javascript:window.__pwned='link';document.title='PWNED')

<a href="javascript:window.__pwned='anchor';document.title='PWNED'">click me</a>

<a href="data:text/html,<script>parent.__pwned='data'</script>">data link</a>

<svg><script>window.__pwned = 'svg'</script></svg>

<iframe srcdoc="<script>parent.__pwned='iframe'</script>"></iframe>

<details open ontoggle="window.__pwned='toggle'"><summary>details</summary>inside</details>

<div onmouseover="window.__pwned='hover'">hover me</div>

Text after the attacks.
"""


LONG_README = "\n".join(
    [
        "# A package with a long README",
        "",
        "[![build](https://example.invalid/badge.svg)](https://example.invalid/ci) ![logo](docs/logo.png)",
        "",
        *(f"Paragraph {n}: " + "words that wrap normally " * 30 for n in range(12)),
        "",
        "A bare URL: https://example.org/" + "a-very-long-path-segment-without-any-break-" * 6,
        "",
        "Averyveryverylongwordwithoutanyspacethatkeepsgoing" * 4,
        "",
        "```sh",
        "npx long-readme-pkg --with --a --very --long --command --line --that --never --wraps --on --a --phone --screen --at --all",
        "```",
        "",
        "| " + " | ".join(f"column {n}" for n in range(12)) + " |",
        "| " + " | ".join("---" for _ in range(12)) + " |",
        "| " + " | ".join(f"value-{n}-that-is-wide" for n in range(12)) + " |",
        "",
        "- [x] task lists render",
        "- [ ] and show their state",
        "",
        '<img src="https://example.invalid/wide.png" width="1600" height="400" alt="a wide picture">',
    ]
)


def build_demo_tree(content: Path) -> None:
    """A small demo-like registry: scoped and dotted names, tags, deprecation, deps, READMEs."""
    name = "@acme/widget.kit_core-x"
    for version in ("1.0.0", "1.1.0", "2.0.0-beta.1"):
        make_tarball(
            content,
            name,
            version,
            files={"README.md": RICH_README, "index.js": "module.exports = {};"},
            description="Widgets for every occasion",
            keywords=["widgets", "ui"],
            license="MIT",
            repository={"type": "git", "url": "git+https://github.com/acme/widget-kit.git"},
            dependencies={"left.pad_x": "^1.0.0", "not-in-this-registry": "^3.0.0"},
            maintainers=[{"name": "wanda", "email": "wanda@example.org"}],
        )
    (content / "registry-meta.json").write_text(
        json.dumps({"name": name, "dist-tags": {"next": "2.0.0-beta.1"}, "deprecated": {"1.0.0": "upgrade to 1.1"}})
    )
    make_tarball(content, "left.pad_x", "1.0.0", description="Pads strings on the left", keywords=["strings"])
    make_tarball(
        content,
        "innocent-looking",
        "1.0.0",
        files={"README.md": HOSTILE_README},
        description="A README full of attacks",
    )
    make_tarball(
        content,
        "long-readme-pkg",
        "3.2.1",
        files={"README.md": LONG_README, "index.js": "", "index.d.ts": "", **{f"lib/deeply/nested/folder/structure/module-with-a-long-name-{n}.js": "x" * n for n in range(30)}},
        description="A package whose README is long and wide " * 3,
        bin={"long-readme-pkg": "bin/cli.js", "a-command-with-a-rather-long-name": "bin/other.js"},
        engines={"node": ">=18.0.0 || ^16.20.0"},
        dependencies={"left.pad_x": "^1.0.0", "@acme/widget.kit_core-x": "^1.1.0"},
        repository={"type": "git", "url": "git+https://github.com/acme/long-readme.git"},
    )
    for index in range(FILLERS):
        make_tarball(content, f"filler-{index:02d}", "0.1.0", description=f"Filler package number {index}")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, str]]:
    """A built tree served on 127.0.0.1 (base_url = that server), with a small page size."""
    root = tmp_path_factory.mktemp("browser")
    content, out = root / "content", root / "public"
    content.mkdir()
    out.mkdir()
    build_demo_tree(content)
    saved = site.PAGE_SIZE, indexes.SEARCH_LEAF_MAX
    site.PAGE_SIZE, indexes.SEARCH_LEAF_MAX = PAGE_SIZE, LEAF_MAX
    try:
        with static_server(out) as url:
            settings = Settings(content_dir=content, out_dir=out, base_url=url, site_title="Acme packages")
            result = run_build(settings)
            assert not result.errors, result.errors
            yield settings, url
    finally:
        site.PAGE_SIZE, indexes.SEARCH_LEAF_MAX = saved


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def png(width: int, height: int) -> bytes:
    """A plain grey PNG of the given size (for README images that point off this machine)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x99" * (width * 3) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


WIDE_PICTURE = png(1600, 400)


def offline_images(context: BrowserContext) -> None:
    """READMEs point at images on the internet, which this machine cannot reach: every such
    request gets a wide picture instead, so layouts are tested with real, oversized images."""
    context.route(re.compile(r"^https?://(?!127\.0\.0\.1)"), lambda route: route.fulfill(body=WIDE_PICTURE, content_type="image/png"))


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    offline_images(context)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("console", lambda message: _record(problems, message))
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on("dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    opened.problems = problems  # type: ignore[attr-defined]
    yield opened
    context.close()


def _record(problems: list[str], message: ConsoleMessage) -> None:
    if message.type in ("error", "warning"):
        problems.append(f"console {message.type}: {message.text}")


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"site-{name}.png"), full_page=True)


def web_url(base: str, relative: str) -> str:
    return f"{base}-/web/{relative}"


def test_front_page_shows_recent_packages_and_a_big_range_as_sub_ranges(demo: tuple[Settings, str], page: Page) -> None:
    settings, url = demo
    total = FILLERS + 4
    page.goto(web_url(url, "index.html"))
    expect(page).to_have_title("Acme packages")
    expect(page.locator("#package-count")).to_have_text(str(total))
    expect(page.locator("#recent-list .package-name")).to_have_count(site.RECENT_COUNT)
    ranges = page.locator("#ranges .ranges a")
    expect(ranges).to_have_text(["ac", "fi", "in", "le", "lo"])  # @acme/…, filler-…, innocent…, left…, long…
    expect(page.locator("#ranges li", has_text="fi")).to_contain_text(str(FILLERS))
    screenshot(page, "front-page")
    page.locator("#ranges").get_by_role("link", name="fi").click()
    # FILLERS > PAGE_SIZE: the range lists its narrower ranges, never more than PAGE_SIZE rows.
    # Every filler shares "filler-": the link jumps past the ranges that only narrow to it.
    expect(page).to_have_url(re.compile(r"/-/web/browse/fi/index\.html$"))
    chips = page.locator(".subranges a")
    listed = page.locator("#package-list .package-name")
    expect(page.locator("#range-heading")).to_contain_text(f"({FILLERS})")
    expect(chips).to_have_text([f"filler- {FILLERS}"])
    expect(listed).to_have_count(0)
    chips.first.click()
    expect(page).to_have_url(re.compile(r"/-/web/browse/fi/l/l/e/r/-/index\.html$"))
    expect(page.locator(".crumbs a")).to_have_text(["All packages", "fi", "fil", "fill", "fille", "filler"])
    expect(chips).to_have_text([f"filler-0 {PAGE_SIZE}", f"filler-1 {FILLERS - PAGE_SIZE}"])
    screenshot(page, "range-page")
    page.locator(".subranges").get_by_role("link", name=f"filler-1 {FILLERS - PAGE_SIZE}").click()
    expect(page).to_have_url(re.compile(r"/-/web/browse/fi/l/l/e/r/-/1/index\.html$"))
    expect(chips).to_have_count(0)
    expect(listed).to_have_text([f"filler-{n}" for n in range(PAGE_SIZE, FILLERS)])
    expect(page.locator("#package-list")).to_contain_text(f"Filler package number {FILLERS - 1}")
    screenshot(page, "sub-range-page")
    page.locator(".crumbs").get_by_role("link", name="filler-", exact=True).click()  # one level up
    expect(page).to_have_url(re.compile(r"/-/web/browse/fi/l/l/e/r/-/index\.html$"))
    page.locator(".subranges").get_by_role("link", name=f"filler-0 {PAGE_SIZE}").click()
    expect(listed).to_have_count(PAGE_SIZE)
    assert listed.first.inner_text() == "filler-00"
    page.locator(".crumbs").get_by_role("link", name="fi", exact=True).click()  # back to the two-character range
    expect(page).to_have_url(re.compile(r"/-/web/browse/fi/index\.html$"))
    expect(chips).to_have_text([f"filler- {FILLERS}"])
    page.goto(web_url(url, "browse/fi/l/l/e/r/-/1/index.html"))
    page.get_by_role("link", name=f"filler-{FILLERS - 1}").click()
    expect(page.locator("#package-name")).to_have_text(f"filler-{FILLERS - 1}")
    page.get_by_role("link", name="All packages").click()  # the breadcrumb, back to the front page
    expect(page.locator("#package-count")).to_have_text(str(total))
    assert page.problems == []  # type: ignore[attr-defined]


def shard_requests(page: Page) -> list[str]:
    """Paths of the requests the page makes under -/web/search/ from now on (its network log)."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url.split("/-/web/", 1)[1]) if "/-/web/search" in request.url else None)
    return seen


def test_search_box_fetches_only_the_shard_of_the_typed_word(demo: tuple[Settings, str], page: Page) -> None:
    settings, url = demo
    fetched = shard_requests(page)
    page.goto(web_url(url, "index.html"))
    page.wait_for_load_state("networkidle")
    assert fetched == []  # nothing before a word is typed
    search = page.locator("#q")
    results = page.locator("#search-list .package-name")
    search.press_sequentially("widg")
    # The list for the whole word, not one for "wi" rendered during a pause in typing (its fetches
    # are not all sent yet).
    expect(page.locator('#search-list[data-query="widg"] .package-name')).to_have_count(1)
    expect(results.first).to_have_text("@acme/widget.kit_core-x")
    expect(page.locator("#search-status")).to_have_text("1 package matches.")
    expect(page.locator("#browse")).to_be_hidden()
    assert fetched == ["search/wi.json", "search/wid.json"]  # its names' shard and its descriptions' (none: a 404)
    screenshot(page, "search")
    search.fill("filler number")  # the first word picks the shard, every other word narrows it
    expect(results).to_have_count(FILLERS)
    search.fill("filler number 7")
    expect(results).to_have_text(["filler-07"])
    search.fill("wanda")  # a maintainer
    expect(results).to_have_text(["@acme/widget.kit_core-x"])
    search.fill("strings")  # a keyword
    expect(results).to_have_text(["left.pad_x"])
    search.fill("@acme/widget")  # a scope is a word too
    expect(results).to_have_text(["@acme/widget.kit_core-x"])
    search.fill("pads")  # a word of the description only: found through the shard of "pad"
    expect(results).to_have_text(["left.pad_x"])
    expect(page.locator("#search-list .why")).to_have_text(["Match: description word “pads”"])
    search.fill("occasi")  # the start of a description word
    expect(results).to_have_text(["@acme/widget.kit_core-x"])
    search.fill("zz-no-such-word")
    expect(page.locator("#search-status")).to_contain_text("No package matches")
    shards = [path for path in fetched if path.count("/") == 1]  # leaves of a cut shard: see the next test
    assert shards == [f"search/{key}.json" for key in ("wi", "wid", "fi", "fil", "wa", "wan", "st", "str", "ac", "acm", "pa", "pad", "oc", "occ", "zz")]
    search.fill("")
    expect(page.locator("#browse")).to_be_visible()
    expect(page.locator("#search-results")).to_be_hidden()
    # A search can be linked to (keyword links on package pages do this).
    page.goto(web_url(url, "index.html?q=strings"))
    expect(results).to_have_text(["left.pad_x"])
    expect(page.locator("#q")).to_have_value("strings")
    assert [p for p in page.problems if "status of 404" not in p] == []  # type: ignore[attr-defined] (a shard no word starts: 404)


def test_a_shard_cut_into_leaves_is_fetched_whole_and_searched_as_one(demo: tuple[Settings, str], page: Page) -> None:
    """More fillers share the word "filler" than one leaf holds: the search box fetches the
    shard's list of leaves, then each leaf once, and finds every filler in name order."""
    settings, url = demo
    listing = json.loads((settings.out_dir / site.search_shard_path("fi")).read_bytes())
    assert len(listing["leaves"]) > 1
    fetched = shard_requests(page)
    page.goto(web_url(url, "index.html"))
    page.locator("#q").fill("filler")
    results = page.locator("#search-list .package-name")
    expect(results).to_have_text([f"filler-{n:02d}" for n in range(FILLERS)])
    # "fil": the shard of description words starting so, which none has (a 404, found nothing)
    assert sorted(fetched) == sorted(["search/fi.json", "search/fil.json", *(f"search/fi/{leaf}.json" for leaf in listing["leaves"])])
    page.locator("#q").fill("filler number 3")  # narrowing reuses the leaves: nothing fetched again
    expect(results).to_have_text(["filler-03"])
    assert len(fetched) == 2 + len(listing["leaves"])
    assert [p for p in page.problems if "status of 404" not in p] == []  # type: ignore[attr-defined]


def test_a_one_character_query_fetches_nothing(demo: tuple[Settings, str], page: Page) -> None:
    settings, url = demo
    fetched = shard_requests(page)
    page.goto(web_url(url, "index.html"))
    page.locator("#q").fill("w")
    expect(page.locator('#search-status[data-query="w"]')).to_contain_text("at least two letters or digits")
    expect(page.locator("#search-results")).to_be_hidden()
    page.locator("#q").fill("@/ ")
    # The answer to "@/" (the one to "w" says the same words, and the page was idle before typing).
    expect(page.locator('#search-status[data-query="@/"]')).to_contain_text("at least two letters or digits")
    page.wait_for_load_state("networkidle")
    assert fetched == []
    assert page.problems == []  # type: ignore[attr-defined]


def test_a_word_without_a_shard_shows_no_results(demo: tuple[Settings, str], page: Page) -> None:
    settings, url = demo
    assert not (settings.out_dir / site.search_shard_path("qx")).exists()
    fetched = shard_requests(page)
    page.goto(web_url(url, "index.html?q=qxzzy"))
    expect(page.locator("#search-status")).to_have_text(re.compile(r"^No package matches “qxzzy”"))
    expect(page.locator("#search-results")).to_be_hidden()
    assert fetched == ["search/qx.json", "search/qxz.json"]
    assert [p for p in page.problems if "status of 404" not in p] == []  # type: ignore[attr-defined]


def test_the_front_page_and_range_pages_fit_a_phone(demo: tuple[Settings, str], browser: Browser) -> None:
    settings, url = demo
    context = browser.new_context(viewport={"width": 360, "height": 740}, service_workers="block")
    try:
        page = context.new_page()
        pages = {  # page: what it shows (a range of sub-range chips, a sub-range's list under a long breadcrumb)
            "index.html": "#ranges .ranges a",
            "browse/fi/index.html": ".subranges a",
            "browse/fi/l/l/e/r/-/index.html": ".subranges a",
            "browse/fi/l/l/e/r/-/0/index.html": "#package-list .package-name",
            "browse/lo/index.html": "#package-list .package-name",
            "index.html?q=long": "#search-list .package-name",
        }
        for relative, shown in pages.items():
            response = page.goto(web_url(url, relative))
            assert response is not None and response.ok, relative
            page.wait_for_load_state("networkidle")
            expect(page.locator(shown).first).to_be_visible()
            if "q=" in relative:
                expect(page.locator("#search-list .package-name")).to_have_text(["long-readme-pkg"])
            assert page.evaluate("document.documentElement.scrollWidth") <= 360, relative
            if relative == "browse/fi/l/l/e/r/-/0/index.html":
                screenshot(page, "sub-range-phone")
        screenshot(page, "search-phone")
    finally:
        context.close()


def test_package_page_shows_readme_install_and_versions(demo: tuple[Settings, str], page: Page) -> None:
    settings, url = demo
    page.goto(web_url(url, "browse/ac/index.html"))
    page.locator("#package-list").get_by_role("link", name="@acme/widget.kit_core-x").click()
    expect(page).to_have_url(re.compile(r"/-/web/package/@acme/widget\.kit_core-x/index\.html$"))
    expect(page).to_have_title("@acme/widget.kit_core-x 1.1.0 · Acme packages")
    readme = page.locator("#readme")
    expect(readme.locator("h1")).to_have_text("Widget kit")
    expect(readme.locator("h2")).to_have_text("Usage")
    expect(readme.locator("table td").first).to_have_text("size")
    expect(readme.locator("pre code")).to_contain_text("kit.make({ size: 3 });")
    expect(page.locator("#install-npm")).to_have_text(f"npm install @acme/widget.kit_core-x --registry={url}")
    expect(page.locator("#install-pnpm")).to_have_text(f"pnpm add @acme/widget.kit_core-x --registry={url}")
    expect(page.locator("#install-yarn")).to_have_text(f"yarn add @acme/widget.kit_core-x --registry={url}")
    expect(page.locator("#npmrc")).to_have_text(f"@acme:registry={url}")
    rows = page.locator("table.versions tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("2.0.0-beta.1")
    expect(rows.nth(0)).to_contain_text("next")
    expect(rows.nth(1)).to_contain_text("latest")
    expect(rows.nth(2)).to_contain_text("Deprecated: upgrade to 1.1")
    expect(page.locator("#dist-tags")).to_contain_text("latest 1.1.0")
    expect(page.locator("#license")).to_have_text("MIT")
    expect(page.locator("a#repository")).to_have_attribute("href", "https://github.com/acme/widget-kit")
    expect(page.locator("#maintainers")).to_contain_text("wanda")
    screenshot(page, "package")
    # The tarball link downloads the real tarball, relative to wherever the tree is served.
    tarball = page.request.get(rows.nth(1).get_by_role("link", name=".tgz").evaluate("a => a.href"))
    assert tarball.ok and tarball.body()[:2] == b"\x1f\x8b"
    # Dependencies link when the package is in this registry, and only then.
    dependencies = page.locator(".deps:not(#dependents) .dep-list")
    expect(dependencies.locator("a")).to_have_count(1)
    expect(dependencies).to_contain_text("not-in-this-registry")
    dependencies.get_by_role("link", name="left.pad_x").click()
    expect(page.locator("#package-name")).to_have_text("left.pad_x")
    expect(page.locator("#readme")).to_have_text("This package has no README.")
    assert page.problems == []  # type: ignore[attr-defined]


def test_a_hostile_readme_runs_no_script(demo: tuple[Settings, str], page: Page) -> None:
    settings, url = demo
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(web_url(url, "package/innocent-looking/index.html"))
    page.wait_for_load_state("networkidle")
    expect(page.locator("#readme h1")).to_have_text("Totally normal package")
    expect(page.locator("#readme")).to_contain_text("Text after the attacks.")
    readme = page.locator("#readme")
    readme.get_by_text("hover me").hover()
    readme.locator("summary").click()
    readme.get_by_text("click me").click()
    readme.get_by_text("a javascript link").click()  # plain text: markdown refused to link it
    readme.get_by_text("data link").click()
    page.wait_for_load_state("networkidle")
    screenshot(page, "hostile-readme")
    assert page.evaluate("() => window.__pwned") is None
    assert page.title() == "innocent-looking 1.0.0 · Acme packages"
    assert page.url.endswith("/-/web/package/innocent-looking/index.html")
    assert page.locator("#readme script, #readme iframe, #readme svg").count() == 0
    assert page.locator("#readme [onerror], #readme [onmouseover], #readme [ontoggle]").count() == 0
    assert not any(u.startswith(("javascript:", "data:")) for u in requested)
    # Only the broken image (a plain 404) may complain; no CSP violation, no page error, no dialog.
    assert [p for p in page.problems if "status of 404" not in p] == []  # type: ignore[attr-defined]


def test_links_work_from_a_sub_path_and_a_scoped_page(demo: tuple[Settings, str], page: Page) -> None:
    """Relative links: opening a deep page first, every link still lands inside the same tree."""
    settings, url = demo
    page.goto(web_url(url, "package/@acme/widget.kit_core-x/index.html"))
    page.get_by_role("link", name="ui").click()  # a keyword: back to the front page, searching
    expect(page).to_have_url(re.compile(r"/-/web/index\.html\?q=ui$"))
    expect(page.locator("#search-list .package-name")).to_have_count(1)
    page.locator("#search-list").get_by_role("link", name="@acme/widget.kit_core-x").click()
    expect(page.locator("#package-name")).to_have_text("@acme/widget.kit_core-x")
    assert page.problems == []  # type: ignore[attr-defined]
    page.get_by_role("link", name="Package document (JSON)").click()
    document = json.loads(page.locator("body").inner_text())
    assert document["name"] == "@acme/widget.kit_core-x"


def test_a_second_build_of_the_browsed_tree_rewrites_nothing(demo: tuple[Settings, str]) -> None:
    """The pages just browsed stay byte for byte and stat for stat: an unchanged content/ rewrites no file
    (a CDN would otherwise see new Last-Modified values and drop its cache)."""
    settings, _ = demo

    def tree() -> dict[str, tuple[bytes, int]]:
        files = (p for p in sorted(settings.out_dir.rglob("*")) if p.is_file() and ".registry-gen" not in p.parts)
        return {str(p.relative_to(settings.out_dir)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}

    before = tree()
    again = run_build(dataclasses.replace(settings))
    assert again.written == [] and again.removed == []
    assert tree() == before and len(before) > 20


def test_the_not_found_page_offers_a_search_that_finds_the_package(demo: tuple[Settings, str], page: Page) -> None:
    """A host that answers a missing package page with -/web/404.html (nginx and the API do): its
    "Search for it" link opens the front page searching that name, through the name's shard."""
    settings, url = demo
    missing = web_url(url, "package/left/index.html")
    not_found = (settings.out_dir / site.NOT_FOUND_PAGE).read_bytes()
    page.route(missing, lambda route: route.fulfill(status=404, body=not_found, content_type="text/html; charset=utf-8"))
    fetched = shard_requests(page)
    page.goto(missing)
    expect(page.locator("#not-found-detail")).to_contain_text("There is no package called left in this registry.")
    page.get_by_role("link", name="Search for it").click()
    expect(page).to_have_url(re.compile(r"/-/web/index\.html\?q=left$"))
    expect(page.locator("#search-list .package-name")).to_have_text(["left.pad_x"])
    assert fetched == ["search/le.json", "search/lef.json"]


# ---------------------------------------------------------------- ranking (the search box's pure part)

RANK_WORDS = ["express", "expr", "minimal", "minimalist", "router", "web", "sinatra", "exp", "mini", "rout", "we", "app"]


def expected_match(record: dict[str, Any], text: str) -> int | None:
    """The rank the search box must give `record` for `text`: the one ranking the API's
    /-/v1/search uses too (site_search.match_rank), for a record whose other words are all
    somewhere in its name, description, keywords or maintainers; None when it does not match."""
    words = [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]
    rest = words[:]
    rest.remove(next(w for w in words if len(w) >= 2))
    haystack = "\n".join([record["name"], record["description"], " ".join(record["keywords"]), " ".join(record["maintainers"])]).lower()
    if not all(term in haystack for term in rest):
        return None
    return match_rank(record["name"], record["description"], record["keywords"], record["maintainers"], text)


def random_record(rng: random.Random, index: int) -> dict[str, Any]:
    pick = lambda n: rng.sample(RANK_WORDS, rng.randint(0, n))  # noqa: E731
    name = "-".join(pick(2) or ["pkg"]) + rng.choice(["", f"-{index}", f".{index}x"])
    return {
        "name": rng.choice(["", "@scope/"]) + name if rng.random() < 0.8 else rng.choice(RANK_WORDS),
        "description": " ".join(pick(5)).capitalize(),
        "keywords": pick(3),
        "maintainers": pick(1),
        "version": "1.0.0",
        "modified": "",
    }


def test_the_ranking_puts_the_exact_name_first_then_name_starts_keywords_and_descriptions(demo: tuple[Settings, str], page: Page) -> None:
    """A property test of the search box's ranking, on 300 random queries over random records:
    exactly the packages that match are found, best reason first (exact name, name start, name
    word, keyword, maintainer, description word), by name within a reason, each with its reason."""
    settings, url = demo
    page.goto(web_url(url, "index.html"))
    rng = random.Random(31)
    for round_ in range(300):
        records = [random_record(rng, n) for n in range(rng.randint(1, 25))]
        unique = list({r["name"]: r for r in reversed(records)}.values())  # names are unique in a registry
        text = " ".join(rng.sample(RANK_WORDS, rng.choice((1, 1, 1, 2))))
        found = page.evaluate("([records, text]) => window.registrySearch(records, text)", [unique, text])
        expected = sorted(((rank, r["name"]) for r in unique if (rank := expected_match(r, text)) is not None))
        assert [(m["rank"], m["name"]) for m in found] == expected, (round_, text, records)
        assert all(m["why"].startswith(MATCH_REASONS[m["rank"]]) for m in found)
        if any(r["name"] == text for r in unique):
            assert found[0]["name"] == text and found[0]["why"] == "exact name"
