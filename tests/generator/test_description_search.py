"""The site search over description words (issue 31): which shards a package sits in, that every
shard file stays bounded however many descriptions share a word, and that a publish rewrites only
the leaves of the shards its words touch."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry_gen import site, site_search
from registry_gen.build import run_build
from registry_gen.settings import Settings
from tests.generator.test_listings import _shard_names
from tests.support import make_tarball

WORD = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=9)
PROSE = st.lists(st.one_of(WORD, st.sampled_from(sorted(site_search.DESCRIPTION_STOP_WORDS))), max_size=80)


def summary(name: str, description: str, keywords: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "description": description, "keywords": keywords or [], "maintainers": []}


@given(name=st.lists(WORD, min_size=1, max_size=4), words=PROSE, separator=st.sampled_from([" ", ", ", ". ", "-", "/"]))
def test_a_package_sits_in_a_bounded_set_of_shards_its_name_first(name: list[str], words: list[str], separator: str) -> None:
    package = summary("-".join(name), separator.join(words))
    keys = site_search.search_keys(package)
    described = site_search.description_words(package)
    assert len(keys) <= site_search.SEARCH_KEY_LIMIT and len(set(keys)) == len(keys)
    name_keys = list(dict.fromkeys(t[:2] for t in site_search.search_tokens(package)))
    assert keys[: len(name_keys)] == name_keys  # found by its name whatever its description says
    assert all(len(k) == 2 for k in name_keys) and all(len(k) == site_search.DESCRIPTION_KEY_LENGTH for k in keys[len(name_keys) :])
    assert not set(described) & site_search.DESCRIPTION_STOP_WORDS
    assert all(len(w) >= site_search.DESCRIPTION_KEY_LENGTH and w in separator.join(words).lower() for w in described)
    wanted = list(dict.fromkeys(name_keys + [w[: site_search.DESCRIPTION_KEY_LENGTH] for w in described]))
    assert keys == wanted[: site_search.SEARCH_KEY_LIMIT]  # every description word's shard, up to the limit


def test_stop_words_and_name_words_of_a_description_get_no_shard_of_their_own() -> None:
    package = summary("express", "Fast, unopinionated, minimalist web framework for the Express app", ["web"])
    assert site_search.description_words(package) == ["fast", "unopinionated", "minimalist", "framework", "app"]
    assert site_search.search_keys(package) == ["ex", "we", "fas", "uno", "min", "fra", "app"]


def _built_shards(settings: Settings) -> dict[str, list[list[str]]]:
    root = settings.out_dir / site.SEARCH_SHARD_ROOT
    return {path.stem: _shard_names(settings, path.stem) for path in sorted(root.glob("*.json"))}


def test_every_shard_file_stays_bounded_when_every_description_shares_its_words(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """30 packages whose descriptions all say "minimalist middleware": the shards of those words
    are cut into leaves of at most SEARCH_LEAF_MAX records, each package in each shard once."""
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 4)
    names = [f"pkg-{i:02d}" for i in range(30)]
    for index, name in enumerate(names):
        make_tarball(settings.content_dir, name, "1.0.0", description=f"A minimalist middleware, number {index} of the many")
    assert not run_build(settings).errors
    shards = _built_shards(settings)
    for key in ("min", "mid", "man", "num"):  # "the", "of", "a": stop-words or too short, no shard
        assert len(shards[key]) > 1 and all(1 <= len(leaf) <= 4 for leaf in shards[key]), key
        assert [n for leaf in shards[key] for n in leaf] == names
    assert not {"the", "of", "a"} & set(shards)
    assert all(len(leaf) <= 4 for leaves in shards.values() for leaf in leaves)


def _search_files_by_shard(paths: list[str]) -> dict[str, set[str]]:
    """Search files written, grouped by their shard (`<key>.json` or `<key>/<leaf>.json`), no .gz."""
    grouped: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        if path.startswith(site.SEARCH_SHARD_ROOT + "/") and path.endswith(".json"):
            relative = path[len(site.SEARCH_SHARD_ROOT) + 1 :]
            grouped[relative.split("/")[0].removesuffix(".json")].add(relative)
    return grouped


def test_a_publish_rewrites_only_a_leaf_of_each_shard_its_words_touch(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a registry whose description shards are cut into leaves, publishing a package with a
    long description rewrites at most one leaf (two at a split, and then the list) of each shard
    of its words, at most SEARCH_KEY_LIMIT shards, and nothing of any other shard; a new
    description moves it out of the shards of the words it no longer has."""
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 4)
    for index in range(24):
        make_tarball(settings.content_dir, f"pkg-{index:02d}", "1.0.0", description="A minimalist middleware for tiny servers")
    assert not run_build(settings).errors
    long_description = "Minimalist middleware: " + " ".join(f"{chr(97 + n // 26)}{chr(97 + n % 26)}q{n}" for n in range(40))
    archive = make_tarball(settings.content_dir, "pkg-10a", "1.0.0", description=long_description)
    written = _search_files_by_shard(run_build(settings, changed=[archive]).written)
    keys = site_search.search_keys(summary("pkg-10a", long_description))
    assert len(keys) == site_search.SEARCH_KEY_LIMIT  # the long description reached the limit
    assert set(written) <= set(keys) and "min" in written and "mid" in written
    assert all(len(files) <= 3 for files in written.values()), written
    assert sum(len(files) for files in written.values()) <= 3 * site_search.SEARCH_KEY_LIMIT
    assert "tin" not in written and "ser" not in written  # shards of words it does not have: untouched

    moved = make_tarball(settings.content_dir, "pkg-10a", "1.0.1", description="Tiny servers only")
    written = _search_files_by_shard(run_build(settings, changed=[moved]).written)
    shards = _built_shards(settings)
    assert "pkg-10a" not in [n for leaf in shards["min"] for n in leaf]
    assert "pkg-10a" in [n for leaf in shards["tin"] for n in leaf]
    assert "aaq" not in shards and not (settings.out_dir / site.search_shard_path("aaq")).exists()  # its only member left
    assert set(written) <= set(keys) | {"tin", "ser", "onl"}
