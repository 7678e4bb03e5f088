"""Hosts without configuration (GitHub Pages and the like), emulated: a static server that
decodes %2f, redirects a folder to its trailing slash, serves index.html, answers every missing
path with /404.html and status 404, and sends its own fixed Cache-Control (max-age=600)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.clients import ClientRun
from tests.hosts.conftest import CellPackages, build_tree
from tests.hosts.servers import pages_like_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory, cell_content: tuple[Path, CellPackages]) -> Iterator[tuple[str, Path]]:
    tree = tmp_path_factory.mktemp("pages") / "public"
    tree.mkdir()
    with pages_like_server(tree) as url:
        build_tree(cell_content[0], tree, url)
        yield url, tree


def test_the_build_writes_what_pages_needs(pages: tuple[str, Path]) -> None:
    _url, tree = pages
    assert (tree / ".nojekyll").is_file()  # no Jekyll pass: every file is served as it is
    assert json.loads((tree / "404.html").read_bytes()) == {"error": "not found"}


def test_missing_package_is_a_404_whose_body_is_json(pages: tuple[str, Path]) -> None:
    url, _tree = pages
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(url + "@demo%2fno-such-package", timeout=30)  # noqa: S310 - 127.0.0.1
    assert caught.value.code == 404
    assert json.loads(caught.value.read()) == {"error": "not found"}


def test_npm_installs_and_reports_missing_packages(
    pages: tuple[str, Path], make_client, tmp_path: Path, cell_content: tuple[Path, CellPackages]
) -> None:
    url, _tree = pages
    cell = cell_content[1]
    client: ClientRun = make_client("npm11", url)
    project = client.new_project(tmp_path / "project")
    client.add(project, *cell.direct)
    for name in cell.direct:
        assert (project / "node_modules" / name / "package.json").is_file()
    missing = client.run("view", "no-such-package-anywhere", cwd=project, check=False)
    assert missing.returncode != 0 and "E404" in missing.stderr
    assert "- not found" in missing.stderr  # npm printed the JSON body's `error`
