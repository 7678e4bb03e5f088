"""Phase 4, write: removes the packages that went, writes those whose inputs changed (registry_gen.
build.write, in worker processes for big builds), and keeps each outcome in the state as it lands:
its row, its pins, its place in the listings (decided by registry_gen.build.indexes). Then renders
again the package pages whose Dependents list changed.

A full build does this from cursors over the state, a batch at a time: what it needs per package
(the plans, who will link to whom) waits in temporary tables of the state, so its memory does not
grow with the registry's size.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from registry_gen import site
from registry_gen.build.context import BuildContext
from registry_gen.build.indexes import ListingChanges, listing_move
from registry_gen.build.plan import (
    PLAN_BATCH,
    Action,
    PackagePlan,
    Plans,
    meta_issues,
    meta_of,
    package_digest,
    plan_findings,
    plan_package,
    refuse_mass_removal,
    releases_of,
    resolve_times,
    unasked_removals,
)
from registry_gen.build.read import load_cached, version_extras
from registry_gen.build.results import BuildIssue, FileChanges, NameLog
from registry_gen.build.write import PACKUMENT_FILE, PackageJob, PackageOutcome, remove_package, write_packages
from registry_gen.errors import RegistryError
from registry_gen.meta import PackageMeta
from registry_gen.names import package_dir
from registry_gen.state import BuildSession, Manifests
from registry_gen.state.records import PackageInputs, PackageWrite
from registry_gen.versions import choose_dist_tags
from registry_gen.writer import write_if_changed


TimesFound = dict[str, dict[str, str]]  # the publish times a build resolved afresh, by package


@dataclass
class Outcomes:
    """What phase 4 did: the files, the packages written again, what failed, whether the set of
    packages changed, and which listing documents the changes touched."""

    files: FileChanges = field(default_factory=FileChanges)
    rebuilt: list[str] = field(default_factory=NameLog)  # the first NameLog.KEPT; .total counts all
    errors: list[BuildIssue] = field(default_factory=list)
    package_set_changed: bool = False
    listing: ListingChanges = field(default_factory=ListingChanges)

    @property
    def rebuilt_count(self) -> int:
        return int(getattr(self.rebuilt, "total", len(self.rebuilt)))


def write_changes(context: BuildContext, state: BuildSession, cache: Manifests, plans: Plans, unwritten: AbstractSet[str]) -> Outcomes:
    """Phase 4 of an incremental build (what the plans found recorded by record_plan_refusals):
    removes what went, writes what changed, then refreshes the pages whose Dependents list changed."""
    phase = PackageWriting(context, state, cache, unwritten)
    refuse_mass_removal(context.settings, state, unasked_removals(context.settings, state, plans.plans.values()))
    # Whose "Dependents" changed: what a removed package linked to, and what a rewritten one gained or lost.
    dependents_changed: set[str] = set()
    for plan in plans.plans.values():
        if plan.action is Action.REMOVE:
            dependents_changed.update(phase.remove(plan.name))
    registry_names = PresentNames(state, plans.plans)
    to_write = [n for n, p in sorted(plans.plans.items()) if p.action is Action.WRITE]
    times: TimesFound = {}
    incoming = phase.incoming_links(to_write) if len(to_write) > 1 else {}
    links_to = HeldIncoming(state, to_write, incoming).links_to
    jobs = phase.jobs(to_write, plans.relinked, times, registry_names, links_to, plans.rerender)
    for outcome in phase.run(jobs, registry_names, len(to_write)):
        # Times are stored as each package lands, not all at the end: a first build holds one
        # entry per version otherwise (~150 MB at 1M versions).
        before = phase.take(outcome, plans.plans[outcome.name].present, times)
        if outcome.record is not None:
            dependents_changed.update(before ^ set(outcome.record["links"]))
        else:
            phase.rendered_dependents.pop(outcome.name, None)  # not written: its page may be stale
    for name in list(times):  # packages whose files were already current
        phase.store_times(name, times)
    phase.refresh_dependents({n for n in dependents_changed if n in registry_names}, registry_names)
    return phase.outcomes


def record_plan_refusals(state: BuildSession, plans: Plans) -> None:
    """What an incremental build's plans refused, kept so that every build reports it."""
    refusals, _ = plan_findings(plans.plans.values())
    state.record_refusals(refusals)


