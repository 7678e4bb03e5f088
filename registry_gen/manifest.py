"""package.json: what makes an archive unaddressable, and the normalisation npm applies.

The rule (RATIONALE.md §6): whatever the public registry hosts, the build hosts. So
`manifest_problems` refuses only what no client could request: a name or version npm cannot
address, or a tarball name no file system stores. Every other oddity (`"main": false`, `engines`
as an array, `keywords` as a string) is published as written, normalised only where npm's own
client normalises before it publishes (`normalize_manifest`), and is at most a lint finding
(`lint.py`, `registry-gen check`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from registry_gen.errors import FieldProblem, InvalidManifest, InvalidName, InvalidVersion
from registry_gen.names import tarball_filename, validate_name
from registry_gen.versions import clean_version

# The specification's names for platforms, and the spelling npm's platform check compares with.
OS_TO_NPM = {"macos": "darwin", "windows": "win32"}
CPU_TO_NPM = {"x86_64": "x64", "x86": "ia32"}

DEPENDENCY_FIELDS = (
    "dependencies",
    "devDependencies",
    "optionalDependencies",
    "peerDependencies",
)
# normalize-package-data splits a string of dependencies on commas and spaces, and a spec such
# as "name@1.x" or "name >=1" at its first range character.
_DEPENDENCY_SEPARATOR = re.compile(r"[,\s]+")
_SPEC_SPLIT = re.compile(r"^([^@\s><=~^]+|@[^/@\s]+/[^@\s><=~^]+)\s*@?\s*(.*)$")


def manifest_problems(raw: Any, *, new_package: bool = False) -> list[FieldProblem]:
    """Every reason no client could address `raw`'s package; empty when it can be hosted.

    `new_package`: apply npm's rule for new names (lowercase...), as the write API does for a
    name it does not hold yet; the build hosts legacy names as the public registry does.
    """
    if not isinstance(raw, dict):
        return [FieldProblem("(root)", "manifest-object", "package.json must be a JSON object")]
    problems: list[FieldProblem] = []
    try:
        validate_name(raw.get("name"), legacy=not new_package)
    except InvalidName as exc:
        problems.append(FieldProblem("name", "name-valid", str(exc) if "name" in raw else "name is missing"))
    try:
        clean_version(raw.get("version"))
    except InvalidVersion as exc:
        problems.append(
            FieldProblem("version", "version-semver", str(exc) if "version" in raw else "version is missing")
        )
    if not problems:
        try:
            tarball_filename(raw["name"], clean_version(raw["version"]))
        except InvalidName as exc:
            problems.append(FieldProblem("version", "version-length", str(exc)))
    return problems


def validate_manifest(raw: Any, *, new_package: bool = False) -> dict[str, Any]:
    """Returns the descriptor normalised for the packument, or raises InvalidManifest."""
    problems = manifest_problems(raw, new_package=new_package)
    if problems:
        raise InvalidManifest(problems)
    return normalize_manifest(raw)


def _npm_platforms(values: list[Any], mapping: Mapping[str, str]) -> list[Any]:
    result = []
    for value in values:
        if not isinstance(value, str):
            result.append(value)
            continue
        negated = value.startswith("!")
        bare = value[1:] if negated else value
        spelled = mapping.get(bare.lower(), bare)
        result.append(("!" if negated else "") + spelled)
    return result


def _split_spec(spec: str) -> tuple[str, str]:
    match = _SPEC_SPLIT.match(spec.strip())
    if match is None:
        return spec.strip(), "*"
    return match.group(1), match.group(2).strip() or "*"


def normalize_dependencies(value: Any) -> dict[str, str] | None:
    """A dependency field as npm's client publishes it: an object of name -> range.

    Very old package.json files list dependencies as an array or a string of specs; npm turned
    those into objects, and dropped entries whose range is not a string. None: drop the field.
    """
    if isinstance(value, str):
        value = [part for part in _DEPENDENCY_SEPARATOR.split(value) if part]
    if isinstance(value, list):
        value = dict(_split_spec(item) for item in value if isinstance(item, str) and item.strip())
    if not isinstance(value, dict):
        return None
    return {name: spec for name, spec in value.items() if isinstance(spec, str)}


def normalize_manifest(raw: dict[str, Any]) -> dict[str, Any]:
    """The version object as the packument carries it.

    Underscore fields from the archive (`_id`, `_resolved`, ...) are dropped: they are the
    registry's to set, and a crafted archive must not spoof them. `readme` lives at the top level.
    Everything else is kept as the publisher wrote it, as the public registry keeps it (`"main":
    false`, `"bin": "cli.js"`, `"keywords": "a, b"`), but for what clients cannot read otherwise:
    the version cleaned as npm cleans it, and dependency lists made objects of name -> range as
    npm's normalize-package-data makes them. Derived documents (search, site) read `keywords`
    through `keyword_list`.
    """
    manifest = {k: v for k, v in raw.items() if not k.startswith("_") and k not in ("readme", "readmeFilename")}
    manifest["version"] = clean_version(raw["version"])
    for field in DEPENDENCY_FIELDS:
        if field in manifest:
            normalized = normalize_dependencies(manifest[field])
            if normalized is None:
                del manifest[field]
            else:
                manifest[field] = normalized
    for field, mapping in (("os", OS_TO_NPM), ("cpu", CPU_TO_NPM)):
        if isinstance(manifest.get(field), list):
            manifest[field] = _npm_platforms(manifest[field], mapping)
    return manifest


def keyword_list(value: Any) -> list[str]:
    """`keywords` as search and the site read it: a string is split as npm's client splits it."""
    if isinstance(value, str):
        return [word for word in re.split(r",\s*", value) if word.strip()]
    if isinstance(value, list):
        return [word for word in value if isinstance(word, str)]
    return []


def has_install_script(manifest: Mapping[str, Any]) -> bool:
    scripts = manifest.get("scripts")
    if not isinstance(scripts, dict):
        return False
    return any(k in scripts for k in ("preinstall", "install", "postinstall"))
