"""Semantic versions and the dist-tag policy (pure functions, on python-semver)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from registry_gen.errors import InvalidVersion

if TYPE_CHECKING:  # semver (~5 ms, it imports its own CLI) loads on the first version parsed
    import semver

MAX_VERSION_LENGTH = 256
MAX_SAFE_INTEGER = 2**53 - 1  # node-semver refuses larger numbers: JavaScript cannot hold them
# node-semver's loose form, which npm cleans every version with before publishing: an optional
# leading "v" or "=", numbers with leading zeros, a prerelease without its hyphen ("1.0.0beta").
_LOOSE_ID = r"(?:\d+|\d*[A-Za-z-][A-Za-z0-9-]*)"
_LOOSE = re.compile(
    r"^[v=\s]*(\d+)\.(\d+)\.(\d+)"
    rf"(?:-?({_LOOSE_ID}(?:\.{_LOOSE_ID})*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?\s*$"
)


def parse_version(text: object) -> semver.Version:
    if not isinstance(text, str):
        raise InvalidVersion("version must be a string")
    if len(text) > MAX_VERSION_LENGTH:
        raise InvalidVersion("version is too long")
    import semver

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


def clean_version(text: object) -> str:
    """The version npm publishes for `text` (node-semver's `clean(text, {loose: true})`).

    Archives from the public registry carry whatever their package.json said ("v1.2.3",
    "1.0.0beta", "1.2.3+build"); the registry's documents carry the cleaned form, and so do ours.
    """
    if not isinstance(text, str):
        raise InvalidVersion("version must be a string")
    if len(text) > MAX_VERSION_LENGTH:
        raise InvalidVersion("version is too long")
    match = _LOOSE.match(text.strip())
    if match is None:
        raise InvalidVersion(f"{text!r} is not a semantic version (major.minor.patch)")
    numbers = [int(part) for part in match.group(1, 2, 3)]
    if any(n > MAX_SAFE_INTEGER for n in numbers):
        raise InvalidVersion(f"{text!r} has a number larger than clients can hold")
    cleaned = ".".join(map(str, numbers))
    if match.group(4):
        identifiers = [str(int(i)) if i.isdigit() else i for i in match.group(4).split(".")]
        if any(i.isdigit() and int(i) > MAX_SAFE_INTEGER for i in identifiers):
            raise InvalidVersion(f"{text!r} has a number larger than clients can hold")
        cleaned += "-" + ".".join(identifiers)
    return str(parse_version(cleaned))


def is_valid_version(text: object) -> bool:
    return isinstance(text, str) and _valid_text(text)


@functools.lru_cache(maxsize=1 << 14)
def _valid_text(text: str) -> bool:
    # Remembered: a mirrored document is checked version by version (typescript: 3,000 of them).
    try:
        validate_version(text)
    except InvalidVersion:
        return False
    return True


@functools.lru_cache(maxsize=1 << 12)
def version_key(text: str) -> semver.Version:
    # Remembered: every build sorts each package's versions several times (pure, immutable result).
    # 4,096: more than a package has; a full build of many packages' distinct versions would
    # otherwise keep up to 65,536 parsed versions to the end.
    import semver

    return semver.Version.parse(text)


OrderKey = tuple[int, int, int, tuple[tuple[int, int | str], ...]]


@functools.lru_cache(maxsize=1 << 14)
def order_key(text: str) -> OrderKey:
    """A plain tuple that sorts as semver precedence does (build metadata ignored; a release after
    its prereleases; prerelease identifiers numeric below alphanumeric, numbers by value, a longer
    list after its prefix). Sorting thousands of versions by it costs a tuple comparison each,
    not a python-semver `compare` call: a 3,000-version package sorted 30x faster."""
    version = version_key(text)
    if version.prerelease is None:
        tail: tuple[tuple[int, int | str], ...] = ((2, 0),)  # above every prerelease identifier list
    else:
        tail = tuple((0, int(part)) if part.isdigit() else (1, part) for part in str(version.prerelease).split("."))
    return (version.major, version.minor, version.patch, tail)


def sort_versions(versions: Iterable[str]) -> list[str]:
    """Ascending semver order."""
    return sorted(versions, key=order_key)


def is_prerelease(text: str) -> bool:
    return version_key(text).prerelease is not None


def highest_stable(versions: Iterable[str]) -> str | None:
    stable = [v for v in versions if not is_prerelease(v)]
    return max(stable, key=order_key) if stable else None


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
        tags["latest"] = highest_stable(present) or max(present, key=order_key)
    return dict(sorted(tags.items()))