def write_everything(context: BuildContext, state: BuildSession, cache: Manifests, unwritten: AbstractSet[str]) -> Outcomes:
    """Phases 3 and 4 of a full build, which writes every package."""
    phase = PackageWriting(context, state, cache, unwritten)
    phase.outcomes.listing = ListingChanges(collecting=False)  # it writes every listing page and shard
    state.start_full_build()
    refuse_mass_removal(context.settings, state, phase.plan_everything())
    recheck: set[str] = set()  # whose Dependents list may differ from the one rendered (few)
    for name in state.planned(Action.REMOVE.value):
        recheck.update(phase.remove(name))  # what it linked to: rendered after this without it
    plans = PlanTable(state)
    recheck = {n for n in recheck if planned_unwritten(plans, n)}
    registry_names = PresentNames(state, plans, full=True)
    times: TimesFound = {}
    links_to = functools.partial(state.linking_after_full_build, action=Action.WRITE.value)
    jobs = phase.jobs(state.planned(Action.WRITE.value), set(), times, registry_names, links_to)
    for outcome in phase.run(jobs, registry_names, state.planned_count(Action.WRITE.value)):
        before = phase.take(outcome, plans[outcome.name].present, times)
        after = set(outcome.record["links"]) if outcome.record is not None else before
        # Rendered from the predicted links: a package whose links came out otherwise (or whose
        # write failed) changed its targets' lists after they were rendered. A package not
        # written here (its meta files in conflict, or unreadable) has its page rendered again when its list changed.
        recheck.update(state.predicted_links_of(outcome.name) ^ after)
        recheck.update(n for n in before ^ after if planned_unwritten(plans, n))
        if outcome.record is None:
            recheck.add(outcome.name)
    phase.refresh_dependents({n for n in recheck if n in registry_names}, registry_names)
    return phase.outcomes


