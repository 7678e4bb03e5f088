"""The build, phase by phase: detect -> read -> plan -> write -> index -> commit, under the lock."""

from __future__ import annotations

import functools
import itertools
import json
import logging
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from registry_gen import site
from registry_gen.build.detect import ContentChanges, detect_changes, detect_hinted_changes, settings_fingerprint
from registry_gen.build.indexes import write_indexes
from registry_gen.build.plan import (
    Action,
    HeldIncoming,
    PLAN_BATCH,
    PackagePlan,
    PlanTable,
    PresentNames,
    meta_of,
    meta_problems,
    package_digest,
    plan_package,
    plan_packages,
    planned_unwritten,
    refuse_mass_removal,
    releases_of,
    relinked_names,
    resolve_times,
    seed_live,
    unasked_removals,
)
from registry_gen.build.read import held_before, load_cached, read_changed, update_metas, version_extras
from registry_gen.build.results import BuildIssue, BuildResult, ProgressCallback
from registry_gen.build.write import PACKUMENT_FILE, PackageJob, PackageOutcome, remove_package, write_packages
from registry_gen.buildlock import holding_build_lock
from registry_gen.errors import ContentMissing, RegistryError
from registry_gen.keyring import load_signer, publish_keys
from registry_gen.layout import ALL_DOCUMENT
from registry_gen.meta import PackageMeta
from registry_gen.names import package_dir
from registry_gen.settings import Settings
from registry_gen.signing import Signer
from registry_gen.state.records import CachedManifest, Discarding, ListingChanges
from registry_gen.state.sqlite_cache import CACHE_FILE, LEGACY_STATE_FILE, BuildState, ManifestCache, read_legacy_times
from registry_gen.statedir import move_state_out_of_tree
from registry_gen.versions import choose_dist_tags
from registry_gen.writer import write_if_changed

if TYPE_CHECKING:  # filelock loads for the lock's other holders, or when the build has to wait for it
    from filelock import FileLock


log = logging.getLogger(__name__)


def _refresh_dependents(run: BuildRun, names: set[str], registry_names: AbstractSet[str]) -> None:
    """Renders again the package page of each of `names`, whose list of dependents changed (from
    its package document on disk: nothing else of the package changed), unless this build
    already rendered it with that very list."""
    settings, state, cache, result = run.settings, run.state, run.cache, run.result
    for name in sorted(names):
        record = state.package(name)
        if not record or not record["present"]:
            continue
        dependents = tuple(sorted(n for n in state.linking_to([name]) if n in registry_names))
        if run.rendered_dependents.get(name) == dependents:
            continue
        try:
            packument = json.loads((settings.out_dir / package_dir(name) / PACKUMENT_FILE).read_bytes())
        except (OSError, ValueError):
            continue  # not written (an error is reported for it); its next build renders it whole
        releases, _ = releases_of(state, name)
        latest = releases.get(packument.get("dist-tags", {}).get("latest"))
        page = site.package_page(
            packument,
            settings,
            registry_names=registry_names,
            tarball_sizes={version: r.tarball_size for version, r in releases.items()},
            dependents=dependents,
            latest_files=version_extras(cache, latest, settings).files if latest else None,
        )
        for relative, data in page.items():
            if write_if_changed(settings.out_dir / relative, data):
                result.written.append(relative)


def run_build(
    settings: Settings,
    *,
    progress: ProgressCallback | None = None,
    lock_timeout: float = 600,
    changed: Iterable[str | Path] | None = None,
    on_lock_wait: Callable[[], None] | None = None,
    full: bool = False,
    defer_whole: bool = False,
) -> BuildResult:
    """Brings settings.out_dir up to date with settings.content_dir, under the shared build lock.

    `changed`: when the caller knows exactly which files of content/ it added, replaced or
    removed (the write API, watch mode), only those are looked at; None stats all of content/.
    Each is a key relative to content/ (as ContentStorage names it) or an absolute path: never
    `content_dir / key`, which is relative to the working folder when content_dir is.
    `on_lock_wait` is called once when another process holds the lock and this build waits.
    `full`: write every package again (after a key rotation: re-sign everything with the new key).
    `defer_whole`: leave -/all and -/search.json, which list every package, to an IndexRefresher
    (only the long-running writers pass it: somebody must refresh them).
    """
    if not settings.content_dir.is_dir():
        raise ContentMissing(
            f"content folder {settings.content_dir} does not exist; nothing in {settings.out_dir} was changed "
            "(check the path, or create the folder first)"
        )
    settings.out_dir.mkdir(parents=True, exist_ok=True)  # as build_lock() does
    with holding_build_lock(settings.lock_file, lock_timeout, on_lock_wait):
        return _build_locked(settings, progress, changed, full, defer_whole)


