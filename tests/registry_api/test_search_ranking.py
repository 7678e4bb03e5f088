"""Real npm 11 `npm search` against `registry-gen serve`: the API's /-/v1/search ranks as the site's
search box does (registry_gen.site_search.match_rank), so an exact name comes first even when its
case differs from the query (JSONStream, a real package npm still serves under that name)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.registry_api.helpers import RegistryProcess
from tests.realworld.corpus import Entry
from tests.site.test_accessibility import real_tarball
from tests.support import Npm, make_tarball

pytestmark = pytest.mark.slow

# `npm view JSONStream@1.3.5 dist.integrity`, as the corpus's lockfile pins it.
JSONSTREAM = Entry("JSONStream", "1.3.5", "sha512-E+iruNOY8VV9s4JEbe1aNEm6MiszPRr/UfcHMz0TQh1BXSxHK+ASV1R6W4HpjBhSeS+54PIsAMCBmwD06LLsqQ==")


def test_npm_search_lists_the_exact_name_first_then_as_the_site_ranks(tmp_path: Path) -> None:
    registry = RegistryProcess(tmp_path / "registry")
    content = registry.content
    (content / "JSONStream").mkdir(parents=True)
    shutil.copy(real_tarball(JSONSTREAM), content / "JSONStream")
    make_tarball(content / "ndjsonstream", "ndjsonstream", "1.0.0", description="newline-delimited streams")
    make_tarball(content / "jsonstream-lite", "jsonstream-lite", "1.0.0", description="a smaller parser")
    make_tarball(content / "stream-tools", "stream-tools", "1.0.0", description="pipes", keywords=["jsonstream"])
    make_tarball(content / "parse-helper", "parse-helper", "1.0.0", description="Helps a JSONStream user parse")
    registry.start()
    try:
        npm = Npm(tmp_path / "home", registry.base)
        found = json.loads(npm.run("search", "jsonstream", "--json", cwd=tmp_path, timeout=120).stdout)
    finally:
        registry.stop()
    # exact name (case aside), name start, keyword, description word, then a match inside a word
    # only; before, every name holding the text came first and JSONStream third.
    assert [hit["name"] for hit in found] == ["JSONStream", "jsonstream-lite", "stream-tools", "parse-helper", "ndjsonstream"]
