"""WCAG 2 AA in a real Chromium: axe-core (the engine of the browsers' developer tools) on every
page type of the default theme, in the light and the dark colour scheme, and the keyboard.

axe-core is the public registry's tarball of one pinned version, fetched with npm into the tests'
cache and checked against its integrity (tests/realworld/corpus.py); the long README is express's
real one, from the real-world corpus when it is fetched (`make corpus`), else fetched alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from registry_gen import site
from registry_gen.build import indexes, run_build
from registry_gen.settings import Settings
from tests.realworld.corpus import Entry, corpus_folder, ensure_tarball, integrity_matches
from tests.site.test_browser import LEAF_MAX, PAGE_SIZE, browser, build_demo_tree, offline_images, page, web_url  # noqa: F401 (fixtures)
from tests.support import make_tarball, static_server

pytestmark = pytest.mark.slow

# `npm view axe-core@4.14.1 dist.integrity`, and express's as the corpus's lockfile pins it.
AXE = Entry("axe-core", "4.14.1", "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==")
EXPRESS = Entry("express", "4.22.3", "sha512-Bdcs4+3qlpVlx2NRn6fgX2Ue2/gGRaPeawebgclM0ERSCqDpA+owF1fdPwjJUTAJWMTuAaxjDf+hzb0/4eKvvw==")
BLOCKING = ("serious", "critical")
SCHEMES = ("light", "dark")
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
# Both schemes change the colours; a phone changes what overflows (code, tables), not the colours.
LOOKS = [("light", "desktop"), ("dark", "desktop"), ("light", "phone")]


def real_tarball(entry: Entry) -> Path:
    """The corpus's copy when `make corpus` fetched it, else this one tarball fetched alone."""
    cached = corpus_folder() / "content" / entry.relpath
    if cached.is_file() and integrity_matches(cached.read_bytes(), entry.integrity):
        return cached
    return ensure_tarball(entry, "single-tarballs")


@pytest.fixture(scope="module")
def axe_source() -> str:
    with tarfile.open(real_tarball(AXE)) as archive:
        member = archive.extractfile("package/axe.min.js")
        assert member is not None
        return member.read().decode()


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The browser tests' demo registry plus express (a long, link-rich real README), served."""
    root = tmp_path_factory.mktemp("a11y")
    content, out = root / "content", root / "public"
    content.mkdir()
    out.mkdir()
    build_demo_tree(content)
    (content / "express").mkdir()
    shutil.copyfile(real_tarball(EXPRESS), content / "express" / EXPRESS.filename)
    make_tarball(content / "old-widget", "old-widget", "1.0.0", description="Widgets the old way")
    (content / "old-widget" / "registry-meta.json").write_text(json.dumps({"name": "old-widget", "deprecated": {"1.0.0": "use @acme/widget.kit_core-x"}}))
    saved = site.PAGE_SIZE, indexes.SEARCH_LEAF_MAX
    site.PAGE_SIZE, indexes.SEARCH_LEAF_MAX = PAGE_SIZE, LEAF_MAX
    try:
        with static_server(out) as url:
            result = run_build(Settings(content_dir=content, out_dir=out, base_url=url, site_title="Acme packages"))
            assert not result.errors, result.errors
            yield url
    finally:
        site.PAGE_SIZE, indexes.SEARCH_LEAF_MAX = saved


def search_for(word: str) -> Callable[[Page], None]:
    """Types `word` into the front page's search box and waits for its results (not those of a
    prefix typed before a pause: the list is rendered again for the whole word)."""
    def act(page: Page) -> None:
        page.locator("#q").press_sequentially(word)
        expect(page.locator(f'#search-list[data-query="{word}"] .package-name').first).to_be_visible()

    return act


def settled(page: Page) -> None:
    page.wait_for_load_state("networkidle")


def open_in_code_tab(path: str) -> Callable[[Page], None]:
    """Waits for the Code tab's file list, then opens `path` in it."""
    def act(page: Page) -> None:
        page.locator(f'#code-files .code-open[title="{path}"]').click()
        expect(page.locator("#code-text")).to_be_visible()

    return act


