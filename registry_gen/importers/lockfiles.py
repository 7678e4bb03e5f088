"""Lockfile parsers (pure): package-lock.json / npm-shrinkwrap.json (v1-v3), pnpm-lock.yaml
(v5-v9), yarn.lock v1 and yarn berry. Each yields the registry packages the lockfile resolves."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from registry_gen.importers.model import ImportProblem, Skipped
from registry_gen.names import is_valid_name
from registry_gen.versions import is_valid_version


@dataclass(frozen=True)
class LockEntry:
    name: str
    version: str
    resolved: str | None  # tarball URL when the lockfile records one
    integrity: str | None  # SRI, or None (yarn berry's checksum is of its own zip, not the tarball)
    shasum: str | None = None


@dataclass(frozen=True)
class Lockfile:
    kind: str  # npm | pnpm | yarn1 | yarn-berry
    entries: tuple[LockEntry, ...]
    skipped: tuple[Skipped, ...]


def parse_lockfile(filename: str, raw: bytes) -> Lockfile:
    """Dispatches on the file name (and, for yarn.lock, on its content)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportProblem(f"{filename}: not UTF-8 text ({exc})") from exc
    if filename.endswith((".json",)):
        return parse_package_lock(filename, text)
    if filename.endswith(".yaml") or filename.endswith(".yml"):
        return parse_pnpm_lock(filename, text)
    if filename.endswith(".lock"):
        if re.search(r"^__metadata:", text, re.MULTILINE):
            return parse_yarn_berry(filename, text)
        return parse_yarn_v1(filename, text)
    raise ImportProblem(
        f"{filename}: unknown lockfile (expected package-lock.json, npm-shrinkwrap.json, pnpm-lock.yaml or yarn.lock)"
    )


def _collect(kind: str, found: Iterator[LockEntry | Skipped]) -> Lockfile:
    entries: dict[tuple[str, str], LockEntry] = {}
    skipped: list[Skipped] = []
    for item in found:
        if isinstance(item, Skipped):
            skipped.append(item)
        elif not is_valid_name(item.name) or not is_valid_version(item.version):
            skipped.append(Skipped(f"{item.name}@{item.version}", "not a registry name and version"))
        else:
            entries.setdefault((item.name, item.version), item)
    return Lockfile(kind, tuple(entries.values()), tuple(skipped))


def _registry_tarball(resolved: object) -> bool:
    return isinstance(resolved, str) and resolved.startswith(("http://", "https://")) and "/-/" in resolved


# ---------------------------------------------------------------- npm


