"""Phase 3, plan: keep, remove or write, per package, from what the state knows of it.

The decisions are pure functions of a package's inputs (registry_gen.state.records.PackageInputs:
its archives, its pinned versions, its last row) and its meta file, read from content/ here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Set as AbstractSet
from dataclasses import dataclass
from enum import Enum

from registry_gen.build.results import BuildIssue
from registry_gen.errors import InvalidManifest, PruneRefused
from registry_gen.meta import PackageMeta, parse_meta
from registry_gen.settings import Settings
from registry_gen.state import BuildSession
from registry_gen.state.records import ArchiveRecord, PackageInputs
from registry_gen.timestamps import iso_from_ns


PLAN_BATCH = 1000  # packages a full build plans at a time (the plans then wait in the state)


def is_open_entry(meta: PackageMeta) -> bool:
    """A name created before its first upload (the legacy publish's first step, PUT /<name>) gets
    a version-less packument, so the client's next GET succeeds; a fully unpublished one does not."""
    last_unpublish = max(meta.unpublished.values(), default="")
    return bool(meta.maintainers) and (bool(meta.pending) or (meta.created or "") > last_unpublish)


class Action(Enum):
    """What the build does with one package."""

    KEEP = "keep"  # its meta file is broken or unreadable: the tree keeps what it had
    REMOVE = "remove"  # nothing in content/ serves it any more
    WRITE = "write"  # (re)write its files when their inputs changed


@dataclass(frozen=True, slots=True)  # one per package in a full build: no __dict__ each
class PackagePlan:
    """The plan for one package: the action, whether it has a page after this build, and what
    the plan found wrong (archives refused, a meta file it could not read)."""

    name: str
    action: Action
    present: bool
    was_present: bool
    refusals: tuple[tuple[str, str], ...] | None = None  # (archive path, reason); None: not looked at
    error: str | None = None


def meta_issues(
    errors: Iterable[tuple[str, str | None, str]], duplicates: Iterable[tuple[str, str]]
) -> tuple[list[BuildIssue], set[str]]:
    """Every meta-file error of the tree (reported by every build) and the names they break, from
    the state's unreadable meta files (path, name when last valid, reason) and its second meta
    files for one name (name, path)."""
    errors, duplicates = list(errors), list(duplicates)
    issues = [BuildIssue(path, reason) for path, _, reason in errors]
    issues += [BuildIssue(path, f"a second registry-meta.json for {name}") for name, path in duplicates]
    issues.sort(key=lambda issue: issue.path)
    return issues, {name for _, name, _ in errors if name} | {name for name, _ in duplicates}


def meta_of(settings: Settings, inputs: PackageInputs) -> PackageMeta | None:
    """The package's meta file (the first valid one by path), read from content/."""
    for relative, error in inputs.metas:
        if error is None:
            meta = parse_meta((settings.content_dir / relative).read_bytes())
            return meta if meta.name == inputs.name else None
    return None


def releases_of(inputs: PackageInputs) -> tuple[dict[str, ArchiveRecord], list[tuple[str, str]]]:
    """choose_releases over the state's records of one package."""
    return choose_releases(inputs.name, inputs.archives, inputs.pins, inputs.damaged)


def choose_releases(
    name: str, records: Iterable[ArchiveRecord], live: dict[str, ArchiveRecord], damaged: Iterable[tuple[str, str]] = ()
) -> tuple[dict[str, ArchiveRecord], list[tuple[str, str]]]:
    """version -> record for one package (records by path), and the refusals as (path, reason).

    A version already served (`live`) keeps the bytes it was published with: an archive with
    other bytes for it is refused by path, whether it came beside the original or over it, and so
    is its archive when it can no longer be read (`damaged`: (version, path)); only removing it
    removes the version. A version never served that comes with two different tarballs is
    refused altogether."""
    by_version: dict[str, list[ArchiveRecord]] = defaultdict(list)
    for record in records:
        if record.version:
            by_version[record.version].append(record)
    chosen: dict[str, ArchiveRecord] = {}
    issues: list[tuple[str, str]] = []
    for version, candidates in by_version.items():
        published = live.get(version)
        if published is not None:
            same = [c for c in candidates if c.shasum == published.shasum]
            # Over the original (same path, new bytes) nothing in content/ holds the published
            # bytes any more: an empty path says "serve the tree's copy, never copy it again".
            chosen[version] = same[0] if same else dataclasses.replace(published, path="")
            issues.extend((c.path, _newcomer_reason(name, version, published)) for c in candidates if c.shasum != published.shasum)
        elif len({c.shasum for c in candidates}) > 1:
            paths = ", ".join(c.path for c in candidates)
            issues.extend((c.path, f"{name}@{version} comes from archives with different bytes: {paths}") for c in candidates)
        else:
            chosen[version] = candidates[0]
    for version, path in damaged:
        published = live.get(version)
        if published is not None and version not in by_version:
            chosen[version] = dataclasses.replace(published, path="")  # the tree's copy, as above
            issues.append((path, _damaged_reason(name, version)))
    return chosen, issues


def _newcomer_reason(name: str, version: str, published: ArchiveRecord) -> str:
    return (
        f"{name}@{version} is already published with other bytes ({published.integrity}); the published "
        "version is kept and this archive is refused: remove it, or give it a new version number"
    )


def _damaged_reason(name: str, version: str) -> str:
    return (
        f"{name}@{version} was published from this archive, which can no longer be read; the published version "
        "is kept: put the original archive back, or remove this file to remove the version"
    )


def package_digest(name: str, releases: dict[str, ArchiveRecord], times: dict[str, str], meta: PackageMeta | None) -> str:
    parts = [
        [v, r.shasum, r.path, times[v], r.file_count, r.unpacked_size] for v, r in sorted(releases.items())
    ]
    body = json.dumps([name, parts, meta.to_json() if meta else None], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def resolve_times(
    releases: dict[str, ArchiveRecord], meta: PackageMeta | None, known: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Publish time per version: the meta file's, else first seen (`known`, kept in state), else
    the file's mtime; and the times that differ from `known` (for the caller to record)."""
    times = {}
    for version, record in releases.items():
        if meta and version in meta.time:
            stamp = meta.time[version]
        else:
            stamp = known.get(version) or iso_from_ns(record.mtime_ns)
        times[version] = stamp
    return times, {v: stamp for v, stamp in times.items() if known.get(v) != stamp}


def plan_package(settings: Settings, inputs: PackageInputs, broken: bool) -> PackagePlan:
    """Keep, remove or write one package (`broken`: its meta files are in conflict or unreadable)."""
    was_present = bool(inputs.previous and inputs.previous["present"])
    if broken:
        return PackagePlan(inputs.name, Action.KEEP, was_present, was_present)
    releases, refusals = releases_of(inputs)
    try:
        meta = meta_of(settings, inputs)
    except (InvalidManifest, OSError) as exc:
        error = f"cannot read its registry-meta.json again: {exc}"
        return PackagePlan(inputs.name, Action.KEEP, was_present, was_present, tuple(refusals), error)
    if not releases and not (meta and is_open_entry(meta)):
        return PackagePlan(inputs.name, Action.REMOVE, False, was_present, tuple(refusals))
    return PackagePlan(inputs.name, Action.WRITE, bool(releases), was_present, tuple(refusals))


def plan_findings(plans: Iterable[PackagePlan]) -> tuple[dict[str, list[tuple[str, str]]], list[BuildIssue]]:
    """What the plans found wrong: the archives each package refused (to keep, so every later
    build reports them), and the meta files that could not be read."""
    refusals = {p.name: list(p.refusals) for p in plans if p.refusals is not None}
    return refusals, [BuildIssue(p.name, p.error, p.name) for p in plans if p.error is not None]


@dataclass(frozen=True)
class Plans:
    """An incremental build's plans, and the packages whose page links changed with them."""

    plans: dict[str, PackagePlan]
    relinked: set[str]
    errors: list[BuildIssue]
    rerender: AbstractSet[str] = frozenset()  # written whatever their state says (detect.landed_packages)


def plan_changes(settings: Settings, state: BuildSession, names: Iterable[str], rerender: AbstractSet[str] = frozenset()) -> Plans:
    """Phase 3 of an incremental build: plans the packages of `names` and `rerender` (rendered
    again even if unchanged), then those whose pages link to a package that appears or goes
    (package pages link dependencies only to packages in the registry)."""
    _, broken = meta_issues(*state.meta_problems())
    plans = {name: plan_package(settings, state.package_inputs(name), name in broken) for name in sorted({*names, *rerender})}
    appeared_or_gone = {p.name for p in plans.values() if p.present != p.was_present}
    relinked = state.linking_to(appeared_or_gone) if appeared_or_gone else set()
    for name in sorted(relinked - plans.keys()):
        plans[name] = plan_package(settings, state.package_inputs(name), name in broken)
    _, errors = plan_findings(plans.values())
    return Plans(plans, relinked, errors, frozenset(rerender))


def unasked_removals(settings: Settings, state: BuildSession, plans: Iterable[PackagePlan]) -> int:
    """How many of the packages planned would leave the tree unasked (see refuse_mass_removal);
    0 with `--prune`. A package whose registry-meta.json records its unpublishing went on purpose."""
    if settings.prune:
        return 0
    return sum(1 for p in plans if not p.present and state.is_present(p.name) and not _unpublished(settings, state, p.name))


def refuse_mass_removal(settings: Settings, state: BuildSession, going: int) -> None:
    """Stops a build that would take most of the tree's packages away (`going` of them, unasked_removals)
    when content/ does not say they went (a wrong folder, a half-finished copy, an unmounted
    disk): only `--prune` does that."""
    present = state.present_count() if going > 1 else 0  # counted only when it can matter
    if going > 1 and 2 * going > present:
        raise PruneRefused(
            f"this build would remove {going} of the {present} packages in {settings.out_dir} because "
            f"{settings.content_dir} no longer holds their archives; nothing was changed. If that is intended, "
            "run again with --prune"
        )


def _unpublished(settings: Settings, state: BuildSession, name: str) -> bool:
    try:
        meta = meta_of(settings, state.package_inputs(name))
    except (InvalidManifest, OSError):
        return False
    return bool(meta and meta.unpublished)
