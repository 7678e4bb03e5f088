"""package.json checks that protect clients, and npm's spellings of platform values."""

from __future__ import annotations

from typing import Any

import pytest

from registry_gen.errors import InvalidManifest
from registry_gen.manifest import has_install_script, manifest_problems, validate_manifest


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


def test_every_client_breaking_problem_is_collected_with_its_field() -> None:
    raw = {
        "name": "Bad Name",
        "version": "1.0",
        "dependencies": ["demo-core"],
        "scripts": {"test": 1},
        "bin": 5,
        "keywords": "a, b",
        "os": "linux",
        "description": 7,
    }
    with pytest.raises(InvalidManifest) as caught:
        validate_manifest(raw)
    fields = {p.field for p in caught.value.problems}
    assert fields == {"name", "version", "dependencies", "scripts", "bin", "keywords", "os", "description"}


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
