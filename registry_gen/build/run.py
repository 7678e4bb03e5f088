"""The build, phase by phase: detect -> read -> plan -> write -> index -> commit, under the lock.

    detect  (build.detect)    what differs between content/ and the state; full or incremental
    read    (build.read)      the new and changed archives and meta files -> the packages touched
    plan    (build.plan)      keep, remove or write, per package
    write   (build.packages)  removes, writes (build.write, in workers when many), keeps each outcome
    index   (build.indexes)   the listing documents those outcomes touched, -/all and -/search.json
    commit                    the signing keys, the report, then the ledger and the cache, in that order

Each phase takes values and returns one; nothing is shared between them but the state session
(registry_gen.state), whose one transaction is committed last, so a build that dies half-way is
simply redone by the next one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from registry_gen.build.context import ProgressCallback
from registry_gen.build.detect import detect, landed_packages
from registry_gen.build.indexes import Indexed, TreeListing, write_indexes
from registry_gen.build.packages import Outcomes, record_plan_refusals, write_changes, write_everything
from registry_gen.build.plan import meta_issues, plan_changes
from registry_gen.build.read import ReadResult, read_content
from registry_gen.build.results import BuildIssue, BuildResult
from registry_gen.buildlock import holding_build_lock
from registry_gen.errors import ContentMissing
from registry_gen.keyring import publish_keys, recorded_keys
from registry_gen.layout import ALL_DOCUMENT, SEARCH_DOCUMENT
from registry_gen.settings import Settings
from registry_gen.state import BuildSession, Manifests, open_state
from registry_gen.state.records import BuildReport, StalePage
from registry_gen.statedir import move_state_out_of_tree

if TYPE_CHECKING:  # filelock loads for the lock's other holders, or when the build has to wait for it
    from filelock import FileLock


def run_build(
    settings: Settings,
    *,
    progress: ProgressCallback | None = None,
    lock_timeout: float = 600,
    changed: Iterable[str | Path] | None = None,
    on_lock_wait: Callable[[], None] | None = None,
    full: bool = False,
    defer_whole: bool = False,
    settle_listings: bool = True,
    tree: TreeListing | None = None,
) -> BuildResult:
    """Brings settings.out_dir up to date with settings.content_dir, under the shared build lock.

    `changed`: when the caller knows exactly which files of content/ it added, replaced or
    removed (the write API, watch mode), only those are looked at; None stats all of content/.
    Each is a key relative to content/ (as ContentStorage names it) or an absolute path: never
    `content_dir / key`, which is relative to the working folder when content_dir is.
    `on_lock_wait` is called once when another process holds the lock and this build waits.
    `full`: write every package again (after a key rotation: re-sign everything with the new key).
    `defer_whole`: leave -/all and -/search.json, which list every package, to an IndexRefresher
    (only the long-running writers pass it: somebody must refresh them); on PostgreSQL it leaves the
    listing pages its changes touched too, marked in the state for the leader (registry_gen.leader).
    A build without it renders the pages marked so; `settle_listings` False: their marks are kept,
    named in `BuildResult.stale_listings`, for a caller that settles them once its files are uploaded
    (on PostgreSQL, so is the mark of -/all and -/search.json it rendered: `BuildResult.whole_mark`).
    `tree`: where out_dir is not the readers' tree (a bucket), what that tree holds under a folder:
    asked where a render shrank a browse range or a search shard (build.indexes.IndexWriter).
    """
    if not settings.content_dir.is_dir():
        raise ContentMissing(
            f"content folder {settings.content_dir} does not exist; nothing in {settings.out_dir} was changed "
            "(check the path, or create the folder first)"
        )
    settings.out_dir.mkdir(parents=True, exist_ok=True)  # as build_lock() does
    with holding_build_lock(settings.lock_file, lock_timeout, on_lock_wait), open_state(settings).registry_lock(lock_timeout):
        return _build_locked(settings, progress, changed, full, defer_whole, settle_listings=settle_listings, tree=tree)


def build_lock(settings: Settings) -> FileLock:
    """The lock every writer of the tree and of content/ shares (CLI build, watch mode, the API)."""
    from filelock import FileLock

    settings.out_dir.mkdir(parents=True, exist_ok=True)
    return FileLock(str(settings.lock_file))


def build_locked(
    settings: Settings, changed: Iterable[str | Path] | None = None, *, defer_whole: bool = False, writing: int | None = None,
    held: Collection[str] = (),
    fence: Callable[[], None] | None = None,
    settle_listings: bool = True,
    served: Callable[[list[str]], bool] | None = None,
    tree: TreeListing | None = None,
) -> BuildResult:  # fmt: skip
    """The build for a caller that already holds `build_lock(settings)` (the write service): only
    the `changed` files of content/ are looked at; `BuildResult.refusals` says what was not taken.
    `writing`: the journalled write in progress, which this build leaves pending (its writer
    finishes it); any other pending write whose writer is gone is resolved (`held`: the packages
    whose lock the caller holds, registry_gen.state.ledger). `fence`: called just before the state
    commits; whatever it raises rolls the build's state back (the write service's lock check).
    `settle_listings`: as run_build's. `served(paths)`: whether the readers' tree already holds
    these files of out_dir byte for byte (a server's start on a bucket): -/all and -/search.json
    rendered so are owed to nobody, and left unmarked for its upload. `tree`: as run_build's."""
    return _build_locked(
        settings, None, changed, defer_whole=defer_whole, writing=writing, held=held, fence=fence, settle_listings=settle_listings,
        served=served, tree=tree,
    )  # fmt: skip


def _build_locked(
    settings: Settings,
    progress: ProgressCallback | None,
    changed: Iterable[str | Path] | None = None,
    full: bool = False,
    defer_whole: bool = False,
    writing: int | None = None,
    held: Collection[str] = (),
    fence: Callable[[], None] | None = None,
    settle_listings: bool = True,
    served: Callable[[list[str]], bool] | None = None,
    tree: TreeListing | None = None,
) -> BuildResult:
    started = time.perf_counter()
    move_state_out_of_tree(settings)
    state = open_state(settings)
    session = state.session()
    try:
        manifests = state.manifests()
    except BaseException:
        session.close()
        raise
    try:  # every connection closes whatever happens: serve and watch run many builds in one process
        try:
            result, dropped = _build_in_transaction(
                settings, session, manifests, progress, changed, full, defer_whole, writing, held, settle_listings, served, tree
            )
            if fence is not None:
                fence()
            session.commit()
        finally:
            session.close()
        if dropped is None or dropped:
            manifests.forget_unreferenced(dropped)
    finally:
        manifests.close()
    result.seconds = time.perf_counter() - started
    return result


def _build_in_transaction(
    settings: Settings,
    state: BuildSession,
    cache: Manifests,
    progress: ProgressCallback | None,
    changed: Iterable[str | Path] | None,
    force_full: bool = False,
    defer_whole: bool = False,
    writing: int | None = None,
    held: Collection[str] = (),
    settle_listings: bool = True,
    served: Callable[[list[str]], bool] | None = None,
    tree: TreeListing | None = None,
) -> tuple[BuildResult, set[str] | None]:
    """The build proper, phase by phase; returns the result and the sha1s of tarballs the state
    no longer uses (None: any of them may be unused, look at all)."""
    detected = detect(settings, state, changed, force_full=force_full, progress=progress, writing=writing, held=held)
    context = detected.context
    # Read before the first look at the listings takes their lock (on PostgreSQL): the keyring
    # changes only with a key rotation, which a full build makes holding every package's lock.
    keys_before = recorded_keys(state)
    reading = read_content(context, state, cache, detected.changes)
    plan_errors: list[BuildIssue] = []
    if context.full:
        outcomes = write_everything(context, state, cache, detected.start.unwritten)
        report = state.build_report()
    else:
        # A package whose write failed before is tried again, whatever changed.
        plans = plan_changes(settings, state, reading.affected | detected.start.unwritten, landed_packages(state, detected.landed))
        plan_errors = plans.errors
        record_plan_refusals(state, plans)
        # Complete now (this build's refusals are recorded): read before write_changes takes the
        # listings lock, as these registry-wide queries do not depend on the listings.
        report = state.build_report()
        outcomes = write_changes(context, state, cache, plans, detected.start.unwritten)
    packages_changed = outcomes.rebuilt_count > 0 or outcomes.package_set_changed
    # The listing pages wait for the leader only on PostgreSQL: the embedded default's one writer renders them.
    defer_listings = defer_whole and settings.database_url is not None
    indexed = write_indexes(
        context, state, outcomes.listing, detected.start, packages_changed=packages_changed, defer_whole=defer_whole,
        defer_listings=defer_listings, tree=tree,
    )  # fmt: skip
    if settle_listings:  # else the caller settles them once the files are uploaded
        state.settle_stale_listings(indexed.rendered_stale)
    unsettled = () if settle_listings else indexed.rendered_stale
    whole_mark = state.new_whole_mark() if _settles_whole_later(settings, indexed, settle_listings, served) else ""
    result = _result(reading, outcomes, indexed, state, report, plan_errors, unsettled, whole_mark)
    publish_keys(settings, state, context.signer, result.written, keys_before)
    if whole_mark:
        state.finish_build(context.fingerprint, whole_stale=True, whole_mark=whole_mark)
    else:
        state.finish_build(context.fingerprint, whole_stale=indexed.whole_stale)
    return result, reading.dropped


def _settles_whole_later(settings: Settings, indexed: Indexed, settle_listings: bool, served: Callable[[list[str]], bool] | None) -> bool:
    """On PostgreSQL the caller that settles later uploads this build's files after it commits: the
    whole documents it rendered stay marked stale until then (a kill or a refused upload leaves
    them to the next rewrite), with its own marking, so that one a write sets meanwhile is kept.
    Not when the readers' tree holds this very render already (a start after writes all rendered
    and uploaded): marked, the leader would render and upload them again during that start."""
    if indexed.whole_stale is not False or settle_listings or settings.database_url is None:
        return False
    return served is None or not served([ALL_DOCUMENT, SEARCH_DOCUMENT])


def _result(
    reading: ReadResult, outcomes: Outcomes, indexed: Indexed, state: BuildSession, report: BuildReport, plan_errors: list[BuildIssue],
    unsettled: tuple[StalePage, ...] = (), whole_mark: str = "",
) -> BuildResult:  # fmt: skip
    """Phase 6: the build's report, from what each phase returned and what the state keeps."""
    packages, versions = state.totals()
    result = BuildResult(
        packages=packages, versions=versions, archives_read=reading.archives_read, stale_listings=unsettled, whole_mark=whole_mark
    )
    for files in (outcomes.files, indexed.files):
        result.written.absorb(files.written)  # type: ignore[attr-defined]
        result.removed.absorb(files.removed)  # type: ignore[attr-defined]
    result.rebuilt_packages.absorb(outcomes.rebuilt)  # type: ignore[attr-defined]
    result.skipped = result.packages - result.rebuilt
    meta_problems, _ = meta_issues(report.meta_errors, report.duplicate_metas)
    archive_issues = [BuildIssue(p, r) for p, r in report.archive_errors]
    archive_issues += [BuildIssue(p, r, n) for n, p, r in report.refusals]
    result.refused = len({issue.path for issue in archive_issues})
    result.errors = meta_problems + sorted(archive_issues, key=lambda i: i.path) + reading.errors + plan_errors + outcomes.errors
    return result
