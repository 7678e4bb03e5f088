"""From an upstream's package document to what the mirror lands (pure): the record, its verdicts,
and the package's meta.

An upstream writes only the package it was asked for (as an import: `importers.identity`): a
document naming another package is refused whole, a version entry naming another package or
version is left out. A version with no digest to check its tarball against is held back."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from registry_gen.importers.identity import document_problem, manifest_problem
from registry_gen.importers.model import ImportProblem, iso_time
from registry_gen.meta import PackageMeta
from registry_gen.mirror.config import Uplink
from registry_gen.mirror.policy import AdvisoryFacts, MirrorPolicy, VersionFacts, Verdicts, decide, epoch
from registry_gen.mirror.record import MirrorRecord, slim_manifest
from registry_gen.versions import is_valid_version

README_CAP = 256 * 1024  # the README a mirror keeps for the package page and `npm view`


def take_document(doc: Mapping[str, Any], name: str, uplink: Uplink, previous: MirrorRecord | None, now: str) -> MirrorRecord:
    """The record of `name` from its upstream document (verdicts not yet made); what this registry
    saw before (`previous`) keeps its first-seen times."""
    problem = document_problem(doc, name)
    if problem:
        raise ImportProblem(f"{name}: {problem}")
    raw_times = doc.get("time") if isinstance(doc.get("time"), Mapping) else {}
    latest = (doc.get("dist-tags") or {}).get("latest")
    versions = {
        version: slim_manifest(manifest, latest=version == latest)
        for version, manifest in (doc.get("versions") or {}).items()
        if is_valid_version(version) and isinstance(manifest, Mapping) and manifest_problem(manifest, name, version, "entry") is None
    }  # fmt: skip
    times = {key: stamp for key, value in raw_times.items() if (key in versions or key in ("created", "modified"))
             and (stamp := iso_time(value))}  # fmt: skip
    first_seen = dict(previous.first_seen) if previous is not None else {}
    first_seen.update({version: now for version in versions if version not in first_seen})
    readme = doc.get("readme") if isinstance(doc.get("readme"), str) else ""
    return MirrorRecord(
        uplink.name, uplink.url, now, versions=versions, times=times, first_seen=first_seen,
        tags={k: v for k, v in (doc.get("dist-tags") or {}).items() if isinstance(v, str) and v in versions},
        maintainers=_people(doc, versions), readme=readme[:README_CAP],
        readme_filename=doc.get("readmeFilename") if isinstance(doc.get("readmeFilename"), str) else None,
        untrusted=uplink.untrusted,
    )  # fmt: skip


def _people(doc: Mapping[str, Any], versions: Mapping[str, Mapping[str, Any]]) -> list[dict[str, str]]:
    """The document's maintainers, else the latest version's publisher (`_npmUser`)."""
    latest = versions.get(str((doc.get("dist-tags") or {}).get("latest")), {})
    for people in (doc.get("maintainers"), latest.get("maintainers"), [latest.get("_npmUser")]):
        found = [
            {k: str(v) for k, v in person.items() if k in ("name", "email") and isinstance(v, str)}
            for person in people if isinstance(person, Mapping) and isinstance(person.get("name"), str)
        ] if isinstance(people, list) else []  # fmt: skip
        if found:
            return found
    return []


def judged(
    name: str, record: MirrorRecord, policy: MirrorPolicy, advisories: Sequence[AdvisoryFacts], now: float
) -> tuple[MirrorRecord, Verdicts]:
    """The record with the policy's verdicts, and those verdicts (their `next_change` says when
    time alone will change them). A version whose tarball cannot be checked is held back too."""
    facts = [
        VersionFacts(
            version, record.age_start(version),
            "first seen here" if record.untrusted or not record.times.get(version) else "published upstream",
            manifest.get("deprecated") if isinstance(manifest.get("deprecated"), str) and manifest.get("deprecated") else None,
        )
        for version, manifest in record.versions.items()
    ]  # fmt: skip
    verdicts = decide(name, facts, policy, advisories, now)
    held = {version: decision.reason for version, decision in verdicts.held.items()}
    for version in record.versions:
        dist = record.upstream_dist(version)
        if version not in held and not (dist.get("integrity") or dist.get("shasum")):
            held[version] = "unverifiable: the upstream lists no digest to check its tarball against"
        elif version not in held and not str(dist.get("tarball", "")).startswith(("http://", "https://")):
            held[version] = "unfetchable: the upstream lists no http(s) tarball URL for it"
    return dataclasses.replace(record, held=held), verdicts


def mirrored_meta(record: MirrorRecord, previous: PackageMeta | None, name: str) -> PackageMeta:
    """The package's meta once `record` lands. The build writes a package without a version held
    here only when someone maintains it (`build.is_open_entry`), so a mirrored package always
    names someone: the upstream's people, else the uplink itself (never an account: no rights)."""
    people = [dict(person) for person in record.maintainers] or [{"name": record.uplink}]
    base = previous or PackageMeta(name)
    created = record.times.get("created") or base.created or record.refreshed
    modified = record.times.get("modified") or base.modified
    return dataclasses.replace(
        base, maintainers=people, created=created, modified=modified, mirror=record,
        dist_tags={}, pending={}, revision=base.revision + 1,
    )  # fmt: skip


def worth_landing(before: PackageMeta | None, after: PackageMeta, refreshed_every: float) -> bool:
    """Whether `after` says anything `before` does not. The refresh time alone counts only once it
    is `refreshed_every` seconds newer: an unchanged upstream then costs no rebuild per check,
    and the page's "last refreshed" stays true to that precision."""
    if before is None or before.mirror is None or after.mirror is None:
        return True
    same = dataclasses.replace(before, revision=after.revision, mirror=dataclasses.replace(before.mirror, refreshed=after.mirror.refreshed))
    if same != after:
        return True
    moved = (epoch(after.mirror.refreshed) or 0.0) - (epoch(before.mirror.refreshed) or 0.0)
    return moved >= refreshed_every
