"""The site's build (`make docs`, which `make test` runs) is strict: a broken link or anchor, or a
reference that cannot be made, fails it; the repository files the site includes keep working links;
and each reference is placed by exactly one page."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from refgen import GENERATORS, MARKER
from refgen.repository import PAGES, site_links

from tests.docs.conftest import DOCS, ROOT


def make_docs(source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """The Makefile's `docs` recipe (its flags) over another source folder."""
    return subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(ROOT), "docs", f"DOCS_SOURCE={source}", f"DOCS_OUT={out}"],
        capture_output=True, text=True, timeout=300,
    )


def small_site(tmp_path: Path, page: str) -> Path:
    """A site with the real configuration (extensions, anchors, theme) and two pages."""
    source = tmp_path / "site"
    source.mkdir()
    (source / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(DOCS)!r})\nfrom conf import *\n", encoding="utf-8")
    (source / "index.md").write_text("# Home\n\n## A heading\n\n```{toctree}\npage\n```\n", encoding="utf-8")
    (source / "page.md").write_text(page, encoding="utf-8")
    return source


GOOD_PAGE = "# Page\n\n[home](index.md), [a heading](index.md#a-heading); revoke them with --all.\n\n<!-- generated: npm-api -->\n"


def test_a_site_with_sound_links_builds_and_gets_its_reference(tmp_path: Path) -> None:
    built = make_docs(small_site(tmp_path, GOOD_PAGE), tmp_path / "out")
    assert built.returncode == 0, built.stdout + built.stderr
    html = (tmp_path / "out" / "page.html").read_text(encoding="utf-8")
    assert "/-/v1/search" in html and "only those the caller may read" in html and "generated:" not in html
    assert "with --all." in html  # an option in running text keeps its hyphens (no smart dashes)


@pytest.mark.parametrize(("good", "broken"), [("(index.md)", "(gone.md)"), ("#a-heading", "#no-such-heading")])
def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path, good: str, broken: str) -> None:
    built = make_docs(small_site(tmp_path, GOOD_PAGE.replace(good, broken)), tmp_path / "out")
    said = built.stdout + built.stderr
    assert built.returncode != 0
    assert broken.strip("(#)") in said


def test_a_reference_that_cannot_be_made_fails_the_build(tmp_path: Path) -> None:
    built = make_docs(small_site(tmp_path, GOOD_PAGE.replace("npm-api", "no-such-reference")), tmp_path / "out")
    said = built.stdout + built.stderr
    assert built.returncode != 0 and "no reference named 'no-such-reference'" in said


def test_each_reference_is_placed_by_exactly_one_page() -> None:
    placed = [m["name"] for page in DOCS.rglob("*.md") if "_build" not in page.parts for m in MARKER.finditer(page.read_text(encoding="utf-8"))]
    assert sorted(placed) == sorted(GENERATORS)


@pytest.mark.parametrize("repository_file", sorted(PAGES))
def test_each_repository_file_the_links_point_to_is_included_by_its_page(repository_file: str) -> None:
    page = (DOCS / f"{PAGES[repository_file]}.md").read_text(encoding="utf-8")
    included = re.search(r"```\{include\} (\S+)", page)
    assert included is not None
    assert (DOCS / PAGES[repository_file]).parent.joinpath(included.group(1)).resolve() == ROOT / repository_file


@pytest.mark.parametrize(
    ("included", "markdown", "expected"),
    [
        ("README.md", "see [SECURITY.md](SECURITY.md).", "see [SECURITY.md](/security/index.md)."),
        ("SECURITY.md", "[rules](README.md#private-reads)", "[rules](/project/readme.md#private-reads)"),
        ("README.md", "[the tree](#the-layout-of-the-tree)", "[the tree](#the-layout-of-the-tree)"),
        ("README.md", "[tests/realworld/README.md](tests/realworld/README.md)", "`tests/realworld/README.md`"),
        ("README.md", "[tests/e2e_cli/yarn-plugins/](tests/e2e_cli/yarn-plugins/README.md)", "`tests/e2e_cli/yarn-plugins/README.md`"),
        ("README.md", "[the notes](bench/NOTES.md)", "the notes (`bench/NOTES.md` in the repository)"),
        ("README.md", "[backups](docs/operating/backups.md)", "[backups](/operating/backups.md)"),
        ("SECURITY.md", "[keys](docs/operating/keys.md#rotation)", "[keys](/operating/keys.md#rotation)"),
        ("user_api/AUTH.md", "[logs](../docs/operating/logs.md)", "[logs](/operating/logs.md)"),
        ("user_api/AUTH.md", "[security](../SECURITY.md#the-api)", "[security](/security/index.md#the-api)"),
        ("README.md", "[npm](https://www.npmjs.com/package/x)", "[npm](https://www.npmjs.com/package/x)"),
        ("README.md", "```sh\n[a](SECURITY.md)\n```\n", "```sh\n[a](SECURITY.md)\n```\n"),
        ("README.md", "1. step\n   ```\n   [a](SECURITY.md)\n   ```\n[b](SECURITY.md)", "1. step\n   ```\n   [a](SECURITY.md)\n   ```\n[b](/security/index.md)"),
    ],
)
def test_links_of_an_included_repository_file_work_in_the_site(included: str, markdown: str, expected: str) -> None:
    assert site_links(markdown, included) == expected
