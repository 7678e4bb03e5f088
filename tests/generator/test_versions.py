"""Semantic versions and the dist-tag policy (RATIONALE.md §2)."""

from __future__ import annotations

import pytest

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
