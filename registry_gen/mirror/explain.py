"""`registry-gen mirror why NAME[@VERSION]`: every decision the mirror makes about a package, in
words (pure: the facts are gathered by the service)."""

from __future__ import annotations

from dataclasses import dataclass

from registry_gen.access import Rule
from registry_gen.mirror.config import Uplink, format_duration
from registry_gen.mirror.policy import iso
from registry_gen.mirror.record import MirrorRecord
from registry_gen.state.mirror_freshness import LOCAL, MISSING, Entry


@dataclass(frozen=True)
class Facts:
    name: str
    version: str | None
    rule: Rule | None  # the first pattern matching the name (None: none does)
    uplink: Uplink | None  # the uplink it proxies to
    owner: str | None  # why the package is this registry's own (never proxied), or None
    record: MirrorRecord | None  # what the mirror holds of it
    entry: Entry | None  # the last check of its uplink
    archive: bool  # content/ holds the version's archive
    passed_through: bool  # the version's tarball is kept as the upstream's bytes
    held_aside: bool  # the version's archive is kept aside (held back after it was fetched)
    now: float


def explain(facts: Facts) -> list[str]:
    """One line per decision, in the order the mirror makes them."""
    lines = [_routing(facts)]
    if facts.rule is None or facts.rule.proxy is None or facts.owner is not None:
        return lines
    lines.append(_freshness(facts))
    if facts.record is None:
        return lines
    record = facts.record
    lines.append(f"mirrored from {record.uplink} ({record.url}), last refreshed {record.refreshed}: "
                 f"{len(record.versions)} versions upstream, {len(record.allowed)} served, {len(record.held)} held back")  # fmt: skip
    if facts.version is not None:
        lines += _version(facts, record, facts.version)
    return lines


def _routing(facts: Facts) -> str:
    if facts.rule is None or facts.rule.proxy is None:
        pattern = f"its first matching pattern {facts.rule.pattern!r} has no proxy:" if facts.rule else "no packages: pattern matches it"
        return f"{facts.name} is local only: {pattern} (nothing is proxied unless configured)"
    if facts.owner is not None:
        return f"{facts.name} is never proxied: {facts.owner} (a local name always wins)"
    assert facts.uplink is not None
    policy = facts.rule.policy
    rules = [f"min_release_age {format_duration(policy.min_release_age)}"] if policy.min_release_age is not None else []
    rules += [f"block {', '.join(b.text for b in policy.block)}"] if policy.block else []
    rules += [f"hide_severity {policy.hide_severity}"] if policy.hide_severity else []
    untrusted = "; ages count from first seen here (untrusted uplink)" if facts.uplink.untrusted else ""
    return (f"{facts.name} is proxied to the uplink {facts.uplink.name} ({facts.uplink.url}) by the pattern "
            f"{facts.rule.pattern!r}; policy: {'; '.join(rules) or 'none'}{untrusted}")  # fmt: skip


def _freshness(facts: Facts) -> str:
    entry, uplink = facts.entry, facts.uplink
    assert uplink is not None
    if entry is None:
        return f"not asked of {uplink.name} yet (the next read asks it)"
    if entry.status == LOCAL:
        return f"found to be this registry's own at {iso(entry.checked)}: {entry.note}"
    left = entry.checked + uplink.maxage - facts.now
    fresh = f"fresh for {left:.0f} s more (maxage {format_duration(uplink.maxage)})" if left > 0 else "stale: the next read asks the uplink"
    said = "had no such package" if entry.status == MISSING else "answered"
    note = f" ({entry.note})" if entry.note else ""
    return f"{uplink.name} {said} at {iso(entry.checked)}; {fresh}{note}"


def _version(facts: Facts, record: MirrorRecord, version: str) -> list[str]:
    name = facts.name
    if version not in record.versions:
        return [f"{name}@{version} is not a version the uplink lists (not served)"]
    if version in record.held:
        aside = " (its tarball, fetched before, is kept aside and not served)" if facts.held_aside else ""
        return [f"{name}@{version} is held back: {record.held[version]}{aside}"]
    age = record.age_start(version)
    lines = [f"{name}@{version} is served (published {record.times.get(version, 'at an unknown time')}; age counted from {age})"]
    if facts.archive:
        lines.append(f"its tarball is held here (content/, checked against {_digests(record, version)})")
    elif facts.passed_through:
        lines.append(f"its tarball is kept as the upstream served it (no archive the build reads; checked against {_digests(record, version)})")
    else:
        lines.append("its tarball is fetched from the uplink on its first request")
    return lines


def _digests(record: MirrorRecord, version: str) -> str:
    dist = record.upstream_dist(version)
    found = sorted({token.split("-", 1)[0] for token in str(dist.get("integrity") or "").split()})
    found += ["the sha1 shasum"] if dist.get("shasum") else []
    return ", ".join(found) or "no digest"
