"""The write service: every change to the registry goes through here (the HTTP API, importers).

A write reads forward: take the lock → read the package (`RegistryReader`) → run a pure rule of
`registry_gen.publish` → journal it pending (registry_gen.state.ledger: its events, and what
content/ will hold) → store the change in content/ (meta first, then the archive) → rebuild just
that package (`build_locked`) → if the build refused the new archive, undo, journal it aborted
and say why; else journal it done. Only then does the caller reply. The lock is the one `registry-gen build` and watch mode take,
so a write never sees or leaves a half-built tree.

Public API (what the web layer and the importers call):

    service = WriteService(settings)                   # or WriteService(settings, storage)
    service.publish(upload, actor)                     # an Upload from publish.decode_publish/_upload
    service.land_archive(name, data, actor, published_at=..., tags=...)   # raw tarball bytes (imports)
    service.apply(name, rule)                          # any rule: PackageState -> Change
    service.store_batch(write)                         # a bulk write (an import), rebuilt later
    service.land(write, journal)                       # a write rebuilt at once (the mirror's landings)
    service.reader.current(name).state                 # the package as the registry holds it

Errors are `registry_gen.errors.RegistryError`s: VersionConflict, Forbidden, NotFound, BadRequest,
LockTimeout, BuildRefused (the build would not serve the archive), BrokenMeta (a hand-edited meta
file does not parse).
"""

from __future__ import annotations


import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Final

from registry_gen import publish
from registry_gen.audit import Who
from registry_gen.build import BuildResult, build_locked
from registry_gen.errors import BrokenMeta, Forbidden, LockTimeout, RegistryError, StateUnavailable, VersionConflict
from registry_gen.failpoints import failpoint
from registry_gen.meta import PackageMeta, dump_meta
from registry_gen.layout import ABBREVIATED_DOCUMENT, PACKAGE_DOCUMENT
from registry_gen.names import package_dir, tarball_filename, tarball_path, validate_name
from registry_gen.objectstore import EarlyUpload, ObjectStore
from registry_gen.packument import document_revision
from registry_gen.publish import Actor, BadRequest, PackageState, Upload
from registry_gen.purge import purger_for
from registry_gen.refresher import IndexRewrites
from registry_gen.readmodel import CurrentPackage, RegistryReader
from registry_gen.settings import Settings
from registry_gen.state import Journal, JournalEvent, open_state
from registry_gen.state.ledger import content_digest, package_folders
from registry_gen.state.locks import HeldLock
from registry_gen.storage import ContentStorage, archive_key, open_content_storage
from registry_gen.write_events import describe_write, write_events

__all__ = ["BatchJournal", "BrokenMeta", "BuildRefused", "Change", "WriteService", "revision_after"]

LOCK_TIMEOUT_SECONDS: Final = 60
log = logging.getLogger(__name__)


class BuildRefused(RegistryError):
    """The rebuild would not take the change (e.g. the same version in content/ with other bytes)."""


@dataclass
class Change:
    """What a rule decided: the new meta (None: keep; `delete_meta`: remove), an archive to add,
    and versions whose archives go."""

    meta: PackageMeta | None = None
    delete_meta: bool = False
    upload: Upload | None = None
    removed: set[str] = field(default_factory=set)
    # How the journal names the write when the difference would not say it (an administrator's
    # binding of a name to an account: the names stay, so write_events sees no owner change).
    events: tuple[JournalEvent, ...] = ()

    @property
    def is_empty(self) -> bool:
        return self.meta is None and not self.delete_meta and self.upload is None and not self.removed


Rule = Callable[[PackageState], Change]


@dataclass(frozen=True)
class BatchJournal:
    """How a batch write (an import) is journalled: its events, the files it will leave (content
    key -> sha256 after, registry_gen.state.ledger.UNCHECKED for one whose bytes it computes as it
    writes), and who wrote it."""

    events: list[JournalEvent]
    files: dict[str, str | None]
    actor: str
    who: Who = field(default_factory=Who.this_process)


