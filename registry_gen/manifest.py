"""package.json: the checks that keep clients working, and npm's spelling of platform values.

`validate_manifest` collects every problem that would break npm, pnpm or yarn (and so refuses the
archive). The specification's softer rules are a lint, in `lint.py`, reported by `registry-gen check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry_gen.errors import FieldProblem, InvalidManifest, InvalidName, InvalidVersion
from registry_gen.names import tarball_filename, validate_name
from registry_gen.versions import validate_version

# The specification's names for platforms, and the spelling npm's platform check compares with.
OS_TO_NPM = {"macos": "darwin", "windows": "win32"}
CPU_TO_NPM = {"x86_64": "x64", "x86": "ia32"}

_DEPENDENCY_FIELDS = (
    "dependencies",
    "devDependencies",
    "optionalDependencies",
    "peerDependencies",
)
_STRING_FIELDS = ("description", "main", "types", "typings", "homepage", "module", "license")
_STRING_LIST_FIELDS = ("keywords", "os", "cpu", "files", "libc")
_OBJECT_FIELDS = ("scripts", "engines", "directories", "publishConfig", "peerDependenciesMeta")


def _is_string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def manifest_problems(raw: Any) -> list[FieldProblem]:
    """Every problem of `raw` that breaks clients; empty when the descriptor is usable."""
    if not isinstance(raw, dict):
        return [FieldProblem("(root)", "manifest-object", "package.json must be a JSON object")]
    problems: list[FieldProblem] = []
    try:
        validate_name(raw.get("name"))
    except InvalidName as exc:
        problems.append(FieldProblem("name", "name-valid", str(exc) if "name" in raw else "name is missing"))
    try:
        validate_version(raw.get("version"))
    except InvalidVersion as exc:
        problems.append(
            FieldProblem("version", "version-semver", str(exc) if "version" in raw else "version is missing")
        )
    if not problems:
        try:
            tarball_filename(raw["name"], raw["version"])
        except InvalidName as exc:
            problems.append(FieldProblem("version", "version-length", str(exc)))
    for field in _DEPENDENCY_FIELDS:
        if field in raw and not _is_string_map(raw[field]):
            problems.append(FieldProblem(field, "type", f"{field} must be an object of name -> version range"))
    for field in _STRING_FIELDS:
        if field in raw and raw[field] is not None and not isinstance(raw[field], str):
            problems.append(FieldProblem(field, "type", f"{field} must be a string"))
    for field in _STRING_LIST_FIELDS:
        if field in raw and not _is_string_list(raw[field]):
            problems.append(FieldProblem(field, "type", f"{field} must be an array of strings"))
    for field in _OBJECT_FIELDS:
        if field in raw and not isinstance(raw[field], dict):
            problems.append(FieldProblem(field, "type", f"{field} must be an object"))
    if "scripts" in raw and isinstance(raw["scripts"], dict) and not _is_string_map(raw["scripts"]):
        problems.append(FieldProblem("scripts", "type", "every script must be a string command"))
    if "bin" in raw and not (isinstance(raw["bin"], str) or _is_string_map(raw["bin"])):
        problems.append(FieldProblem("bin", "type", "bin must be a path or an object of command -> path"))
    for field in ("bundleDependencies", "bundledDependencies"):
        if field in raw and not (isinstance(raw[field], bool) or _is_string_list(raw[field])):
            problems.append(FieldProblem(field, "type", f"{field} must be a boolean or an array of names"))
    return problems


def validate_manifest(raw: Any) -> dict[str, Any]:
    """Returns the descriptor normalised for the packument, or raises InvalidManifest."""
    problems = manifest_problems(raw)
    if problems:
        raise InvalidManifest(problems)
    return normalize_manifest(raw)


def _npm_platforms(values: list[str], mapping: Mapping[str, str]) -> list[str]:
    result = []
    for value in values:
        negated = value.startswith("!")
        bare = value[1:] if negated else value
        spelled = mapping.get(bare.lower(), bare)
        result.append(("!" if negated else "") + spelled)
    return result


def normalize_manifest(raw: dict[str, Any]) -> dict[str, Any]:
    """The version object as the packument carries it.

    Underscore fields from the archive (`_id`, `_resolved`, ...) are dropped: they are the
    registry's to set, and a crafted archive must not spoof them. `readme` lives at the top level.
    """
    manifest = {k: v for k, v in raw.items() if not k.startswith("_") and k not in ("readme", "readmeFilename")}
    manifest["version"] = validate_version(raw["version"])
    if "os" in manifest:
        manifest["os"] = _npm_platforms(manifest["os"], OS_TO_NPM)
    if "cpu" in manifest:
        manifest["cpu"] = _npm_platforms(manifest["cpu"], CPU_TO_NPM)
    return manifest


def has_install_script(manifest: Mapping[str, Any]) -> bool:
    scripts = manifest.get("scripts") or {}
    return any(k in scripts for k in ("preinstall", "install", "postinstall"))
