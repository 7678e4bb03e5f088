"""Semantic versions and the dist-tag policy (pure functions, on python-semver)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import semver

from registry_gen.errors import InvalidVersion

MAX_VERSION_LENGTH = 256


def parse_version(text: object) -> semver.Version:
    if not isinstance(text, str):
        raise InvalidVersion("version must be a string")
    if len(text) > MAX_VERSION_LENGTH:
        raise InvalidVersion("version is too long")
    try:
        return semver.Version.parse(text)
    except ValueError as exc:
        raise InvalidVersion(f"{text!r} is not a semantic version (major.minor.patch)") from exc


def validate_version(text: object) -> str:
    """Return the canonical text of a version; build metadata is refused (npm drops it)."""
    version = parse_version(text)
    if version.build:
        raise InvalidVersion(f"{text!r} carries build metadata, which npm discards")
    return str(version)


def is_valid_version(text: object) -> bool:
    try:
        validate_version(text)
    except InvalidVersion:
        return False
    return True


def version_key(text: str) -> semver.Version:
    return semver.Version.parse(text)


def sort_versions(versions: Iterable[str]) -> list[str]:
    """Ascending semver order."""
    return sorted(versions, key=version_key)


def is_prerelease(text: str) -> bool:
    return version_key(text).prerelease is not None


def highest_stable(versions: Iterable[str]) -> str | None:
    stable = [v for v in versions if not is_prerelease(v)]
    return max(stable, key=version_key) if stable else None


def choose_dist_tags(versions: Iterable[str], requested: Mapping[str, str] | None = None) -> dict[str, str]:
    """The dist-tags of a package.

    Requested tags that point at existing versions are kept. `latest` is the requested one when it
    exists, else the highest non-prerelease version, else the highest prerelease: clients (pnpm,
    yarn berry) need `latest` to exist whenever any version does.
    """
    present = list(versions)
    if not present:
        return {}
    known = set(present)
    tags = {tag: v for tag, v in (requested or {}).items() if v in known}
    if "latest" not in tags:
        tags["latest"] = highest_stable(present) or max(present, key=version_key)
    return dict(sorted(tags.items()))