def origin_of(actor: Actor | None) -> Who:
    """The audit log's "who" of a write: the web edge's record, else this process (a CLI write)."""
    return actor.origin if actor is not None and actor.origin is not None else Who.this_process()


def revision_after(state: PackageState, change: Change) -> str | None:
    """The `_rev` the package's document has once `change` is built (what a reply tells the
    client, and what its next `GET ?write=true` shows); None when no document is left."""
    served = (set(state.published) - change.removed) | ({change.upload.version} if change.upload else set())
    meta = PackageMeta(name=state.name) if change.delete_meta else (change.meta or state.meta)
    if change.delete_meta and not served:
        return None
    return document_revision(meta, served)


class WriteService:
    """Serialises writes (a thread lock, then the cross-process build lock), applies them to
    content/, and rebuilds the tree before returning."""

    def __init__(
        self,
        settings: Settings,
        storage: ContentStorage | None = None,
        *,
        reserved_names: frozenset[str] = frozenset(),
        refresher: IndexRewrites | None = None,
        objects: ObjectStore | None = None,
    ):
        self.settings = settings
        # With `storage:` (registry-gen api): content in the bucket, each build's output uploaded
        # to the tree bucket (registry_gen.objectstore); None: content_dir and out_dir as always.
        self.objects = objects
        if objects is not None:
            storage = objects.content
        # With a refresher (a long-running server), each write's build leaves -/all and
        # -/search.json to it: a publish then costs the same at any registry size.
        self.refresher = refresher
        self.storage = storage if storage is not None else open_content_storage(settings)
        self.reader = RegistryReader(settings, self.storage)
        self.reserved_names = reserved_names  # names a server shadows with its own endpoints
        self.purger = purger_for(settings)  # None without registry.yaml `purge:`
        if self.purger is not None:
            self.purger.resume()  # purges a killed writer still owed, sent in the background
        self.state = open_state(settings)
        self._thread_lock = threading.Lock()
        self._write_lock = self.state.write_lock(settings.lock_file)
        self._held: frozenset[str] = frozenset()  # the packages whose write lock this service holds now
        self._lock: HeldLock | None = None  # the lock of the write in progress (writes run one at a time)
        self._journal: Journal | None = None  # opened at the first write, kept (a write's two journal calls)

    # ---- the public writes

    def publish(self, upload: Upload, actor: Actor, now: str | None = None) -> BuildResult | None:
        """A new version from a checked upload; the first publisher becomes the maintainer."""
        stamp = now or publish.now_iso()
        return self.apply(
            upload.name, lambda s: Change(meta=publish.apply_publish(s, upload, actor, stamp), upload=upload), actor
        )

    def land_archive(
        self,
        name: str,
        data: bytes,
        actor: Actor,
        *,
        published_at: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> BuildResult | None:
        """A tarball's bytes as they are (an import): checked like a publish, served byte for byte,
        with its original publish time when known."""
        manifest, digests = publish.check_tarball(name, None, data, self.settings.limits)
        upload = Upload(name, manifest["version"], data, manifest, digests, dict(tags or {}))
        return self.publish(upload, actor, published_at)

    def apply(self, name: str, rule: Rule, actor: Actor | None = None) -> BuildResult | None:
        """Runs `rule` on the current state and commits its change, all under the lock; logs one
        line naming `actor` and what the write did (docs/operating/logs.md)."""
        with self.locked(name):
            self._recover()
            current = self._current(name)
            _refuse_mirrored(current)
            change = rule(current.state)
            if change.is_empty:
                return None
            meta = None if change.delete_meta else (change.meta or current.state.meta)
            events = list(change.events) or write_events(current.state, meta, change.upload, change.removed)
            result = self._commit(current, change, events, actor)
            what = describe_write(current.state, meta, change.upload, change.removed)
            if what:
                log.info("%s %s", actor.name if actor else "registry-gen", what)
            return result

    def store_batch(
        self, write: Callable[[ContentStorage], list[str]], journal: BatchJournal | None = None
    ) -> list[str]:
        """Runs `write` on content/ under the lock without rebuilding; returns the keys it wrote.

        For imports: a rebuild per package of a 10,000-package import would cost O(n²), so the
        importer lands every package through here and then runs one incremental build over the
        returned keys (`run_build(settings, changed=...)`). `journal`: the write's events and the
        files it will leave, journalled pending first and done once `write` wrote something (the
        build that serves it comes later, for the whole batch)."""
        with self.locked():
            self._recover()
            return self._journalled(write, journal)

    def land(self, write: Callable[[ContentStorage], list[str]], journal: BatchJournal | None = None) -> BuildResult | None:
        """Runs `write` on content/ under the lock and rebuilds what it wrote before returning.

        The mirror lands through here (registry_gen.mirror.service): an upstream's document or
        tarball, or several of them at once (it groups the landings that wait), then one build.
        Its landings are not journalled (ARCHITECTURE.md, "The journal": upstream churn is no write
        of this registry); an administrator's `mirror make-local` is, through `journal`."""
        with self.locked():
            self._recover()
            written = self._journalled(write, journal)
            return self._build(written) if written else None

    def _journalled(self, write: Callable[[ContentStorage], list[str]], journal: BatchJournal | None) -> list[str]:
        """`write` on content/, journalled pending first and done once it wrote something."""
        if journal is None:
            self._move_all_tokens()
            return write(self.storage)
        entries = self._opened_journal()
        self._move_all_tokens()  # a batch names no folder in advance: every instance lists again
        write_id = entries.begin_write(
            journal.files, journal.events, journal.actor, None, publish.now_iso(), journal.who.to_json()
        )
        try:
            self._confirm_lock()
            written = write(self.storage)
        except BaseException:
            entries.finish_write(write_id, done=False)
            raise
        entries.finish_write(write_id, done=bool(written))
        return written

    @contextmanager
    def locked(self, name: str | None = None) -> Iterator[None]:
        """The write lock (registry_gen.state.locks) for package `name`, or for every package.
        Threads queue on a thread lock (no polling), then one of them waits for the write lock,
        at most LOCK_TIMEOUT_SECONDS in all (LockTimeout: HTTP 503)."""
        deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
        if not self._thread_lock.acquire(timeout=LOCK_TIMEOUT_SECONDS):
            raise LockTimeout("the registry is busy with other writes; retry shortly")
        try:
            wait = max(0.1, deadline - time.monotonic())
            with self._write_lock.package(name, wait) if name is not None else self._write_lock.whole(wait) as lock:
                self._lock = lock
                self._held = frozenset({name}) if name is not None else frozenset()
                yield
        except StateUnavailable:
            self._drop_journal()  # its connection died with the database (a restart): the next write opens another
            raise
        finally:
            self._held = frozenset()
            self._lock = None
            self._thread_lock.release()

    def _confirm_lock(self) -> None:
        """LockLost unless the write lock is still held (registry_gen.state.locks): asked before
        content/ changes and before the build commits, the steps that make a write visible."""
        if self._lock is not None:
            self._lock.confirm()

    # ---- the steps

    def _current(self, name: str) -> CurrentPackage:
        validate_name(name, legacy=True)  # a new name meets the strict rule in publish.apply_*
        if name in self.reserved_names:
            raise BadRequest(f"the name {name!r} is taken by this registry's own endpoints (/{name}); choose another")
        return self.reader.current(name)

    def _commit(self, current: CurrentPackage, change: Change, events: list[JournalEvent], actor: Actor | None) -> BuildResult:
        """Journals the write pending, changes content/, builds; done, or undone and aborted."""
        name = current.state.name
        removing = {key for version in sorted(change.removed) for key in self.reader.archive_keys(name, version)}
        owed = self._owe_purge(name, change)
        journal = self._opened_journal()
        files = self._files_after(current, change, removing)
        write_id = journal.begin_write(
            files, events, actor.name if actor else "registry-gen",
            actor.account_id if actor else None, publish.now_iso(), origin_of(actor).to_json(),
        )  # fmt: skip
        failpoint("after-intent")
        try:
            result, early = self._write(current, change, sorted(removing), write_id, package_folders(files))
        except BaseException:
            self._abort(write_id)
            raise
        failpoint("after-write")
        # Journalled done only once the readers' tree holds the write. A writer killed before that,
        # or a tree bucket that refuses the upload (a 503 to the client), leaves it pending, never
        # undone: once this lock is released its writer counts as gone, and whoever resolves it
        # (the leader within seconds, or the package's next write) renders the package again and
        # uploads it (build.detect.landed_packages), then journals it done.
        self._publish_tree(result, early)
        failpoint("after-upload")
        # On the journal's connection of now: a restart since begin_write ended that one, and the
        # write was committed under its lock (the build's fence), so it is done.
        self._opened_journal().finish_write(write_id, done=True)
        self._purge(result, owed)
        return result

    def _abort(self, write_id: int) -> None:
        """Journals an undone write aborted. With the database gone too (a restart that also took
        the lock) it stays pending, and the next build resolves it from content/, which no longer
        holds it: aborted all the same; the caller's error is the one to report."""
        with suppress(StateUnavailable):
            self._opened_journal().finish_write(write_id, done=False)

    def _owe_purge(self, name: str, change: Change) -> int | None:
        """The purge this write will owe the caches in front, recorded in the ledger before
        anything is stored (its documents, and the tarballs it removes): a process killed between
        the render and the purge leaves it for the next retry (registry_gen.purge)."""
        if self.purger is None:
            return None
        folder = package_dir(name)
        tarballs = [f"{folder}/-/{tarball_filename(name, version)}" for version in sorted(change.removed)]
        return self.purger.owe([f"{folder}/{PACKAGE_DOCUMENT}", f"{folder}/{ABBREVIATED_DOCUMENT}", *tarballs])

    def _opened_journal(self) -> Journal:
        """The journal, opened once per service (with the lock held: writes use it one at a time),
        and again when a database restart killed its connection."""
        if self._journal is not None and not self._journal.usable():
            self._drop_journal()
        if self._journal is None:
            self._journal = self.state.journal()
        return self._journal

    def _drop_journal(self) -> None:
        journal, self._journal = self._journal, None
        if journal is not None:
            with suppress(StateUnavailable):
                journal.close()

    def _write(
        self, current: CurrentPackage, change: Change, removing: list[str], write_id: int, folders: set[str]
    ) -> tuple[BuildResult, EarlyUpload | None]:
        """Stores the change (`folders`: those whose tokens its begin_write moved), then builds; with
        a bucket, the new archive's tree tarball is uploaded while the build runs (`_upload_early`)."""
        name = current.state.name
        touched = [current.meta_key]  # the build looks only at these files (it trusts its state for the rest)
        added = None
        early = None
        # The rule ran on what was read under the lock; if the lock went since (a database restart),
        # another writer may have read the same and be writing now: stop before storing anything.
        self._confirm_lock()
        try:
            self._store_meta(current.meta_key, change)
            if change.upload is not None:
                added = self._store_archive(name, change.upload)
                touched.append(added)
                early = self._upload_early(change.upload)
            touched += self._remove_archives(removing)
            self._wrote(folders)
            failpoint("after-store")
            self._confirm_lock()  # again once stored: the build renders the tree, then commits (fenced too)
            result = self._build(touched, write_id, publish=False)  # _commit publishes once the write is done
        except BaseException:
            self._withdraw(early)
            self._roll_back(added, current, change)
            raise
        refused = result.refusals(name, [current.meta_key, *([added] if added else [])])
        if refused and added is not None:
            self._withdraw(early)
            self._roll_back(added, current, change)
            self._build(touched, write_id)
            raise BuildRefused("the registry could not take this archive: " + "; ".join(i.reason for i in refused))
        return result, early

    def _upload_early(self, upload: Upload) -> EarlyUpload | None:
        """With a tree bucket: the new version's tarball (the archive's bytes, which the build copies
        into the tree) sent while the build runs, so the answer waits for one upload phase fewer.
        Its archive is stored, so a writer killed from here on leaves a write that the recovery finds
        landed and builds; no document names the tarball before the build's upload waits for it."""
        if self.objects is None:
            return None
        return self.objects.tree.upload_early(tarball_path(upload.name, upload.version), upload.data)

    def _withdraw(self, early: EarlyUpload | None) -> None:
        """The early tarball of a write that failed or was refused, removed before its archive is:
        no document names it. Never raises over the write's own error: a bucket that refuses the
        removal leaves a tarball no document names (logged), which a later publish of the version overwrites."""
        if early is None or self.objects is None:
            return
        try:
            self.objects.tree.withdraw(early)
        except Exception:  # noqa: BLE001 - the write's own error is the one to report
            log.warning("could not remove %s from the tree bucket after its write failed; no document names it", early.relative, exc_info=True)

    def _files_after(self, current: CurrentPackage, change: Change, removing: set[str]) -> dict[str, str | None]:
        """What each file of content/ the write touches will hold after it (the journal's check)."""
        files: dict[str, str | None] = dict.fromkeys(removing)
        if change.delete_meta:
            files[current.meta_key] = None
        elif change.meta is not None:
            files[current.meta_key] = content_digest(dump_meta(change.meta))
        if change.upload is not None:
            files[archive_key(current.state.name, change.upload.version)] = content_digest(change.upload.data)
        return files

    def _move_all_tokens(self) -> None:
        if self.objects is not None:
            self._opened_journal().move_all_tokens()

    def _wrote(self, folders: set[str]) -> None:
        """With content in a bucket: every change of this write is stored and adopted in the work
        folder, so its copy of `folders` moves on by this write (ContentMirror.wrote)."""
        if self.objects is not None:
            self.objects.mirror.wrote(folders)

    def _recover(self) -> None:
        """Before each write reads: a writer killed between journalling a write and finishing it
        left it pending; one build resolves it from content/ (and takes its files). Before, not
        after: this write's meta would overwrite the dead one's, which would then read as not
        landed (aborted, never journalled) while its archive is served (registry_gen.state.ledger)."""
        if self._opened_journal().pending_writes(self._held):
            self._build([])

    def _build(self, touched: list[str], write_id: int | None = None, *, publish: bool = True) -> BuildResult:
        self._sync_content(touched, write_id)
        result = build_locked(
            self.settings, touched, defer_whole=self.refresher is not None, writing=write_id, held=self._held,
            fence=self._confirm_lock,
        )  # fmt: skip
        if publish:
            self._after_render(result)
        if self.refresher is not None:
            self.refresher.schedule()
        return result

    def _after_render(self, result: BuildResult, owed: int | None = None) -> None:
        """What follows each build of a write: what it wrote goes to the readers' tree (a bucket;
        nothing to do for out_dir), then the caches in front are told exactly which files changed
        (registry_gen.purge; bounded, never raises). A write is answered only after this, so the
        origin serves it at once."""
        self._publish_tree(result)
        self._purge(result, owed)

    def _publish_tree(self, result: BuildResult, early: EarlyUpload | None = None) -> None:
        if self.objects is not None:
            self.objects.tree.publish(result, early)

    def _purge(self, result: BuildResult, owed: int | None) -> None:
        failpoint("before-purge")
        if self.purger is not None:
            self.purger.after_build(result.written, result.removed, owed)

    def _sync_content(self, touched: list[str], write_id: int | None = None) -> None:
        """With content in a bucket: the work folder's copy of the packages this build reads (the
        touched ones, and those of writes a crashed writer left pending) made equal to the bucket.
        A touched folder whose token (read here, under its lock) is the one this copy was made at
        is not listed (ContentMirror.sync_folders); a pending write's folders always are. Both
        read in one round trip: a token read before the pending folders' listing is as good as one
        after, since only a holder of the folder's lock (this write) or a start moves it."""
        if self.objects is None:
            return
        touched_folders = package_folders(touched)
        writes, tokens = self._opened_journal().pending_and_tokens(self._held, touched_folders)
        pending = [key for write in writes if write.id != write_id for key in write.files]
        self.objects.mirror.sync_packages(pending)
        folders = touched_folders - package_folders(pending)
        if folders:
            self.objects.mirror.sync_folders(folders, tokens)

    def _store_meta(self, key: str, change: Change) -> None:
        # The meta (owners, times, unpublish records) is written first: a kill before the archive
        # lands leaves a number without an archive, which stays publishable; the other order could
        # leave an archive that nobody owns.
        if change.delete_meta:
            self.storage.remove(key)
            self._adopt_removal(key)
        elif change.meta is not None:
            data = dump_meta(change.meta)
            self.storage.replace(key, data)
            self._adopt(key, data)

    def _store_archive(self, name: str, upload: Upload) -> str:
        target = archive_key(name, upload.version)
        try:
            self.storage.create(target, upload.data)
        except VersionConflict as exc:
            raise VersionConflict(
                f"content/ already holds an archive for {name}@{upload.version} (not yet built?); "
                "a version number can be published only once"
            ) from exc
        self._adopt(target, upload.data)
        return target

    def _adopt(self, key: str, data: bytes) -> None:
        """With content in a bucket: what was just stored there goes to the work folder too, so the
        build's sync need not read it back (registry_gen.objectstore.ContentMirror.adopt)."""
        if self.objects is not None:
            self.objects.mirror.adopt(key, data)

    def _remove_archives(self, keys: list[str]) -> list[str]:
        for key in keys:
            self.storage.remove(key)
            self._adopt_removal(key)
        return keys

    def _adopt_removal(self, key: str) -> None:
        if self.objects is not None:
            self.objects.mirror.adopt_removal(key)

    def _roll_back(self, added: str | None, current: CurrentPackage, change: Change) -> None:
        if self.objects is not None:  # the work folder holds what this write stored: listed again next time
            self.objects.mirror.forget(package_folders([current.meta_key]))
        if added is not None:
            self.storage.remove(added)  # created by this write (create-only): nobody else's
        if not (change.meta is not None or change.delete_meta):
            return
        # Put back the meta this write replaced, unless it is no longer the one this write stored:
        # a write that lost its lock must not undo what the next holder stored since.
        stored = None if change.delete_meta else dump_meta(change.meta)  # type: ignore[arg-type]
        if self.storage.read(current.meta_key) != stored:
            return
        if current.meta_bytes is None:
            self.storage.remove(current.meta_key)
        else:
            self.storage.replace(current.meta_key, current.meta_bytes)


def admin_write_service(settings: Settings) -> WriteService:
    """The write service of an administrator's command (`owner claim`, `owner bind-recorded`, the
    email erasure of `user remove`): the api's own path. With `storage:` (content and tree in buckets), the command's work folder is
    synced from the content bucket for the packages it touches, the build's files go to the tree
    bucket and the caches are purged before it returns, as an api instance does; -/all and search
    are left stale in the shared state for the api's leader (this folder holds no whole tree)."""
    from registry_gen.objectstore import open_object_store

    objects = open_object_store(settings)
    if objects is None:
        return WriteService(settings)
    settings.content_dir.mkdir(parents=True, exist_ok=True)
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    return WriteService(settings, refresher=LeaderRewrites(), objects=objects)


class LeaderRewrites:
    """An IndexRewrites for a one-off command on PostgreSQL: each build marks the whole documents
    stale in the state, and the api's leader (registry_gen.leader) rewrites them."""

    def schedule(self) -> None:
        return None

    def flush(self) -> None:
        return None


def _refuse_mirrored(current: CurrentPackage) -> None:
    """A mirrored package takes no local writes: its versions are the upstream's (and a publish
    here would mix two origins under one name). An administrator makes it local first."""
    record = current.state.meta.mirror
    if record is not None:
        raise Forbidden(
            f"{current.state.name} is mirrored from the uplink {record.uplink}: it takes no writes here; an administrator "
            f"can make it a local package with `registry-gen mirror make-local {current.state.name}`"
        )