def build_lock(settings: Settings) -> FileLock:
    """The lock every writer of the tree and of content/ shares (CLI build, watch mode, the API)."""
    from filelock import FileLock

    settings.out_dir.mkdir(parents=True, exist_ok=True)
    return FileLock(str(settings.lock_file))


def build_locked(settings: Settings, changed: Iterable[str | Path] | None = None, *, defer_whole: bool = False) -> BuildResult:
    """The build for a caller that already holds `build_lock(settings)` (the write service): only
    the `changed` files of content/ are looked at; `BuildResult.refusals` says what was not taken."""
    return _build_locked(settings, None, changed, defer_whole=defer_whole)


def _build_locked(
    settings: Settings,
    progress: ProgressCallback | None,
    changed: Iterable[str | Path] | None = None,
    full: bool = False,
    defer_whole: bool = False,
) -> BuildResult:
    started = time.perf_counter()
    move_state_out_of_tree(settings)
    cache_dir = settings.state_folder
    state = BuildState(settings.state_file)
    try:
        cache = ManifestCache(cache_dir / CACHE_FILE)
    except BaseException:
        state.close()
        raise
    try:  # both connections close whatever happens: serve and watch run many builds in one process
        try:
            state.begin()
            result, dropped = _build_in_transaction(settings, state, cache, progress, changed, full, defer_whole)
            state.commit()
        finally:
            state.close()
        if dropped is None or dropped:
            cache.forget_unreferenced(dropped, settings.state_file)
    finally:
        cache.close()
    for legacy in (cache_dir / LEGACY_STATE_FILE, cache_dir / "manifests"):
        if legacy.is_dir():
            shutil.rmtree(legacy, ignore_errors=True)
        elif legacy.exists():
            legacy.unlink()
    result.seconds = time.perf_counter() - started
    return result


@dataclass
class BuildRun:
    """One build's working set, passed from phase to phase."""

    settings: Settings
    state: BuildState
    cache: ManifestCache
    progress: ProgressCallback | None
    result: BuildResult = field(default_factory=BuildResult)
    errors: list[BuildIssue] = field(default_factory=list)
    dropped: set[str] | None = field(default_factory=set)  # tarball sha1s no longer used (None: look at all)
    full: bool = False
    package_set_changed: bool = False
    defer_whole: bool = False  # leave -/all and -/search.json to the writer's IndexRefresher
    signer: Signer | None = None
    fingerprint: str = ""  # the settings and templates this build renders with (settings_fingerprint)
    # Each package page rendered by this build -> the Dependents list it was rendered with.
    rendered_dependents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Each browse page written by this build -> what write_browse_page returned for it: the
    # changed keys' paths share their upper pages, rendered once however many keys walk them.
    browse_pages: dict[str, list[str] | None] = field(default_factory=dict)
    # Packages whose last write failed (the state's unwritten table, read once): tried again.
    unwritten: set[str] = field(default_factory=set)

    def record_write(self, name: str, error: str | None) -> None:
        """Keeps the unwritten table current: a failure noted, a success (or a removal) cleared.
        A package not in it costs nothing here (no statement per package written)."""
        if error is not None:
            self.state.set_unwritten(name, error)
        elif name in self.unwritten:
            self.state.set_unwritten(name, None)


def _build_in_transaction(
    settings: Settings,
    state: BuildState,
    cache: ManifestCache,
    progress: ProgressCallback | None,
    changed: Iterable[str | Path] | None,
    force_full: bool = False,
    defer_whole: bool = False,
) -> tuple[BuildResult, set[str] | None]:
    """The build proper, phase by phase; returns the result and the sha1s of tarballs the state
    no longer uses (None: any of them may be unused, look at all)."""
    run = BuildRun(settings, state, cache, progress, unwritten=state.unwritten_names())
    changes = _detect(run, changed, force_full)
    affected = _read(run, changes)
    del changes  # its meta and removed paths: read, not needed again
    if run.full:
        _write_everything(run)
    else:
        # A package whose write failed before is tried again, whatever changed (_take_outcome).
        affected |= run.unwritten
        plans = plan_packages(settings, state, affected)
        relinked = relinked_names(state, plans)
        plans.update(plan_packages(settings, state, relinked - affected))
        del affected
        _write(run, plans, relinked)
    write_indexes(run, defer_whole and not run.full)
    publish_keys(settings, state, run.signer, run.result.written)
    return _commit(run), run.dropped