class PackageWriting:
    """Phase 4's working set, for the length of the phase: what it wrote (`outcomes`) and the
    Dependents list each page it rendered was rendered with."""

    def __init__(self, context: BuildContext, state: BuildSession, cache: Manifests, unwritten: AbstractSet[str]) -> None:
        self.context, self.settings, self.state, self.cache = context, context.settings, state, cache
        self.unwritten = unwritten  # packages whose last write failed: cleared when written
        self.outcomes = Outcomes()
        self.rendered_dependents: dict[str, tuple[str, ...]] = {}

    def plan_everything(self) -> int:
        """Phase 3 of a full build: every package the state knows, planned into its plan table a batch
        at a time, with what the plans found recorded and, for each package it writes, the links its
        page will have (put_predicted_links); returns how many present packages would go."""
        _, broken = meta_issues(*self.state.meta_problems())
        going = 0
        names = self.state.every_package_name()
        while batch := list(itertools.islice(names, PLAN_BATCH)):
            plans = [self._plan_and_predict(name, name in broken) for name in batch]
            refusals, errors = plan_findings(plans)
            self.state.record_refusals(refusals)
            self.outcomes.errors.extend(errors)
            going += unasked_removals(self.settings, self.state, plans)
            self.state.put_plans((p.name, p.action.value, p.present, p.was_present) for p in plans)
        return going

    def _plan_and_predict(self, name: str, broken: bool) -> PackagePlan:
        """A full build's plan for one package and, when it is to be written, the links its page
        will have (from the inputs read once for both)."""
        inputs = self.state.package_inputs(name)
        plan = plan_package(self.settings, inputs, broken)
        if plan.action is Action.WRITE:
            self.state.put_predicted_links(name, self.predicted_links(inputs))
        return plan

    def run(self, jobs: Iterator[PackageJob], registry_names: AbstractSet[str], at_most: int) -> Iterator[PackageOutcome]:
        return write_packages(self.settings, self.cache, registry_names, jobs, at_most, self.context.progress, self.context.signer)

    def remove(self, name: str) -> list[str]:
        """Takes a package out of the tree; returns the names it linked to (their Dependents change)."""
        previous = self.state.package(name)
        if not previous:  # a package that never got written, gone before it was
            self.state.remove_package(name, None)
            return []
        self.outcomes.files.absorb(remove_package(self.settings, name, previous))
        before = self.state.package_before(name, ())
        move = listing_move(name, before.listed, None, before.hoods)
        self.outcomes.listing.note(move, before.listed, before.hoods, self.state.remove_package(name, move))
        self.outcomes.package_set_changed = True
        return list(previous.get("links", []))

    def take(self, outcome: PackageOutcome, present: bool, times: TimesFound) -> frozenset[str]:
        """Keeps one package's outcome in the state (with the times resolved for it); returns the
        names its page linked to before."""
        self.outcomes.files.written.absorb(outcome.written)  # type: ignore[attr-defined]
        self.outcomes.files.removed.absorb(outcome.removed)  # type: ignore[attr-defined]
        listing = outcome.listing
        keys = listing.search_keys if outcome.record is not None and listing is not None and listing.listed else ()
        before = self.state.package_before(outcome.name, keys)
        if outcome.record is None:
            self.state.record_failure(outcome.name, outcome.error or "failed")
            self.outcomes.errors.append(BuildIssue(outcome.name, outcome.error or "failed", outcome.name))
            self.store_times(outcome.name, times)
            return before.links
        self.outcomes.package_set_changed = self.outcomes.package_set_changed or outcome.new
        move = listing_move(outcome.name, before.listed, listing, before.hoods)
        write = PackageWrite(
            outcome.name, outcome.record, present, outcome.fragments, outcome.releases, times.pop(outcome.name, {}),
            retried=outcome.name in self.unwritten,
        )  # fmt: skip
        self.outcomes.listing.note(move, before.listed, before.hoods, self.state.commit_package(write, move))
        self.outcomes.rebuilt.append(outcome.name)
        return before.links

    def store_times(self, name: str, times: TimesFound) -> None:
        """The publish times resolved afresh into the ledger: a version dropped by hand keeps the
        time it was first seen, whatever happens to its file's mtime or to the cache."""
        stamps = times.pop(name, None)
        if stamps:
            self.state.record_first_seen(name, stamps)

    def incoming_links(self, names: list[str]) -> dict[str, list[str]]:
        """For each package, which of `names` will link to it: from each one's latest manifest, the
        names site.linked_names reads from its document. Lets a build that writes many packages (a
        full one: all of them) render each page once with its final Dependents list, not once with
        the last build's list and again after."""
        incoming: dict[str, list[str]] = defaultdict(list)  # a list of a few names: a quarter of a set's size
        for name in names:
            for target in self.predicted_links(self.state.package_inputs(name)):
                incoming[target].append(name)  # linked_names has each target once
        return incoming

    def predicted_links(self, inputs: PackageInputs) -> list[str]:
        """The names the page of a package will link to once written, from its latest manifest."""
        releases, _ = releases_of(inputs)
        meta = meta_of(self.settings, inputs)
        tags = choose_dist_tags(releases, (meta or PackageMeta(name=inputs.name)).dist_tags)
        if not tags:
            return []
        try:
            manifest = load_cached(self.cache, releases[tags["latest"]], self.settings)["manifest"]
        except RegistryError:
            return []  # its write reports the problem; a missed link only costs a second render
        return list(site.linked_names({"dist-tags": {"latest": "x"}, "versions": {"x": manifest}}))

    def jobs(
        self,
        names: Iterable[str],
        relinked: set[str],
        times: TimesFound,
        registry_names: AbstractSet[str],
        links_to: Callable[[str], set[str]],
        republish: AbstractSet[str] = frozenset(),
    ) -> Iterator[PackageJob]:
        """The packages whose inputs changed (or whose page links did), one at a time so that memory
        does not grow with the registry. New first-seen times are collected into `times`, stored
        as each package lands. `links_to`: who will link to a package once this build is done (for
        the packages being written, from their manifests: the state knows only the links of the
        last build). `republish`: written whatever their digest says, every file of theirs reported
        as written (plans.rerender)."""
        for name in names:
            inputs = self.state.package_inputs(name)
            releases, _ = releases_of(inputs)
            meta = meta_of(self.settings, inputs)
            stamps, fresh = resolve_times(releases, meta, inputs.times)
            if fresh:
                times[name] = fresh
            digest = package_digest(name, releases, stamps, meta)
            previous = inputs.previous
            if previous and previous["digest"] == digest and not self.context.full and name not in relinked | republish:
                continue
            dependents = tuple(sorted(n for n in links_to(name) if n in registry_names))
            if not self.context.full:  # a full build knows which lists may be stale without them (write_everything)
                self.rendered_dependents[name] = dependents
            yield PackageJob(
                name, releases, stamps, meta or PackageMeta(name=name), previous or {}, digest, dependents, republish=name in republish
            )

    def refresh_dependents(self, names: set[str], registry_names: AbstractSet[str]) -> None:
        """Renders again the package page of each of `names`, whose list of dependents changed (from
        its package document on disk: nothing else of the package changed), unless this build
        already rendered it with that very list."""
        for name in sorted(names):
            inputs = self.state.package_inputs(name)
            if not inputs.previous or not inputs.previous["present"]:
                continue
            dependents = tuple(sorted(n for n in self.state.linking_to([name]) if n in registry_names))
            if self.rendered_dependents.get(name) == dependents:
                continue
            try:
                packument = json.loads((self.settings.out_dir / package_dir(name) / PACKUMENT_FILE).read_bytes())
            except (OSError, ValueError):
                continue  # not written (an error is reported for it); its next build renders it whole
            self._write_package_page(packument, inputs, dependents, registry_names)

    def _write_package_page(
        self, packument: dict[str, Any], inputs: PackageInputs, dependents: tuple[str, ...], registry_names: AbstractSet[str]
    ) -> None:
        releases, _ = releases_of(inputs)
        latest = releases.get(packument.get("dist-tags", {}).get("latest"))
        page = site.package_page(
            packument,
            self.settings,
            registry_names=registry_names,
            tarball_sizes={version: r.tarball_size for version, r in releases.items()},
            dependents=dependents,
            latest_files=version_extras(self.cache, latest, self.settings).files if latest else None,
        )
        for relative, data in page.items():
            if write_if_changed(self.settings.out_dir / relative, data):
                self.outcomes.files.written.append(relative)