def parse_package_lock(filename: str, text: str) -> Lockfile:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportProblem(f"{filename}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ImportProblem(f"{filename}: not a JSON object")
    if isinstance(data.get("packages"), dict):
        return _collect("npm", _npm_packages(filename, data["packages"]))
    if isinstance(data.get("dependencies"), dict):
        return _collect("npm", _npm_v1(filename, data["dependencies"]))
    raise ImportProblem(f"{filename}: neither `packages` (lockfileVersion 2/3) nor `dependencies` (1)")


def _npm_packages(filename: str, packages: Mapping[str, Any]) -> Iterator[LockEntry | Skipped]:
    for key, entry in packages.items():
        if key == "" or not isinstance(entry, dict) or entry.get("link") or entry.get("inBundle"):
            continue
        if "node_modules/" not in key:
            continue  # a workspace folder: the project's own code
        name = entry.get("name") or key.rsplit("node_modules/", 1)[1]
        where = f"{filename}: packages[{key!r}]"
        if not isinstance(entry.get("version"), str):
            yield Skipped(where, "no version")
        elif not _registry_tarball(entry.get("resolved")):
            yield Skipped(f"{name}@{entry['version']}", f"resolved {entry.get('resolved')!r} is not a registry tarball")
        else:
            yield LockEntry(str(name), entry["version"], entry["resolved"], entry.get("integrity"))


def _npm_v1(filename: str, dependencies: Mapping[str, Any]) -> Iterator[LockEntry | Skipped]:
    for name, entry in dependencies.items():
        if not isinstance(entry, dict) or entry.get("bundled"):
            continue
        version = str(entry.get("version", ""))
        if _registry_tarball(entry.get("resolved")):
            real = re.match(r"^npm:(.+)@([^@]+)$", version)
            yield LockEntry(real.group(1) if real else name, real.group(2) if real else version, entry["resolved"], entry.get("integrity"))
        else:
            yield Skipped(f"{name}@{version}", f"resolved {entry.get('resolved')!r} is not a registry tarball")
        if isinstance(entry.get("dependencies"), dict):
            yield from _npm_v1(filename, entry["dependencies"])


# ---------------------------------------------------------------- pnpm


def _yaml(filename: str, text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ImportProblem(f"{filename}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise ImportProblem(f"{filename}: not a YAML mapping")
    return data


def pnpm_key(key: str) -> tuple[str, str] | None:
    """(name, version) of a `packages` key: `name@1.0.0` (v9), `/name@1.0.0(peer@2)` (v6), `/name/1.0.0_peer@2` (v5)."""
    key = key.split("(")[0].lstrip("/")
    segments = key.split("/")
    if len(segments) == (3 if key.startswith("@") else 2):  # v5: the version is a path segment
        return "/".join(segments[:-1]), segments[-1].split("_")[0]
    at = key.rfind("@")
    return (key[:at], key[at + 1 :]) if at > 0 else None


def parse_pnpm_lock(filename: str, text: str) -> Lockfile:
    data = _yaml(filename, text)
    if "lockfileVersion" not in data:
        raise ImportProblem(f"{filename}: no lockfileVersion: not a pnpm lockfile")
    packages = data.get("packages") or {}
    if not isinstance(packages, dict):
        raise ImportProblem(f"{filename}: `packages` is not a mapping")
    return _collect("pnpm", _pnpm_entries(filename, packages))


def _pnpm_entries(filename: str, packages: Mapping[str, Any]) -> Iterator[LockEntry | Skipped]:
    for key, entry in packages.items():
        parsed = pnpm_key(str(key))
        resolution = entry.get("resolution") if isinstance(entry, dict) else None
        if parsed is None or not isinstance(resolution, dict):
            yield Skipped(f"{filename}: packages[{key!r}]", "no name, version or resolution")
            continue
        name, version = str(entry.get("name") or parsed[0]), str(entry.get("version") or parsed[1])
        if resolution.get("type") in ("git", "directory") or ("tarball" in resolution and "integrity" not in resolution):
            yield Skipped(f"{name}@{version}", f"resolved from {resolution.get('type') or resolution.get('tarball')}, not a registry")
            continue
        yield LockEntry(name, version, resolution.get("tarball"), resolution.get("integrity"))


# ---------------------------------------------------------------- yarn


def _yarn_descriptor_name(descriptor: str) -> str:
    """`name@range`, `@scope/name@range` -> the name (a `alias@npm:real@range` gives the alias)."""
    descriptor = descriptor.strip().strip('"')
    at = descriptor.find("@", 1)
    return descriptor[:at] if at > 0 else descriptor


def parse_yarn_v1(filename: str, text: str) -> Lockfile:
    if "# yarn lockfile v1" not in text[:400]:
        raise ImportProblem(f"{filename}: no `# yarn lockfile v1` header and no `__metadata`: not a yarn lockfile")
    return _collect("yarn1", _yarn_v1_entries(filename, text))


def _yarn_v1_blocks(text: str) -> Iterator[tuple[str, dict[str, str]]]:
    header, fields = None, {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            if header is not None:
                yield header, fields
            header, fields = line.rstrip(":"), {}
        elif line.startswith("  ") and not line.startswith("    ") and header is not None:
            key, _, value = line.strip().partition(" ")
            fields[key.strip('"')] = value.strip().strip('"')
    if header is not None:
        yield header, fields


def _yarn_v1_entries(filename: str, text: str) -> Iterator[LockEntry | Skipped]:
    for header, fields in _yarn_v1_blocks(text):
        first = header.split(",")[0].strip().strip('"')
        name = _yarn_descriptor_name(first)
        alias = re.match(r"^npm:(.+)@[^@]*$", first[len(name) + 1 :])
        name = alias.group(1) if alias else name
        version, resolved = fields.get("version"), fields.get("resolved")
        if not version:
            yield Skipped(f"{filename}: {header!r}", "no version")
        elif not _registry_tarball(resolved):
            yield Skipped(f"{name}@{version}", f"resolved {resolved!r} is not a registry tarball")
        else:
            url, _, sha1 = str(resolved).partition("#")
            yield LockEntry(name, version, url, fields.get("integrity"), sha1 if re.fullmatch(r"[0-9a-f]{40}", sha1) else None)


def parse_yarn_berry(filename: str, text: str) -> Lockfile:
    data = _yaml(filename, text)
    return _collect("yarn-berry", _berry_entries(filename, data))


def _berry_entries(filename: str, data: Mapping[str, Any]) -> Iterator[LockEntry | Skipped]:
    for key, entry in data.items():
        if key == "__metadata":
            continue
        resolution = entry.get("resolution") if isinstance(entry, dict) else None
        if not isinstance(resolution, str):
            yield Skipped(f"{filename}: {key!r}", "no resolution")
            continue
        name, sep, version = resolution.rpartition("@npm:")
        if not sep:
            if "@workspace:" not in resolution:
                yield Skipped(resolution, "not resolved from a registry (only npm: resolutions are imported)")
            continue
        yield LockEntry(name, version, None, None)