def _detect(run: BuildRun, changed: Iterable[str | Path] | None, force_full: bool) -> ContentChanges:
    """Phase 1: what differs between content/ and the state (all of it after a settings change)."""
    state, settings = run.state, run.settings
    run.fingerprint = fingerprint = settings_fingerprint(settings)
    if state.is_empty():
        state.import_times(read_legacy_times(settings.state_folder))
    elif not state.has_live():
        seed_live(state)  # a tree built before versions were pinned: pin what it serves now
    run.signer = load_signer(settings)  # a bad key stops the build before it writes anything
    # The state lives beside the tree (Settings.state_folder): a tree deleted on its own would
    # otherwise look up to date. Its index document is written by every build.
    tree_lost = not state.is_empty() and not (settings.out_dir / ALL_DOCUMENT).is_file()
    run.full = force_full or tree_lost or state.get_setting("fingerprint") != fingerprint
    if run.full:
        state.forget_content()  # a new generator or new settings: read every archive again
        run.dropped = None  # and afterwards drop every cached manifest no archive uses
        state.listing_changes = ListingChanges.ignored()  # it writes every listing page and shard
    if changed is None or run.full:
        return detect_changes(settings.content_dir, state)
    return detect_hinted_changes(settings.content_dir, state, changed)


def _read(run: BuildRun, changes: ContentChanges) -> set[str]:
    """Phase 2: opens only new and changed archives and meta files; returns the packages they touch
    (none for a full build, which then writes every package the state knows, from a cursor)."""
    state = run.state
    affected: set[str] = set()
    touched = Discarding() if run.full else affected  # a full build writes every package the state knows
    for relative in changes.removed_archives:
        previous = state.archive(relative)
        if previous:
            touched.update([previous.name] if previous.name else [])
            _drop_tarball(run, previous.shasum)
            state.delete_archive(relative)
    pending: list[tuple[str, CachedManifest]] = []
    for record, body in read_changed(run.settings, changes.archives, run.progress):
        previous = state.archive(record.path)
        if record.error is not None:  # damaged: it keeps what it held, so a version published from it stays served
            record.name, record.version = held_before(state, previous, record.path)
        touched.update(n for n in (previous.name if previous else None, record.name) if n)
        if previous and previous.shasum != record.shasum:
            _drop_tarball(run, previous.shasum)
        state.put_archive(record)
        if body is not None and record.shasum:
            pending.append((record.shasum, body))
            if len(pending) >= 256:
                run.cache.put_many(pending)
                pending.clear()
    run.cache.put_many(pending)
    run.result.archives_read = len(changes.archives)
    update_metas(run.settings, state, changes, run.errors, touched)
    return affected


def _drop_tarball(run: BuildRun, shasum: str | None) -> None:
    if shasum and run.dropped is not None:
        run.dropped.add(shasum)


def _write(run: BuildRun, plans: dict[str, PackagePlan], relinked: set[str]) -> None:
    """Phase 4: records what the plan found, removes what went, writes what changed."""
    settings, state = run.settings, run.state
    _record_plans(run, plans.values())
    refuse_mass_removal(settings, state, unasked_removals(settings, state, plans.values()))
    # Whose "Dependents" changed: what a removed package linked to, and what a rewritten one
    # gained or lost.
    dependents_changed: set[str] = set()
    for plan in plans.values():
        if plan.action is Action.REMOVE:
            dependents_changed.update(_remove(run, plan.name))
    registry_names = PresentNames(state, plans)
    to_write = [n for n, p in sorted(plans.items()) if p.action is Action.WRITE]
    fresh_times: dict[str, dict[str, str]] = {}
    meta_times: dict[str, dict[str, str]] = {}  # the part of fresh_times a registry-meta.json keeps
    incoming = _incoming_links(run, to_write) if len(to_write) > 1 else {}
    links_to = HeldIncoming(state, to_write, incoming).links_to
    jobs = _jobs(run, to_write, relinked, (fresh_times, meta_times), registry_names, links_to)
    for outcome in write_packages(settings, run.cache, registry_names, jobs, len(to_write), run.progress, run.signer):
        before = set((state.package(outcome.name) or {}).get("links", ()))
        _take_outcome(run, outcome, plans[outcome.name].present)
        if outcome.record is not None:
            dependents_changed.update(before ^ set(outcome.record["links"]))
        else:
            run.rendered_dependents.pop(outcome.name, None)  # not written: its page may be stale
        # Stored as each package lands, not all at the end: a first build holds one entry per
        # version otherwise (~150 MB at 1M versions).
        _store_times(state, outcome.name, fresh_times.pop(outcome.name, {}), meta_times.pop(outcome.name, {}))
    for name, stamps in fresh_times.items():  # packages whose files were already current
        _store_times(state, name, stamps, meta_times.get(name, {}))
    _refresh_dependents(run, {n for n in dependents_changed if n in registry_names}, registry_names)


