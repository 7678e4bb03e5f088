"""Semantic versions and the dist-tag policy (RATIONALE.md §2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry_gen.errors import InvalidVersion
from registry_gen.versions import choose_dist_tags, highest_stable, is_prerelease, sort_versions, validate_version


@pytest.mark.parametrize("text", ["0.0.0", "1.2.3", "10.20.30", "1.0.0-beta.1", "1.0.0-rc.1.2", "2.0.0-alpha"])
def test_valid_versions(text: str) -> None:
    assert validate_version(text) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("1.0", "semantic"),
        ("v1.0.0", "semantic"),
        ("01.0.0", "semantic"),
        ("1.0.0-01", "semantic"),
        ("1.0.0+build.5", "build metadata"),  # npm strips it, so two archives could claim one version
        ("", "semantic"),
        ("x" * 300, "too long"),
        (1, "string"),
        (None, "string"),
    ],
)
def test_invalid_versions(text: object, why: str) -> None:
    with pytest.raises(InvalidVersion, match=why):
        validate_version(text)


def test_sort_is_semver_not_text_order() -> None:
    shuffled = ["10.0.0", "1.0.0", "1.0.0-rc.1", "1.0.0-beta.10", "2.0.0", "1.0.0-beta.2", "0.9.0"]
    assert sort_versions(shuffled) == [
        "0.9.0",
        "1.0.0-beta.2",
        "1.0.0-beta.10",
        "1.0.0-rc.1",
        "1.0.0",
        "2.0.0",
        "10.0.0",
    ]


def test_prerelease_detection() -> None:
    assert is_prerelease("2.0.0-beta.1")
    assert not is_prerelease("2.0.0")
    assert highest_stable(["1.0.0", "3.0.0-rc.1", "2.0.0"]) == "2.0.0"
    assert highest_stable(["1.0.0-a"]) is None


def test_latest_is_the_highest_non_prerelease() -> None:
    assert choose_dist_tags(["1.0.0", "1.2.0", "1.10.0", "2.0.0-beta.1"]) == {"latest": "1.10.0"}


def test_latest_from_meta_wins_when_it_names_an_existing_version() -> None:
    tags = choose_dist_tags(["1.0.0", "1.2.0", "2.0.0-beta.1"], {"latest": "1.0.0", "next": "2.0.0-beta.1"})
    assert tags == {"latest": "1.0.0", "next": "2.0.0-beta.1"}


def test_a_prerelease_may_be_latest_when_meta_says_so() -> None:
    assert choose_dist_tags(["1.0.0", "2.0.0-beta.1"], {"latest": "2.0.0-beta.1"})["latest"] == "2.0.0-beta.1"


def test_tags_naming_missing_versions_are_dropped() -> None:
    tags = choose_dist_tags(["1.0.0", "1.1.0"], {"latest": "9.9.9", "beta": "3.0.0-beta.1", "old": "1.0.0"})
    assert tags == {"latest": "1.1.0", "old": "1.0.0"}


def test_prerelease_only_package_still_has_latest() -> None:
    # pnpm and yarn berry fail without `latest` whenever any version exists.
    assert choose_dist_tags(["0.1.0-alpha.1", "0.1.0-alpha.2"]) == {"latest": "0.1.0-alpha.2"}


def test_no_versions_no_tags() -> None:
    assert choose_dist_tags([], {"latest": "1.0.0"}) == {}


def test_tags_are_sorted_for_stable_output() -> None:
    assert list(choose_dist_tags(["1.0.0", "2.0.0"], {"zeta": "1.0.0", "alpha": "2.0.0"})) == [
        "alpha",
        "latest",
        "zeta",
    ]


_IDENTIFIER = st.one_of(st.integers(0, 30).map(str), st.sampled_from(["alpha", "beta", "rc", "a1", "0a", "x-y", "A", "Z"]))
_VERSION = st.builds(
    lambda core, pre, build: "%d.%d.%d" % core + (("-" + ".".join(pre)) if pre else "") + (("+" + build) if build else ""),
    st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 12)),
    st.lists(_IDENTIFIER, max_size=3),
    st.sampled_from(["", "build.1", "sha.abc"]),
)


@given(st.lists(_VERSION, min_size=2, max_size=40))
def test_sorting_by_the_order_key_is_semver_precedence(versions: list[str]) -> None:
    """sort_versions sorts by a plain tuple (30x faster on big packages); it must order exactly as
    python-semver's precedence does, prereleases, numeric and alphanumeric identifiers included."""
    import functools

    import semver

    expected = sorted(versions, key=functools.cmp_to_key(lambda a, b: semver.Version.parse(a).compare(b)))
    assert [semver.Version.parse(v).compare(w) for v, w in zip(sort_versions(versions), expected, strict=True)] == [0] * len(versions)
