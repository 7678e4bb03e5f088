"""The supply-chain policy at the gate (pure): which of an upstream's versions this registry serves.

Per `packages:` pattern, beside `proxy:` (the first matching pattern decides, as for reads):

    '**':
      proxy: npmjs
      min_release_age: 3d        # hide versions younger than this (Verdaccio durations)
      block:
        - left-pad               # a name (every version); `*` and `**` as in patterns
        - '@evil/*'              # a scope (`@evil` says the same)
        - event-stream@3.3.6     # a name and a range
        - $malicious             # versions a recorded advisory marks as malware
        - $deprecated            # versions the upstream deprecated
      hide_severity: high        # opt-in: versions with a recorded advisory this severe or worse

A version held back is absent from the package document and its tarball is never served; `latest`
then names the newest allowed version at or below the upstream's `latest`. Every decision carries
its reason (`registry-gen mirror why`, the package's page). The policy applies to mirrored packages
only: a package published here is never touched by it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from registry_gen.errors import ConfigError
from registry_gen.mirror.config import format_duration, parse_duration

MARKERS = ("$malicious", "$deprecated")
POLICY_KEYS = ("min_release_age", "block", "hide_severity")


class AdvisoryFacts(Protocol):
    """What the policy reads of a recorded advisory (registry_gen.advisories.Advisory)."""

    source_id: str
    name: str
    severity: str
    vulnerable_versions: str
    malicious: bool


@dataclass(frozen=True)
class BlockEntry:
    text: str  # as written in registry.yaml
    marker: str | None = None
    pattern: str | None = None  # an anchored regular expression over the package name
    range: str | None = None

    def blocks(self, name: str, version: str) -> bool:
        """Whether this name/range entry holds back name@version (markers are decided elsewhere)."""
        from registry_gen import ranges

        if self.pattern is None or not re.match(self.pattern, name):
            return False
        return self.range is None or ranges.satisfies(version, self.range)


@dataclass(frozen=True)
class MirrorPolicy:
    min_release_age: float | None = None  # seconds
    block: tuple[BlockEntry, ...] = ()
    hide_severity: str | None = None

    @property
    def fingerprint(self) -> str:
        """What the decisions depend on in the config (a change means: decide again)."""
        return repr((self.min_release_age, tuple(b.text for b in self.block), self.hide_severity))


def name_regex(pattern: str) -> str:
    """A `packages:` pattern as an anchored regex: `*` any run but `/`, `**` any run at all."""
    parts = re.split(r"(\*\*|\*)", pattern)
    body = "".join(".*" if p == "**" else "[^/]*" if p == "*" else re.escape(p) for p in parts)
    return f"^{body}$"


def parse_policy(pattern: str, spec: Mapping[str, Any]) -> MirrorPolicy:
    """The policy keys of one `packages:` entry; ConfigError names the pattern and the key."""
    where = f"packages.{pattern!r}"
    age = spec.get("min_release_age")
    severity = spec.get("hide_severity")
    if severity is not None:
        from registry_gen.advisories import SEVERITIES  # loaded only when the rule is used

        if severity not in SEVERITIES:
            raise ConfigError(f"{where}.hide_severity must be one of {', '.join(SEVERITIES)}; got {severity!r}")
    block = spec.get("block", [])
    if not isinstance(block, list) or not all(isinstance(entry, str) and entry.strip() for entry in block):
        raise ConfigError(f"{where}.block must be a list of names, scopes, name@range or {' / '.join(MARKERS)}")
    return MirrorPolicy(
        min_release_age=None if age is None else parse_duration(age, f"{where}.min_release_age"),
        block=tuple(_block_entry(entry.strip(), where) for entry in block),
        hide_severity=severity,
    )


def _block_entry(text: str, where: str) -> BlockEntry:
    from registry_gen import ranges
    from registry_gen.names import is_valid_name

    if text.startswith("$"):
        if text not in MARKERS:
            raise ConfigError(f"{where}.block: {text!r} is not a marker (known: {', '.join(MARKERS)})")
        return BlockEntry(text, marker=text)
    if re.match(r"^@[^/@]+$", text):  # a bare scope
        return BlockEntry(text, pattern=name_regex(text + "/*"))
    at = text.find("@", 1)
    name, wanted = (text[:at], text[at + 1 :]) if at > 0 else (text, None)
    if not name or ("*" not in name and not is_valid_name(name)):
        raise ConfigError(f"{where}.block: {text!r} names no package (write a name, @scope, name@range or a marker)")
    if wanted is not None and not ranges.is_valid_range(wanted):
        raise ConfigError(f"{where}.block: {wanted!r} in {text!r} is not a semver range")
    return BlockEntry(text, pattern=name_regex(name), range=wanted)


# ---------------------------------------------------------------- decisions


@dataclass(frozen=True)
class VersionFacts:
    """What the policy knows of one upstream version."""

    version: str
    published: str | None  # what its age counts from (upstream time, or first seen here)
    age_source: str  # "published upstream" or "first seen here"
    deprecated: str | None = None


@dataclass(frozen=True)
class Decision:
    """Why a version is held back (`reason`), and when time alone will allow it (`until`, epoch s)."""

    reason: str
    until: float | None = None


@dataclass(frozen=True)
class Verdicts:
    held: dict[str, Decision] = field(default_factory=dict)

    @property
    def next_change(self) -> float | None:
        """The first moment a held version comes of age (the decisions must be made again then)."""
        return min((d.until for d in self.held.values() if d.until is not None), default=None)


def epoch(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(UTC).timestamp()
    except ValueError:
        return None


def iso(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def decide(
    name: str, facts: Iterable[VersionFacts], policy: MirrorPolicy, advisories: Sequence[AdvisoryFacts], now: float
) -> Verdicts:
    """The versions of `name` held back, each with its first reason (blocks before advisories
    before age: the reason that will not go away by waiting is the one worth telling)."""
    relevant = [a for a in advisories if a.name == name]
    held: dict[str, Decision] = {}
    for fact in facts:
        decision = _blocked(name, fact, policy, relevant) or _too_young(fact, policy, now)
        if decision is not None:
            held[fact.version] = decision
    return Verdicts(held)


def _blocked(name: str, fact: VersionFacts, policy: MirrorPolicy, advisories: Sequence[AdvisoryFacts]) -> Decision | None:
    from registry_gen import ranges

    for entry in policy.block:
        if entry.marker == "$deprecated" and fact.deprecated:
            return Decision(f"blocked by $deprecated: the upstream deprecated it ({fact.deprecated[:200]})")
        if entry.marker == "$malicious":
            found = next((a for a in advisories if a.malicious and ranges.satisfies(fact.version, a.vulnerable_versions)), None)
            if found is not None:
                return Decision(f"blocked by $malicious: advisory {found.source_id} marks it as malware")
        if entry.marker is None and entry.blocks(name, fact.version):
            return Decision(f"blocked by the block entry {entry.text!r}")
    if policy.hide_severity is not None:
        return _too_severe(fact, policy.hide_severity, advisories)
    return None


def _too_severe(fact: VersionFacts, threshold: str, advisories: Sequence[AdvisoryFacts]) -> Decision | None:
    from registry_gen import ranges
    from registry_gen.advisories import SEVERITIES

    floor = SEVERITIES.index(threshold)
    for advisory in advisories:
        if SEVERITIES.index(advisory.severity) >= floor and ranges.satisfies(fact.version, advisory.vulnerable_versions):
            return Decision(f"hidden by hide_severity {threshold}: advisory {advisory.source_id} ({advisory.severity})")
    return None


def _too_young(fact: VersionFacts, policy: MirrorPolicy, now: float) -> Decision | None:
    if policy.min_release_age is None:
        return None
    start = epoch(fact.published) if fact.published else None
    if start is None:
        return Decision("too young: no time is known for it (min_release_age needs one)")
    until = start + policy.min_release_age
    if until <= now:
        return None
    return Decision(
        f"too young: {fact.age_source} {fact.published}, served from {iso(until)} "
        f"(min_release_age {format_duration(policy.min_release_age)})",
        until,
    )


def allowed_latest(versions: Iterable[str], upstream_latest: str | None) -> str | None:
    """`latest` among the allowed versions: the upstream's when allowed, else the newest allowed
    non-prerelease at or below it (npm's and pnpm's own release-age settings pick so), else None."""
    from registry_gen.versions import is_prerelease, order_key

    allowed = list(versions)
    if upstream_latest in allowed:
        return upstream_latest
    ceiling = order_key(upstream_latest) if upstream_latest and _is_version(upstream_latest) else None
    below = [v for v in allowed if not is_prerelease(v) and (ceiling is None or order_key(v) <= ceiling)]
    return max(below, key=order_key) if below else None


def _is_version(text: str) -> bool:
    from registry_gen.versions import is_valid_version

    return is_valid_version(text)