def _record_plans(run: BuildRun, plans: Iterable[PackagePlan]) -> None:
    """What the plans found wrong: the archives each package refused, the meta files unread."""
    for plan in plans:
        if plan.refusals is not None:
            run.state.set_issues(plan.name, list(plan.refusals))
        if plan.error is not None:
            run.errors.append(BuildIssue(plan.name, plan.error, plan.name))


def _write_everything(run: BuildRun) -> None:
    """Phases 3 and 4 of a full build, which writes every package: from cursors over the state, a
    batch at a time. What it needs per package (the plans, who will link to whom) waits in
    temporary tables of the state, so its memory does not grow with the registry's size."""
    settings, state = run.settings, run.state
    state.start_full_build()
    refuse_mass_removal(settings, state, _plan_everything(run))
    recheck: set[str] = set()  # whose Dependents list may differ from the one rendered (few)
    for name in state.planned(Action.REMOVE.value):
        recheck.update(_remove(run, name))  # what it linked to: rendered after this without it
    plans = PlanTable(state)
    recheck = {n for n in recheck if planned_unwritten(plans, n)}
    for name in state.planned(Action.WRITE.value):
        state.put_predicted_links(name, _predicted_links(run, name))
    registry_names = PresentNames(state, plans, full=True)
    times_found: tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]] = ({}, {})
    links_to = functools.partial(state.linking_after_full_build, action=Action.WRITE.value)
    jobs = _jobs(run, state.planned(Action.WRITE.value), set(), times_found, registry_names, links_to)
    written = state.planned_count(Action.WRITE.value)
    for outcome in write_packages(settings, run.cache, registry_names, jobs, written, run.progress, run.signer):
        before = set((state.package(outcome.name) or {}).get("links", ()))
        _take_outcome(run, outcome, plans[outcome.name].present)
        after = set(outcome.record["links"]) if outcome.record is not None else before
        # Rendered from the predicted links: a package whose links came out otherwise (or whose
        # write failed) changed its targets' lists after they were rendered. A package not
        # written here (its meta files in conflict, or unreadable) has its page rendered again when its list changed.
        recheck.update(state.predicted_links_of(outcome.name) ^ after)
        recheck.update(n for n in before ^ after if planned_unwritten(plans, n))
        if outcome.record is None:
            recheck.add(outcome.name)
        _store_times(state, outcome.name, times_found[0].pop(outcome.name, {}), times_found[1].pop(outcome.name, {}))
    _refresh_dependents(run, {n for n in recheck if n in registry_names}, registry_names)


def _plan_everything(run: BuildRun) -> int:
    """Phase 3 of a full build: every package the state knows, planned into its plan table a batch
    at a time, with what the plans found recorded; returns how many present packages would go."""
    settings, state = run.settings, run.state
    _, broken = meta_problems(state)
    going = 0
    names = state.every_package_name()
    while batch := list(itertools.islice(names, PLAN_BATCH)):
        plans = [plan_package(settings, state, name, name in broken) for name in batch]
        _record_plans(run, plans)
        going += unasked_removals(settings, state, plans)
        state.put_plans((p.name, p.action.value, p.present, p.was_present) for p in plans)
    return going


def _store_times(state: BuildState, name: str, stamps: dict[str, str], kept: dict[str, str]) -> None:
    """First-seen times into the state (durably: nothing else records them), and the ones a
    registry-meta.json already keeps (not durably)."""
    if stamps:
        state.put_times(name, {v: t for v, t in stamps.items() if v not in kept})
        state.put_times(name, kept, durable=False)


def _remove(run: BuildRun, name: str) -> list[str]:
    """Takes a package out of the tree; returns the names it linked to (their Dependents change)."""
    previous = run.state.package(name)
    if previous:
        remove_package(run.settings, name, previous, run.result)
        run.state.delete_package(name)
        run.package_set_changed = True
    run.state.delete_times(name)
    run.record_write(name, None)  # a package that never got written, gone before it was
    return list(previous.get("links", [])) if previous else []


