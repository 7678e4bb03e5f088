"""Package names: what npm and the static layout can carry, and where a package lives in the tree."""

from __future__ import annotations

import pytest

from registry_gen.errors import InvalidName
from registry_gen.names import (
    escaped_name,
    is_valid_name,
    package_dir,
    split_name,
    tarball_filename,
    tarball_path,
    url_spellings,
    validate_name,
)

VALID = [
    "a",
    "demo-core",
    "demo.core",
    "demo_core",
    "demo~core",
    "0-digits-first",
    "@demo/strings",
    "@d-e.m_o/x",
    "a" * 214,
]


@pytest.mark.parametrize("name", VALID)
def test_valid_names_are_returned_unchanged(name: str) -> None:
    assert validate_name(name) == name
    assert is_valid_name(name)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("-", "reserved"),  # would collide with the generator's own /-/ tree
        ("node_modules", "reserved"),
        ("favicon.ico", "reserved"),
        ("Demo", "lowercase"),
        ("@Demo/x", "lowercase"),
        ("@demo/X", "lowercase"),
        (" demo", "spaces"),
        ("demo ", "spaces"),
        ("de mo", "may only contain"),
        ("../x", "slash"),
        ("..", "dot"),
        (".", "dot"),
        ("x/..", "slash"),
        ("@scope/../x", "@scope/name"),
        ("@scope/..", "dot"),
        ("@scope/.", "dot"),
        ("@scope/", "@scope/name"),
        ("@/x", "@scope/name"),
        ("@scope", "@scope/name"),
        ("@scope/a/b", "@scope/name"),
        ("@sc%ope/x", "URL-safe"),
        (".hidden", "dot"),
        ("_private", "underscore"),
        ("a:b", "may only contain"),
        ("a%2fb", "may only contain"),
        ("a\\b", "may only contain"),
        ("a" * 215, "longer"),
    ],
)
def test_invalid_names_are_refused_with_a_reason(name: str, why: str) -> None:
    with pytest.raises(InvalidName, match=why):
        validate_name(name)
    assert not is_valid_name(name)


def test_a_scoped_name_may_start_with_an_underscore() -> None:
    """npm's "cannot start with an underscore" is about the whole name (@verdaccio/e2e-cli publishes these)."""
    assert validate_name("@e2e-names/_x") == "@e2e-names/_x"
    with pytest.raises(InvalidName, match="underscore"):
        validate_name("_x")


@pytest.mark.parametrize("value", [None, 1, ["a"], {"name": "a"}])
def test_non_strings_are_refused(value: object) -> None:
    with pytest.raises(InvalidName, match="string"):
        validate_name(value)


def test_split_name() -> None:
    assert split_name("@demo/strings") == ("@demo", "strings")
    assert split_name("demo-core") == (None, "demo-core")


def test_scoped_packages_live_under_a_real_slash() -> None:
    assert package_dir("@demo/strings") == "@demo/strings"
    assert tarball_filename("@demo/strings", "1.0.0") == "strings-1.0.0.tgz"
    assert tarball_path("@demo/strings", "1.0.0") == "@demo/strings/-/strings-1.0.0.tgz"
    assert tarball_path("demo-core", "2.0.0-beta.1") == "demo-core/-/demo-core-2.0.0-beta.1.tgz"


@pytest.mark.parametrize("name", ["../x", "@scope/../x", "-"])
def test_tree_paths_refuse_bad_names(name: str) -> None:
    with pytest.raises(InvalidName):
        package_dir(name)
    with pytest.raises(InvalidName):
        tarball_path(name, "1.0.0")


def test_url_spellings_cover_npm_pnpm_and_yarn() -> None:
    assert escaped_name("@demo/strings") == "@demo%2fstrings"  # npm-package-arg's escapedName
    assert escaped_name("demo-core") == "demo-core"
    assert url_spellings("demo-core") == ["/demo-core"]
    assert url_spellings("@demo/strings") == ["/@demo%2fstrings", "/@demo%2Fstrings", "/@demo/strings"]