@dataclasses.dataclass(frozen=True)
class PageType:
    path: str  # below -/web/
    shown: str  # a selector that is visible once the page shows what it is for
    act: Callable[[Page], None] = settled


# Every page type of the theme; a new one is one line here.
PAGES = {
    "front page": PageType("index.html", "#recent-list"),
    "search": PageType("index.html", "#search-list", search_for("express")),
    "package, long README": PageType("package/express/index.html", "#readme h2"),
    "package, tags and deprecation": PageType("package/@acme/widget.kit_core-x/index.html", "table.versions"),
    "version": PageType("package/@acme/widget.kit_core-x/v/1.0.0/index.html", "#deprecation"),
    "Code tab": PageType(f"package/express/v/{EXPRESS.version}/index.html#code", "#code-text", open_in_code_tab("index.js")),
    "browse, ranges": PageType("browse/fi/l/l/e/r/-/index.html", ".subranges"),
    "browse, list": PageType("browse/fi/l/l/e/r/-/1/index.html", "#package-list"),
    "browse, a deprecated package": PageType("browse/ol/index.html", "#package-list .badge-warn"),
    "not found": PageType("404.html", "#not-found"),
}


def violations(page: Page, axe_source: str) -> list[dict[str, Any]]:
    """axe-core's violations of the page as it is now (injected through the DevTools protocol:
    the page's CSP, which allows no inline script, stays in force)."""
    page.evaluate(axe_source)
    return page.evaluate("() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations)")


def describe(found: list[dict[str, Any]]) -> str:
    """One line per violation (id, impact, rule), then one per element (its target, why)."""
    return "\n".join(
        f"{v['id']} ({v['impact']}): {v['help']}\n" + "\n".join(f"    {node['target']} {node['failureSummary']!r}" for node in v["nodes"]) for v in found
    )


@contextlib.contextmanager
def opened(browser: Browser, url: str, kind: str, scheme: str, viewport: str) -> Iterator[Page]:
    """A page of the given type, in a fresh context with that colour scheme and viewport, showing
    what it is for (its search typed, its results in)."""
    page_type = PAGES[kind]
    context = browser.new_context(viewport=VIEWPORTS[viewport], color_scheme=scheme, service_workers="block")  # type: ignore[arg-type]
    try:
        offline_images(context)
        page = context.new_page()
        response = page.goto(web_url(url, page_type.path))
        assert response is not None and response.ok, kind
        page_type.act(page)
        expect(page.locator(page_type.shown).first).to_be_visible()
        yield page
    finally:
        context.close()


@pytest.mark.parametrize(("scheme", "viewport"), LOOKS)
@pytest.mark.parametrize("kind", list(PAGES))
def test_no_serious_or_critical_violation(tree: str, browser: Browser, axe_source: str, kind: str, scheme: str, viewport: str) -> None:
    with opened(browser, tree, kind, scheme, viewport) as page:
        found = [v for v in violations(page, axe_source) if v["impact"] in BLOCKING]
    assert not found, f"{kind} ({scheme}, {viewport}):\n{describe(found)}"


# Every element the keyboard should stop at, visible now, numbered in document order.
MARK_STOPS = """() => {
  const stops = [...document.querySelectorAll('a[href], button, input, select, textarea, summary, [tabindex]')]
    .filter(e => e.tabIndex >= 0 && !e.disabled && e.checkVisibility({visibilityProperty: true}));
  stops.forEach((e, i) => e.setAttribute('data-keyboard-stop', i));
  return stops.map(e => e.outerHTML.slice(0, 160));
}"""
# The focused element, its focus ring, and the colour the ring is drawn on (the nearest background
# around it: the ring sits outside the element).
FOCUSED = """() => {
  const e = document.activeElement;
  if (!e || e === document.body) return null;
  const style = getComputedStyle(e);
  let around = e.parentElement;
  while (around && getComputedStyle(around).backgroundColor === 'rgba(0, 0, 0, 0)') around = around.parentElement;
  return {stop: e.getAttribute('data-keyboard-stop'), html: e.outerHTML.slice(0, 160), visible: e.matches(':focus-visible'),
          style: style.outlineStyle, width: parseFloat(style.outlineWidth), colour: style.outlineColor,
          background: around ? getComputedStyle(around).backgroundColor : 'rgb(255, 255, 255)'};
}"""