def _incoming_links(run: BuildRun, names: list[str]) -> dict[str, list[str]]:
    """For each package, which of `names` will link to it: from each one's latest manifest, the
    names site.linked_names reads from its document. Lets a build that writes many packages (a
    full one: all of them) render each page once with its final Dependents list, not once with
    the last build's list and again after."""
    incoming: dict[str, list[str]] = defaultdict(list)  # a list of a few names: a quarter of a set's size
    for name in names:
        for target in _predicted_links(run, name):
            incoming[target].append(name)  # linked_names has each target once
    return incoming


def _predicted_links(run: BuildRun, name: str) -> list[str]:
    """The names the page of `name` will link to once written, from its latest manifest."""
    releases, _ = releases_of(run.state, name)
    meta = meta_of(run.settings, run.state, name)
    tags = choose_dist_tags(releases, (meta or PackageMeta(name=name)).dist_tags)
    if not tags:
        return []
    try:
        manifest = load_cached(run.cache, releases[tags["latest"]], run.settings)["manifest"]
    except RegistryError:
        return []  # its write reports the problem; a missed link only costs a second render
    return list(site.linked_names({"dist-tags": {"latest": "x"}, "versions": {"x": manifest}}))


def _jobs(
    run: BuildRun,
    names: Iterable[str],
    relinked: set[str],
    times_found: tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]],
    registry_names: AbstractSet[str],
    links_to: Callable[[str], set[str]],
) -> Iterator[PackageJob]:
    """The packages whose inputs changed (or whose page links did), one at a time so that memory
    does not grow with the registry. New first-seen times are collected (fresh, and the part a
    registry-meta.json keeps), stored by the caller. `links_to`: who will link to a package once
    this build is done (for the packages being written, from their manifests: the state knows
    only the links of the last build)."""
    state, settings = run.state, run.settings
    fresh_times, meta_times = times_found
    for name in names:
        previous = state.package(name)
        releases, _ = releases_of(state, name)
        meta = meta_of(settings, state, name)
        times, fresh = resolve_times(releases, meta, state.times_of(name))
        if fresh:
            fresh_times[name] = fresh
            if meta is not None:
                kept = {v: t for v, t in fresh.items() if meta.time.get(v) == t}
                if kept:
                    meta_times[name] = kept
        digest = package_digest(name, releases, times, meta)
        if previous and previous["digest"] == digest and not run.full and name not in relinked:
            continue
        dependents = tuple(sorted(n for n in links_to(name) if n in registry_names))
        if not run.full:  # a full build knows which lists may be stale without them (_write_everything)
            run.rendered_dependents[name] = dependents
        yield PackageJob(name, releases, times, meta or PackageMeta(name=name), previous or {}, digest, dependents)


def _take_outcome(run: BuildRun, outcome: PackageOutcome, present: bool) -> None:
    run.result.written.extend(outcome.written)
    run.result.removed.extend(outcome.removed)
    run.record_write(outcome.name, None if outcome.record is not None else outcome.error or "failed")
    if outcome.record is None:
        run.errors.append(BuildIssue(outcome.name, outcome.error or "failed", outcome.name))
        return
    run.package_set_changed = run.package_set_changed or outcome.new
    assert outcome.listing is not None  # set with every record
    run.state.put_package(outcome.name, outcome.record, present=present, fragments=outcome.fragments, listing=outcome.listing)
    run.state.put_live(outcome.name, outcome.releases)
    run.result.rebuilt_packages.append(outcome.name)


def _commit(run: BuildRun) -> BuildResult:
    """Phase 6: totals and issues into the result, the settings fingerprint into the state."""
    state, result = run.state, run.result
    meta_issues, _ = meta_problems(state)
    result.packages, result.versions = state.totals()
    result.skipped = result.packages - result.rebuilt
    archive_issues = [BuildIssue(p, r) for p, r in state.archive_errors()]
    archive_issues += [BuildIssue(p, r, n) for n, p, r in state.all_issues()]
    result.refused = len({issue.path for issue in archive_issues})
    result.errors = meta_issues + sorted(archive_issues, key=lambda i: i.path) + run.errors
    # The fingerprint the build started from: a template edited meanwhile makes the next build redo it.
    state.set_setting("fingerprint", run.fingerprint)
    return result
