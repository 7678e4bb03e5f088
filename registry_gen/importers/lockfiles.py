"""Lockfile parsers (pure): package-lock.json / npm-shrinkwrap.json (v1-v3), pnpm-lock.yaml
(v5-v9), yarn.lock v1 and yarn berry. Each yields the registry packages the lockfile resolves, with
or without a `resolved` URL (npm's `omit-lockfile-registry-resolved`, shrinkwraps: fetched by name,
version and integrity), and lists what is no registry package at all (workspaces, `file:`, `link:`,
git, plain URLs) as not applicable."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from registry_gen import ranges
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


def _elsewhere(entry: str, where: object, kind: str | None = None) -> Skipped:
    """An entry that is no registry package: a workspace, a link, git, a plain URL."""
    kind = kind or (ranges.parse_spec("x", where).kind if isinstance(where, str) else ranges.FILE)
    label = {ranges.GIT: "git", ranges.URL: "a URL", ranges.FILE: "a folder or file", ranges.WORKSPACE: "a workspace"}.get(kind, kind)
    return Skipped(entry, f"comes from {label} ({str(where)[:120]}), not from a registry", not_applicable=True)


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
        if key == "" or not isinstance(entry, dict) or entry.get("inBundle"):
            continue  # the project itself; a bundled copy ships inside its parent's tarball
        if "node_modules/" not in key:
            continue  # a workspace's (or a file: dependency's) own folder: listed by the link to it
        where = f"{filename}: packages[{key!r}]"
        resolved = entry.get("resolved")
        name = entry.get("name") or key.rsplit("node_modules/", 1)[1]
        if entry.get("link"):
            yield _elsewhere(str(name), resolved, ranges.FILE)
        elif resolved is not None and not _registry_tarball(resolved):
            yield _elsewhere(f"{name}@{entry.get('version')}", resolved)
        elif not isinstance(entry.get("version"), str):
            yield Skipped(where, "no version", error=True)
        else:  # without `resolved`, npm fetched it from the configured registry
            yield LockEntry(str(name), entry["version"], resolved, entry.get("integrity"))


def _npm_v1(filename: str, dependencies: Mapping[str, Any]) -> Iterator[LockEntry | Skipped]:
    for name, entry in dependencies.items():
        if not isinstance(entry, dict) or entry.get("bundled"):
            continue
        version = str(entry.get("version", ""))
        real = re.match(r"^npm:(.+)@([^@]+)$", version)
        name, version = (real.group(1), real.group(2)) if real else (name, version)
        resolved = entry.get("resolved")
        if is_valid_version(version):  # a registry package; npm may have omitted where it came from
            yield LockEntry(name, version, resolved if _registry_tarball(resolved) else None, entry.get("integrity"))
        else:  # git, file: and URL dependencies record their spec as the version
            yield _elsewhere(f"{name}@{version}", version)
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
            where = resolution.get("repo") or resolution.get("directory") or resolution.get("tarball")
            yield _elsewhere(f"{name}@{version}", str(where) if resolution.get("type") != "git" else f"git+{where}")
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
        wanted = first[first.find("@", 1) + 1 :] if first.find("@", 1) > 0 else "*"
        if not ranges.parse_spec(name, wanted).from_registry and not alias:
            yield _elsewhere(f"{name}@{version}", wanted)
        elif not version:
            yield Skipped(f"{filename}: {header!r}", "no version", error=True)
        elif resolved is not None and not _registry_tarball(resolved):
            yield _elsewhere(f"{name}@{version}", resolved)
        else:  # without `resolved`: from the configured registry
            url, _, sha1 = str(resolved or "").partition("#")
            yield LockEntry(name, version, url or None, fields.get("integrity"), sha1 if re.fullmatch(r"[0-9a-f]{40}", sha1) else None)


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
            if not resolution.endswith("@workspace:."):  # the project itself
                yield _elsewhere(resolution, resolution[resolution.find("@", 1) + 1 :])
            continue
        yield LockEntry(name, version, None, None)
