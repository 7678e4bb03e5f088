"""The site search on the real-world corpus (issue 31, acceptance 2): the whole corpus of real npm
tarballs built into a tree, served over http, searched in Debian's Chromium as a person would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from registry_gen import site
from registry_gen.build import run_build
from registry_gen.settings import Settings
from tests.realworld.corpus import ensure_corpus
from tests.realworld.test_conformance import link_farm
from tests.site.test_browser import browser, page, web_url  # noqa: F401 (fixtures)
from tests.support import static_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("search-corpus")
    content = link_farm(ensure_corpus().content, root / "content")
    out = root / "public"
    out.mkdir()
    with static_server(out) as url:
        result = run_build(Settings(content_dir=content, out_dir=out, base_url=url))
        assert not result.errors, result.errors
        yield url, out


def results_for(page: Page, url: str, text: str) -> list[tuple[str, str]]:
    """Types `text` into the front page's search box; the (name, reason) of each result shown."""
    page.goto(web_url(url, "index.html"))
    page.locator("#q").fill(text)
    expect(page.locator("#search-status")).to_contain_text("match")
    names = page.locator("#search-list .package-name").all_text_contents()
    reasons = page.locator("#search-list .why").all_text_contents()
    assert len(names) == len(reasons)
    return list(zip(names, reasons))


def test_a_word_of_express_s_description_finds_it_and_says_so(corpus_site: tuple[str, Path], page: Page) -> None:
    url, out = corpus_site
    assert "express" in (out / site.search_shard_path("min")).read_text()  # its description's word "minimalist"
    found = dict(results_for(page, url, "minimalist"))
    assert found["express"] == "Match: description word “minimalist”"


def test_a_keyword_of_express_finds_it_and_says_so(corpus_site: tuple[str, Path], page: Page) -> None:
    url, _ = corpus_site
    found = dict(results_for(page, url, "sinatra"))
    assert found["express"] == "Match: keyword “sinatra”"


def test_express_ranks_first_for_express(corpus_site: tuple[str, Path], page: Page) -> None:
    """Many corpus packages are named, described or keyworded express-something; the exact name
    comes first, then names starting with it, before the packages only keyworded or described so."""
    url, _ = corpus_site
    found = results_for(page, url, "express")
    assert len(found) > 3
    assert found[0] == ("express", "Match: exact name")
    order = [reason.split("“")[0].removeprefix("Match: ").strip() for _, reason in found]
    ranks = ["exact name", "name starts with", "word of the name", "keyword", "maintainer", "description word"]
    assert [ranks.index(r) for r in order] == sorted(ranks.index(r) for r in order)
    assert page.problems == [] or all("status of 404" in p for p in page.problems)  # type: ignore[attr-defined]
