"""`npm search` against a static host: npm says search is not there, never lists every package.

A static host ignores the query string, so an unfiltered document at /-/v1/search would answer
every search with the whole registry. The tree keeps that document at -/search.json for the API
(which filters it; nginx routes /-/v1/search there) and leaves /-/v1/search unanswered.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.layout import SEARCH_DOCUMENT
from registry_gen.settings import Settings
from tests.support import Npm, make_tarball, static_server

pytestmark = pytest.mark.slow


def test_npm_search_on_a_static_host_reports_no_search_instead_of_every_package(tmp_path: Path) -> None:
    content, out = tmp_path / "content", tmp_path / "public"
    content.mkdir()
    out.mkdir()
    make_tarball(content, "alpha-widget", "1.0.0", description="first")
    make_tarball(content, "beta-gadget", "1.0.0", description="second")
    # A tree built by an earlier registry-gen kept the document where a static host serves it.
    legacy = out / "-/v1/search/index.html"
    legacy.parent.mkdir(parents=True)
    legacy.write_text('{"objects":[],"total":0}')
    with static_server(out) as url:
        result = run_build(Settings(content_dir=content, out_dir=out, base_url=url, data_dir=tmp_path / "data"))
        assert result.errors == []
        assert not (out / "-/v1/search").exists() and "-/v1/search" in result.removed
        npm = Npm(tmp_path / "home", url)
        for query in ("zzz-matches-nothing", "alpha"):
            proc = npm.run("search", query, cwd=tmp_path, check=False, timeout=120)
            said = proc.stdout + proc.stderr
            assert proc.returncode != 0, said
            assert "404" in said and "/-/v1/search" in said, said
            assert "alpha-widget" not in proc.stdout and "beta-gadget" not in proc.stdout, said
        # The API's source document is still built, unfiltered, away from the search URL.
        document = json.loads((out / SEARCH_DOCUMENT).read_bytes())
        assert sorted(o["package"]["name"] for o in document["objects"]) == ["alpha-widget", "beta-gadget"]