def planned_unwritten(plans: Mapping[str, PackagePlan], name: str) -> bool:
    """A package this full build plans but does not write (kept or removed): one lookup of its plan."""
    plan = plans.get(name)
    return plan is not None and plan.action is not Action.WRITE


class PlanTable(Mapping[str, PackagePlan]):
    """A full build's plans, as the state's plan table holds them (their findings already recorded).
    Asked for the same names again and again (each link of each package written, each dependency
    a page shows: eslint's plan 338 times over the real corpus), so it keeps its answers, bounded:
    the table does not change once the plans are made."""

    def __init__(self, state: BuildSession) -> None:
        self.state = state
        self._known: dict[str, PackagePlan | None] = {}

    def __getitem__(self, name: str) -> PackagePlan:
        if name in self._known:
            plan = self._known[name]
        else:
            if len(self._known) >= KNOWN_NAMES_MAX:
                self._known.clear()
            row = self.state.plan_of(name)
            plan = self._known[name] = PackagePlan(name, Action(row[0]), row[1], row[2]) if row is not None else None
        if plan is None:
            raise KeyError(name)
        return plan

    def __iter__(self) -> Iterator[str]:
        return self.state.planned()

    def __len__(self) -> int:
        return self.state.planned_count()


class HeldIncoming:
    """Who will link to each package of a build that writes a few: the packages it writes by
    their new manifests (`incoming`), the others by the links the state has for them."""

    def __init__(self, state: BuildSession, written: list[str], incoming: Mapping[str, list[str]]) -> None:
        self.state, self.written, self.incoming = state, written, incoming

    def links_to(self, name: str) -> set[str]:
        linking = self.state.linking_to([name])
        if self.incoming:
            linking = {n for n in linking if not _in_sorted(self.written, n)}
        return linking.union(self.incoming.get(name, ()))


KNOWN_NAMES_MAX = 65_536  # answers PresentNames keeps (a few MB at most)


class PresentNames(AbstractSet[str]):
    """The packages with a page after this build: the state's, with this build's plans applied.
    Asked name by name (a page links a dependency only if it is here), so a build of one package
    does not load every name; worker processes get it as one file (write.write_names)."""

    def __init__(self, state: BuildSession, planned: Mapping[str, PackagePlan], *, full: bool = False):
        self.state = state
        self.planned = planned  # the packages this build plans (the plans themselves: no copy of them all)
        self.full = full  # a full build plans every package the state knows
        self._known: dict[str, bool] = {}

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        known = self._known.get(name)
        if known is None:
            # A page asks about each of its dependencies, and the popular ones come back package
            # after package: one state lookup per name, bounded so a huge build's memory stays flat.
            if len(self._known) >= KNOWN_NAMES_MAX:
                self._known.clear()
            plan = self.planned.get(name)  # one lookup: a full build's plans are rows of the state
            # A full build plans every package the state knows: a name without a plan has no row.
            known = self._known[name] = plan.present if plan is not None else not self.full and self.state.is_present(name)
        return known

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