def luminance(css_colour: str) -> float:
    red, green, blue = (int(part) / 255 for part in re.findall(r"\d+", css_colour)[:3])
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (red, green, blue)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(one: str, other: str) -> float:
    light, dark = sorted((luminance(one), luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def ring_problem(focused: dict[str, Any]) -> str | None:
    """Why this focus ring is not clearly visible: WCAG 2.4.7, drawn at least 2 px wide and at
    3:1 against what is around it (1.4.11, the measure of 2.4.13)."""
    if not focused["visible"] or focused["style"] in ("none", "hidden") or focused["width"] < 2:
        return f"no ring of 2 px ({focused['style']} {focused['width']}px, :focus-visible {focused['visible']})"
    ratio = contrast(focused["colour"], focused["background"])
    return None if ratio >= 3 else f"ring {focused['colour']} on {focused['background']}: {ratio:.2f}:1"


def tab_through(page: Page) -> tuple[list[str], list[dict[str, Any]]]:
    """Presses Tab until every stop was focused (or twice as many presses): the stops, and what
    each press focused."""
    stops = page.evaluate(MARK_STOPS)
    reached: list[dict[str, Any]] = []
    for _ in range(2 * len(stops) + 4):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        if focused is not None:
            reached.append(focused)
        if {f["stop"] for f in reached} >= {str(n) for n in range(len(stops))}:
            break
    return stops, reached


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("kind", list(PAGES))
def test_tab_reaches_every_control_and_shows_where_it_is(tree: str, browser: Browser, kind: str, scheme: str) -> None:
    with opened(browser, tree, kind, scheme, "desktop") as page:
        stops, reached = tab_through(page)
    assert len(stops) > 1
    missed = [html for n, html in enumerate(stops) if str(n) not in {f["stop"] for f in reached}]
    assert not missed, f"{kind} ({scheme}): Tab never reaches {missed}"
    strays = [f["html"] for f in reached if f["stop"] is None]
    assert not strays, f"{kind} ({scheme}): Tab stops at what is not a control or not visible: {strays}"
    unseen = [f"{f['html']}: {problem}" for f in reached if (problem := ring_problem(f))]
    assert not unseen, f"{kind} ({scheme}): focus not clearly visible on\n" + "\n".join(unseen)


def press_tab_until(page: Page, selector: str, presses: int = 40) -> int:
    """Presses Tab until `selector` has the focus; how many presses it took."""
    for count in range(1, presses + 1):
        page.keyboard.press("Tab")
        if page.evaluate("selector => document.activeElement.matches(selector)", selector):
            return count
    raise AssertionError(f"Tab never reaches {selector} in {presses} presses")


def test_search_by_keyboard_alone(tree: str, page: Page) -> None:
    """The front page's search box is the first stop after the site's name; a result opens with
    Enter; a package page's own search box (in the top bar) searches from there."""
    page.goto(web_url(tree, "index.html"))
    assert press_tab_until(page, "#q") == 2
    page.keyboard.type("express")
    results = page.locator("#search-list .package-name")
    expect(page.locator('#search-list[data-query="express"] .package-name').first).to_have_text("express")
    page.keyboard.press("Tab")
    expect(results.first).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/-/web/package/express/index\.html$"))
    assert press_tab_until(page, "#top-q") == 2
    page.keyboard.type("acme")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/-/web/index\.html\?q=acme$"))
    expect(results).to_have_text(["@acme/widget.kit_core-x"])
    assert [p for p in page.problems if "status of 404" not in p] == []  # type: ignore[attr-defined] (shards no word starts: 404)


CLOCK_START = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms: the page's fake clock starts there


def test_copy_buttons_by_keyboard(tree: str, browser: Browser) -> None:
    """Each copy button is reached by Tab and copies its command on Enter and on Space, saying so
    on the button and to screen readers; a second press while it says "Copied" still returns to "Copy".
    The page's clock stands still: "Copied" lasts 1.2 s of it, which a test process held up longer
    than that on a loaded machine never saw (and a second press could come after it)."""
    context = browser.new_context(viewport=VIEWPORTS["desktop"], service_workers="block")
    try:
        context.grant_permissions(["clipboard-read", "clipboard-write"])
        page = context.new_page()
        page.clock.install(time=CLOCK_START)
        page.goto(web_url(tree, "package/@acme/widget.kit_core-x/index.html"))
        page.clock.pause_at(CLOCK_START + 86_400_000)  # no timer fires until the test moves the clock
        for tool, key in (("npm", "Enter"), ("pnpm", "Space"), ("yarn", "Enter")):
            button = page.locator(f'button[data-copy="install-{tool}"]')
            press_tab_until(page, f'button[data-copy="install-{tool}"]')
            page.keyboard.press(key)
            expect(button).to_have_text("Copied")
            command = page.locator(f"#install-{tool}").inner_text()
            assert command.startswith(f"{tool} ") and page.evaluate("navigator.clipboard.readText()") == command
            expect(page.locator("#copy-status[role=status]")).to_have_text(f"Copied: {command}")
            page.locator("#copy-status").evaluate("status => { status.textContent = ''; }")  # to see the next copy land
            page.keyboard.press(key)  # while it says "Copied"
            expect(page.locator("#copy-status[role=status]")).to_have_text(f"Copied: {command}")
            expect(button).to_have_text("Copied")
            page.clock.run_for(1300)
            expect(button).to_have_text("Copy")
            expect(button).to_be_focused()
    finally:
        context.close()


# ---------------------------------------------------------------- npm's web login, served by the api

@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `registry-gen serve` with one account, for the pages its web login renders."""
    from tests.registry_api.helpers import RegistryProcess, add_user

    process = RegistryProcess(tmp_path_factory.mktemp("weblogin")).start()
    try:
        add_user(process.base, "wanda", "wanda-password-1")
        yield process.base
    finally:
        process.stop()


def blocking(page: Page, axe_source: str) -> str:
    """The page's serious and critical violations, described ('' for none)."""
    return describe([v for v in violations(page, axe_source) if v["impact"] in BLOCKING])


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_the_web_login_pages_have_no_serious_or_critical_violation(registry: str, browser: Browser, axe_source: str, viewport: str) -> None:
    """`npm login`'s pages, each state a person sees: the form, a refused password, the success
    page, and the page of a link that expired."""
    from tests.registry_api.helpers import http

    login_url = http("POST", registry + "-/v1/login", body={}).json["loginUrl"]
    context = browser.new_context(viewport=VIEWPORTS[viewport])  # type: ignore[arg-type]
    found: dict[str, str] = {}
    try:
        page = context.new_page()
        page.goto(login_url)
        expect(page.locator("#confirmation")).to_be_visible()
        found["form"] = blocking(page, axe_source)
        page.fill("#username", "wanda")
        page.fill("#password", "not-the-password")
        page.click("button[type=submit]")
        expect(page.locator(".error")).to_be_visible()
        found["refused"] = blocking(page, axe_source)
        page.fill("#password", "wanda-password-1")
        page.click("button[type=submit]")
        expect(page.locator("h1.ok")).to_be_visible()
        found["logged in"] = blocking(page, axe_source)
        page.goto(registry + "-/v1/login/expired-or-never-issued")
        expect(page.locator("h1.bad")).to_be_visible()
        found["link expired"] = blocking(page, axe_source)
    finally:
        context.close()
    assert not any(found.values()), "\n".join(f"{state} ({viewport}):\n{text}" for state, text in found.items() if text)
