"""Phase 3, plan: keep, remove or write, per package, from what the state knows of it."""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import Enum

from registry_gen.build.results import BuildIssue
from registry_gen.errors import InvalidManifest, PruneRefused
from registry_gen.meta import PackageMeta, parse_meta
from registry_gen.settings import Settings
from registry_gen.state.records import ArchiveRecord
from registry_gen.state.sqlite_cache import BuildState
from registry_gen.timestamps import iso_from_ns


PLAN_BATCH = 1000  # packages a full build plans at a time (the plans then wait in the state)


def meta_problems(state: BuildState) -> tuple[list[BuildIssue], set[str]]:
    """Every meta-file error of the tree (reported by every build) and the names they break."""
    issues: list[BuildIssue] = []
    broken: set[str] = set()
    for path, name, reason in state.meta_errors():
        issues.append(BuildIssue(path, reason))
        if name:
            broken.add(name)
    for name, path in state.duplicate_metas():
        issues.append(BuildIssue(path, f"a second registry-meta.json for {name}"))
        broken.add(name)
    issues.sort(key=lambda issue: issue.path)
    return issues, broken


def meta_of(settings: Settings, state: BuildState, name: str) -> PackageMeta | None:
    """The package's meta file (the first valid one by path)."""
    for relative, error in state.metas_of(name):
        if error is None:
            meta = parse_meta((settings.content_dir / relative).read_bytes())
            return meta if meta.name == name else None
    return None


def releases_of(state: BuildState, name: str) -> tuple[dict[str, ArchiveRecord], list[tuple[str, str]]]:
    """_choose_releases over the state's records of `name` (its damaged archives are looked up
    only when a served version has no readable one left)."""
    records, live = state.archives_of(name), state.live_of(name)
    unsourced = live.keys() - {record.version for record in records}
    return _choose_releases(name, records, live, state.damaged_sources(name) if unsourced else ())


def _choose_releases(
    name: str, records: list[ArchiveRecord], live: dict[str, ArchiveRecord], damaged: Iterable[tuple[str, str]] = ()
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


def seed_live(state: BuildState) -> None:
    for name in state.present_names():
        releases, _ = _choose_releases(name, state.archives_of(name), {})
        state.put_live(name, releases)


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


def unasked_removals(settings: Settings, state: BuildState, plans: Iterable[PackagePlan]) -> int:
    """How many of the packages planned would leave the tree unasked (see refuse_mass_removal);
    0 with `--prune`. A package whose registry-meta.json records its unpublishing went on purpose."""
    if settings.prune:
        return 0
    return sum(1 for p in plans if not p.present and state.is_present(p.name) and not _unpublished(settings, state, p.name))


def refuse_mass_removal(settings: Settings, state: BuildState, going: int) -> None:
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


def _unpublished(settings: Settings, state: BuildState, name: str) -> bool:
    try:
        meta = meta_of(settings, state, name)
    except (InvalidManifest, OSError):
        return False
    return bool(meta and meta.unpublished)


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


def plan_packages(settings: Settings, state: BuildState, names: Iterable[str]) -> dict[str, PackagePlan]:
    """Phase 3 (pure: reads the state, writes nothing): keep, remove or write, per package."""
    _, broken = meta_problems(state)
    return {name: plan_package(settings, state, name, name in broken) for name in sorted(names)}


def plan_package(settings: Settings, state: BuildState, name: str, broken: bool) -> PackagePlan:
    previous = state.package(name)
    was_present = bool(previous and previous["present"])
    if broken:
        return PackagePlan(name, Action.KEEP, was_present, was_present)
    releases, refusals = releases_of(state, name)
    try:
        meta = meta_of(settings, state, name)
    except (InvalidManifest, OSError) as exc:
        error = f"cannot read its registry-meta.json again: {exc}"
        return PackagePlan(name, Action.KEEP, was_present, was_present, tuple(refusals), error)
    if not releases and not (meta and is_open_entry(meta)):
        return PackagePlan(name, Action.REMOVE, False, was_present, tuple(refusals))
    return PackagePlan(name, Action.WRITE, bool(releases), was_present, tuple(refusals))


def relinked_names(state: BuildState, plans: Mapping[str, PackagePlan]) -> set[str]:
    """Package pages link dependencies only to packages in the registry, so a page whose linked
    names gained or lost a package is rendered again."""
    appeared_or_gone = {p.name for p in plans.values() if p.present != p.was_present}
    return state.linking_to(appeared_or_gone) if appeared_or_gone else set()


def planned_unwritten(plans: Mapping[str, PackagePlan], name: str) -> bool:
    """A package this full build plans but does not write (kept or removed): one lookup of its plan."""
    plan = plans.get(name)
    return plan is not None and plan.action is not Action.WRITE


class PlanTable(Mapping[str, PackagePlan]):
    """A full build's plans, as the state's plan table holds them (their findings already recorded)."""

    def __init__(self, state: BuildState) -> None:
        self.state = state

    def __getitem__(self, name: str) -> PackagePlan:
        row = self.state.plan_of(name)
        if row is None:
            raise KeyError(name)
        return PackagePlan(name, Action(row[0]), row[1], row[2])

    def __iter__(self) -> Iterator[str]:
        return self.state.planned()

    def __len__(self) -> int:
        return self.state.planned_count()


class HeldIncoming:
    """Who will link to each package of a build that writes a few: the packages it writes by
    their new manifests (`incoming`), the others by the links the state has for them."""

    def __init__(self, state: BuildState, written: list[str], incoming: Mapping[str, list[str]]) -> None:
        self.state, self.written, self.incoming = state, written, incoming

    def links_to(self, name: str) -> set[str]:
        linking = self.state.linking_to([name])
        if self.incoming:
            linking = {n for n in linking if not _in_sorted(self.written, n)}
        return linking.union(self.incoming.get(name, ()))


class PresentNames(AbstractSet[str]):
    """The packages with a page after this build: the state's, with this build's plans applied.
    Asked name by name (a page links a dependency only if it is here), so a build of one package
    does not load every name; worker processes get it as one file (write_names)."""

    def __init__(self, state: BuildState, planned: Mapping[str, PackagePlan], *, full: bool = False):
        self.state = state
        self.planned = planned  # the packages this build plans (the plans themselves: no copy of them all)
        self.full = full  # a full build plans every package the state knows
        self._known: dict[str, bool] = {}

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        plan = self.planned.get(name)  # one lookup: a full build's plans are rows of the state
        if plan is not None:
            return plan.present
        if name not in self._known:
            self._known[name] = self.state.is_present(name)
        return self._known[name]

    def __iter__(self) -> Iterator[str]:
        if self.full:
            yield from self.state.present_after_full_build()
            return
        yield from (n for n in self.state.present_names() if n not in self.planned)
        yield from (n for n, plan in self.planned.items() if plan.present)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _in_sorted(items: list[str], item: str) -> bool:
    index = bisect.bisect_left(items, item)
    return index < len(items) and items[index] == item
