"""package.json checks that protect clients, and npm's spellings of platform values."""

from __future__ import annotations

from typing import Any

import pytest

from registry_gen.errors import InvalidManifest
from registry_gen.manifest import has_install_script, keyword_list, manifest_problems, validate_manifest


def _raw(**fields: Any) -> dict[str, Any]:
    return {"name": "demo-pkg", "version": "1.0.0", **fields}


def test_a_minimal_manifest_is_valid() -> None:
    assert validate_manifest(_raw()) == {"name": "demo-pkg", "version": "1.0.0"}


@pytest.mark.parametrize(
    ("fields", "os_out", "cpu_out"),
    [
        ({"os": ["macos", "windows", "linux"]}, ["darwin", "win32", "linux"], None),
        ({"os": ["!windows"]}, ["!win32"], None),
        ({"cpu": ["x86_64", "x86", "arm"]}, None, ["x64", "ia32", "arm"]),
        ({"cpu": ["!x86"], "os": ["MacOS"]}, ["darwin"], ["!ia32"]),
        ({"os": ["darwin"], "cpu": ["x64"]}, ["darwin"], ["x64"]),  # npm spellings pass through
    ],
)
def test_spec_platform_names_become_npm_spellings(fields: dict[str, Any], os_out: Any, cpu_out: Any) -> None:
    manifest = validate_manifest(_raw(**fields))
    assert manifest.get("os") == os_out
    assert manifest.get("cpu") == cpu_out


def test_registry_owned_underscore_fields_and_readme_are_dropped() -> None:
    manifest = validate_manifest(
        _raw(_id="evil@6.6.6", _resolved="http://evil/", readme="x", readmeFilename="R", main="a.js")
    )
    assert manifest == {"name": "demo-pkg", "version": "1.0.0", "main": "a.js"}


def test_only_an_unaddressable_name_or_version_is_refused() -> None:
    raw = {"name": "Bad Name", "version": "1.0", "dependencies": ["demo-core"], "main": False}
    with pytest.raises(InvalidManifest) as caught:
        validate_manifest(raw)
    assert {p.field for p in caught.value.problems} == {"name", "version"}


def test_odd_shapes_the_public_registry_hosts_are_published_as_written() -> None:
    # Each shape is taken from a real package: dunder-proto@1.0.1 (main false), jsonparse@1.3.1
    # (engines array), lodash@4.17.21 (keywords string), mkdirp@0.5.1 (bin string).
    raw = {
        "name": "odd",
        "version": "1.0.0",
        "main": False,
        "engines": ["node >= 0.2.0"],
        "keywords": "modules, stdlib, util",
        "bin": "bin/cmd.js",
        "description": 7,
        "scripts": {"test": 1},
    }
    manifest = validate_manifest(raw)
    assert manifest == raw
    assert keyword_list(manifest["keywords"]) == ["modules", "stdlib", "util"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["demo-core", "left-pad@1.x", "@s/x@^2"], {"demo-core": "*", "left-pad": "1.x", "@s/x": "^2"}),
        ("a, b@1", {"a": "*", "b": "1"}),
        ({"a": "^1", "b": 2}, {"a": "^1"}),  # npm drops a range that is not a string
    ],
)
def test_dependency_lists_become_objects_as_npm_makes_them(value: object, expected: dict[str, str]) -> None:
    assert validate_manifest({"name": "x", "version": "1.0.0", "dependencies": value})["dependencies"] == expected


def test_a_dependency_field_that_is_no_list_or_object_is_dropped() -> None:
    assert "dependencies" not in validate_manifest({"name": "x", "version": "1.0.0", "dependencies": 5})


@pytest.mark.parametrize(("written", "published"), [("v1.2.3", "1.2.3"), ("1.0.0beta", "1.0.0-beta"), ("1.2.3+b", "1.2.3")])
def test_versions_are_cleaned_as_npm_cleans_them(written: str, published: str) -> None:
    assert validate_manifest({"name": "x", "version": written})["version"] == published


def test_capitals_are_hosted_for_legacy_packages_but_refused_for_new_ones() -> None:
    assert validate_manifest({"name": "JSONStream", "version": "1.3.5"})["name"] == "JSONStream"
    with pytest.raises(InvalidManifest, match="lowercase"):
        validate_manifest({"name": "JSONStream", "version": "1.3.5"}, new_package=True)


def test_missing_name_and_version_are_named() -> None:
    problems = manifest_problems({})
    assert [(p.field, p.message) for p in problems] == [("name", "name is missing"), ("version", "version is missing")]


def test_a_non_object_manifest_is_refused() -> None:
    assert [p.rule for p in manifest_problems(["not", "an", "object"])] == ["manifest-object"]


def test_install_script_detection() -> None:
    assert has_install_script({"scripts": {"preinstall": "x"}})
    assert has_install_script({"scripts": {"postinstall": "x"}})
    assert not has_install_script({"scripts": {"test": "x"}})
    assert not has_install_script({})
