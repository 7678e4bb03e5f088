"""Dependency specs as npm reads them, and whether a set of published versions satisfies one.

Pure functions. A spec (the value in `dependencies`) is classified the way npm-package-arg does:
a semver range or a dist-tag is resolved from a registry; an `npm:` alias is resolved from the
registry under the aliased name; git, URL, file and workspace specs never come from a registry.
Range matching is node-semver's (the `node-semver` port: `||`, hyphen ranges, x-ranges, `~`, `^`,
and the rule that a prerelease only matches a comparator naming the same major.minor.patch).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import nodesemver

# Kinds a registry answers; the others are listed as external by `registry-gen verify`.
RANGE, TAG = "range", "tag"
GIT, URL, FILE, WORKSPACE, PROTOCOL, INVALID = "git", "url", "file", "workspace", "protocol", "invalid"
REGISTRY_KINDS = frozenset({RANGE, TAG})

_GIT_PREFIXES = ("git+", "git://", "git@", "github:", "gitlab:", "bitbucket:", "gist:")
_FILE_PREFIXES = ("file:", "link:", "./", "../", "/", "~/", ".\\", "..\\")
_WINDOWS_PATH = re.compile(r"^[a-zA-Z]:[/\\]")
# yarn berry and pnpm protocols that npm itself does not read; never a registry lookup.
_OTHER_PROTOCOLS = ("portal:", "patch:", "exec:", "catalog:")
# npm-package-arg: a spec that is no range is a dist-tag, which must survive encodeURIComponent.
_TAG = re.compile(r"^[A-Za-z0-9\-_.!~*'()]+$")
# "user/repo" or "user/repo#ref": npm's GitHub shorthand.
_GITHUB_SHORTHAND = re.compile(r"^[^@/\s:][^/\s:]*/[^/\s:]+(#.*)?$")
_ANY = ("", "*", "x", "X")
# node-semver logs every invalid range with its traceback at INFO; a tag such as "next" is not a
# range, and that is an answer here, not an event worth a traceback on the user's terminal.
logging.getLogger("nodesemver").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Spec:
    """What a dependency spec asks for: `name` is the package looked up (the alias target)."""

    kind: str
    name: str
    selector: str

    @property
    def from_registry(self) -> bool:
        return self.kind in REGISTRY_KINDS


def parse_spec(name: str, spec: str) -> Spec:
    """Classify `spec`, the value of dependency `name`."""
    text = spec.strip()
    if text.startswith("npm:"):
        return _alias(text[len("npm:"):])
    kind = _non_registry_kind(text)
    if kind is not None:
        return Spec(kind, name, text)
    if is_valid_range(text):
        return Spec(RANGE, name, text)
    if _TAG.match(text):
        return Spec(TAG, name, text)
    return Spec(INVALID, name, text)


def _alias(target: str) -> Spec:
    """`npm:pkg@range` (or `npm:@scope/pkg@range`, or `npm:pkg` meaning any version)."""
    at = target.find("@", 1)
    real, selector = (target, "*") if at < 0 else (target[:at], target[at + 1:])
    if not real or (selector and _non_registry_kind(selector) is not None):
        return Spec(INVALID, real or target, selector)
    inner = parse_spec(real, selector)
    return Spec(inner.kind, real, inner.selector)


def _non_registry_kind(text: str) -> str | None:
    lowered = text.lower()
    if lowered.startswith(_GIT_PREFIXES):
        return GIT
    if lowered.startswith(("http://", "https://")):
        return URL
    if lowered.startswith(_FILE_PREFIXES) or _WINDOWS_PATH.match(text):
        return FILE
    if lowered.startswith("workspace:"):
        return WORKSPACE
    if lowered.startswith(_OTHER_PROTOCOLS):
        return PROTOCOL
    if _GITHUB_SHORTHAND.match(text):
        return GIT
    return None


def is_valid_range(text: str) -> bool:
    """node-semver's `validRange(text, {loose: true})` is not null (npm reads ranges loosely)."""
    try:
        return nodesemver.valid_range(text, loose=True) is not None
    except (ValueError, TypeError):
        return False


def satisfies(version: str, range_text: str) -> bool:
    try:
        return bool(nodesemver.satisfies(version, range_text, loose=True))
    except (ValueError, TypeError):
        return False


def resolves(spec: Spec, versions: Collection[str], dist_tags: Mapping[str, str]) -> bool:
    """Would npm find a version for a registry `spec` among `versions`?

    npm-pick-manifest first takes the `latest` tag when the range is `*` (even a prerelease
    `latest`), else the highest version the range satisfies; a tag must exist and point at a
    published version.
    """
    if spec.kind == TAG:
        return _tagged(dist_tags, spec.selector, versions)
    if spec.kind != RANGE:
        return False
    if spec.selector in _ANY and _tagged(dist_tags, "latest", versions):
        return True
    try:
        return nodesemver.max_satisfying(list(versions), spec.selector, loose=True) is not None  # parses the range once
    except (ValueError, TypeError):
        return False


def _tagged(dist_tags: Mapping[str, str], tag: str, versions: Collection[str]) -> bool:
    version = dist_tags.get(tag)
    return isinstance(version, str) and version in versions
