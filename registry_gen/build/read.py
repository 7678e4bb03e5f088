"""Phase 2, read: opens the new and changed archives and meta files (archives in worker
processes for big builds), and reads a version's manifest back from the manifest cache."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from registry_gen import site
from registry_gen.build.context import BuildContext, ProgressCallback
from registry_gen.build.detect import ContentChanges, PathSpool, forget_file
from registry_gen.build.results import BuildIssue
from registry_gen.errors import InvalidArchive, InvalidManifest, RegistryError
from registry_gen.layout import CONVERTED_FOLDER
from registry_gen.manifest import validate_manifest
from registry_gen.meta import parse_meta
from registry_gen.names import tarball_path
from registry_gen.packument import dumps
from registry_gen.settings import Limits, Settings
from registry_gen.state import BuildSession, Manifests
from registry_gen.state.records import ArchiveRecord, CachedManifest
from registry_gen.workers import worker_pool
from registry_gen.writer import atomic_write_bytes


PARALLEL_THRESHOLD = 32  # changed archives from which reading goes to worker processes
READ_BATCH = 16  # archives per worker task: fewer round trips, small enough to balance
RECORD_BATCH = 256  # archives (or meta files) read before their records go to the state in one call
T = TypeVar("T")
R = TypeVar("R")


def converted_cache(state_folder: Path, shasum: str) -> Path:
    return state_folder / CONVERTED_FOLDER / shasum[:2] / f"{shasum}.tgz"


def inspect_archive(
    content_dir: Path, state_folder: Path, relative: str, limits: Limits
) -> tuple[ArchiveRecord, CachedManifest | None]:
    """Reads one archive (in a worker process for big builds): its record, and the JSON the
    packuments need from it (manifest, README) for the manifest cache."""
    return inspect_file(content_dir / relative, relative, state_folder, limits)


def inspect_file(path: Path, relative: str, state_folder: Path, limits: Limits) -> tuple[ArchiveRecord, CachedManifest | None]:
    """inspect_archive of the file at `path`, recorded under `relative` (its key in content/, or ''
    for a copy that is not in content/, such as the tree's copy of a published tarball)."""
    from registry_gen.archive import read_archive  # tarfile and zipfile load when an archive is read

    size = mtime_ns = 0
    try:
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            size, mtime_ns = stat.st_size, stat.st_mtime_ns
            contents = read_archive(handle, limits)
        manifest = validate_manifest(contents.manifest)
    except InvalidManifest as exc:
        return ArchiveRecord(relative, size, mtime_ns, error="invalid package.json: " + "; ".join(str(p) for p in exc.problems)), None
    except InvalidArchive as exc:
        return ArchiveRecord(relative, size, mtime_ns, error=str(exc)), None
    except OSError as exc:
        return ArchiveRecord(relative, size, mtime_ns, error=f"cannot read: {exc.strerror or exc}"), None
    digests = contents.digests
    record = ArchiveRecord(
        relative, size, mtime_ns, manifest["name"], manifest["version"], digests.shasum, digests.integrity, digests.size,
        contents.file_count, contents.unpacked_size, contents.converted is not None,
    )  # fmt: skip
    if contents.converted is not None:
        atomic_write_bytes(converted_cache(state_folder, digests.shasum), contents.converted)
    files = json.dumps(contents.files, separators=(",", ":")).encode()
    return record, CachedManifest(dumps(manifest), contents.readme, contents.readme_filename, files)


def _inspect_batch(args: tuple[str, str, list[str], Limits]) -> list[tuple[ArchiveRecord, CachedManifest | None]]:
    content_dir, state_folder, relatives, limits = args
    return [inspect_archive(Path(content_dir), Path(state_folder), r, limits) for r in relatives]


def worker_count() -> int:
    return min(os.cpu_count() or 1, 8)


def ordered_map(executor: Executor, fn: Callable[[T], R], items: Iterable[T], window: int) -> Iterator[R]:
    """executor.map, in order, with at most `window` tasks in flight: memory stays flat however
    many items there are (Executor.map submits everything at once)."""
    pending: deque[Any] = deque()
    for item in items:
        pending.append(executor.submit(fn, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _read_jobs(settings: Settings, relatives: Iterable[str]) -> Iterator[tuple[str, str, list[str], Limits]]:
    """READ_BATCH paths per worker task, taken from `relatives` only as the tasks are submitted."""
    content, state_folder = str(settings.content_dir), str(settings.state_folder)
    paths = iter(relatives)
    while batch := list(itertools.islice(paths, READ_BATCH)):
        yield content, state_folder, batch, settings.limits


def read_changed(
    settings: Settings, relatives: PathSpool, progress: ProgressCallback | None
) -> Iterator[tuple[ArchiveRecord, CachedManifest | None]]:
    """Reads the changed archives, in path order, in worker processes when there are many."""
    total = len(relatives)
    jobs = _read_jobs(settings, relatives)
    workers = worker_count()
    done = 0
    if total >= PARALLEL_THRESHOLD and workers > 1:
        with worker_pool(workers) as pool:
            for batch in ordered_map(pool, _inspect_batch, jobs, window=workers * 4):
                yield from batch
                done += len(batch)
                if progress:
                    progress("read", done, total)
    else:
        for job in jobs:
            batch = _inspect_batch(job)
            yield from batch
            done += len(batch)
            if progress:
                progress("read", done, total)


def load_cached(
    cache: Manifests, record: ArchiveRecord, settings: Settings, *, readme: bool = False, files: bool = False, manifest: bool = True,
    known: Mapping[str, bytes] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """{"manifest": ...} of one archive (unless not asked: the pages' extras have it already),
    plus "readme" and "readmeFilename", and "files", when asked. `known`: manifests already read
    for many archives at once (`Manifests.manifests_of`); one missing from it is missing."""
    # The manifest's bytes only when asked (the pages' extras ask for README and files): its row
    # is there exactly when the README's is (one row of the same table).
    shasum = record.shasum or ""
    body = (known.get(shasum) if known is not None else cache.manifest(shasum)) if manifest else None
    stored, listing = _cached_extras(cache, shasum, readme, files) if body is not None or not manifest else (None, None)
    missing = (manifest and body is None) or (readme and stored is None) or (files and listing is None)
    if missing:
        # The cache went missing (a cleaned tree) or predates file lists: read this one archive again.
        fresh, cached = _read_again(settings, record)
        if fresh.error or fresh.shasum != record.shasum or cached is None:
            if not record.path:
                raise RegistryError(
                    f"the manifest cache lost a published version ({record.integrity}) and the tree's copy of it is gone; "
                    "put its archive back into content/"
                )
            raise RegistryError(f"{record.path}: changed while building, retry")
        cache.heal(record.shasum or "", cached)
        body, stored, listing = cached.manifest, (cached.readme, cached.readme_filename), cached.files
    loaded: dict[str, Any] = {"manifest": json.loads(body)} if manifest else {}
    if readme and stored is not None:
        loaded["readme"], loaded["readmeFilename"] = stored
    if files and listing is not None:
        loaded["files"] = tuple((path, size) for path, size in json.loads(listing))
    return loaded


def _cached_extras(cache: Manifests, shasum: str, readme: bool, files: bool) -> tuple[tuple[str | None, str | None] | None, bytes | None]:
    """The README row and the file list asked for: both in one query (a version's pages want both)."""
    if readme and files:
        row = cache.extras(shasum)
        return ((row[0], row[1]), row[2]) if row is not None else (None, None)
    return (cache.readme(shasum) if readme else None), (cache.files(shasum) if files else None)


def _read_again(settings: Settings, record: ArchiveRecord) -> tuple[ArchiveRecord, CachedManifest | None]:
    """The archive a lost cache entry came from, read again: from content/, or, for a published
    version content/ no longer holds (an empty path), from the tree's copy of its tarball, which
    holds the served bytes."""
    if record.path:
        return inspect_archive(settings.content_dir, settings.state_folder, record.path, settings.limits)
    if not (record.name and record.version):
        return ArchiveRecord("", 0, 0, error="no copy"), None
    return inspect_file(settings.out_dir / tarball_path(record.name, record.version), "", settings.state_folder, settings.limits)


def version_extras(cache: Manifests, record: ArchiveRecord, settings: Settings) -> site.VersionExtras:
    """What a version's site pages need from its archive: README and file list (from the cache)."""
    loaded = load_cached(cache, record, settings, readme=True, files=True, manifest=False)
    return site.VersionExtras(loaded.get("readme"), loaded.get("readmeFilename"), loaded.get("files"))


@dataclass(frozen=True)
class ReadResult:
    """What phase 2 found: the packages its changes touch (none collected in a full build, which
    writes every package), the sha1s of tarballs no archive holds any more (None: look at all),
    how many archives it read, and the files it could not read."""

    affected: set[str]
    dropped: set[str] | None
    archives_read: int
    errors: list[BuildIssue]


def read_content(context: BuildContext, state: BuildSession, cache: Manifests, changes: ContentChanges) -> ReadResult:
    """Phase 2: opens only new and changed archives and meta files; returns the packages they touch."""
    touched: set[str] = set()
    dropped: set[str] | None = None if context.full else set()
    if changes.removed_archives:
        removed = state.previous_archives(changes.removed_archives)
        touched.update(r.name for r in removed.values() if r.name)
        _drop(dropped, (r.shasum for r in removed.values()))
        state.record_archives((), removed)
    batch: list[tuple[ArchiveRecord, CachedManifest | None]] = []
    for found in read_changed(context.settings, changes.archives, context.progress):
        batch.append(found)
        if len(batch) >= RECORD_BATCH:
            _record_batch(state, cache, batch, touched, dropped)
            batch = []
    _record_batch(state, cache, batch, touched, dropped)
    errors = update_metas(context.settings, state, changes, touched)
    return ReadResult(set() if context.full else touched, dropped, len(changes.archives), errors)


def _record_batch(
    state: BuildSession, cache: Manifests, batch: list[tuple[ArchiveRecord, CachedManifest | None]], touched: set[str],
    dropped: set[str] | None,
) -> None:  # fmt: skip
    """One batch of archives read: what each replaces, into the state; their manifests, into the cache."""
    if not batch:
        return
    previous = state.previous_archives(record.path for record, _ in batch)
    records = []
    for record, _ in batch:
        before = previous.get(record.path)
        if record.error is not None and before is not None:  # damaged: it keeps what it held, so a
            record = dataclasses.replace(record, name=before.name, version=before.version)  # version published from it stays served
        touched.update(n for n in (before.name if before else None, record.name) if n)
        if before and before.shasum != record.shasum:
            _drop(dropped, [before.shasum])
        records.append(record)
    state.record_archives(records, ())
    cache.put_many([(record.shasum, body) for record, body in batch if body is not None and record.shasum])


def _drop(dropped: set[str] | None, shasums: Iterable[str | None]) -> None:
    if dropped is not None:
        dropped.update(s for s in shasums if s)


def update_metas(settings: Settings, state: BuildSession, changes: ContentChanges, affected: set[str]) -> list[BuildIssue]:
    """Re-reads the meta files that changed; adds the names they concern to `affected`. What was
    parsed is not kept (a full build would hold every meta file): plan.meta_of reads a package's file
    again. Returns the files it could not read."""
    if changes.removed_metas:
        removed = state.previous_meta_names(changes.removed_metas)
        affected.update(name for name in removed.values() if name)
        state.record_metas((), removed)
    errors: list[BuildIssue] = []
    paths = iter(changes.metas)  # in path order
    while batch := list(itertools.islice(paths, RECORD_BATCH)):
        previous = state.previous_meta_names(batch)
        affected.update(name for name in previous.values() if name)
        found = [_read_meta(settings, relative, previous.get(relative)) for relative in batch]
        state.record_metas([m for m in found if m[1] is not _UNREADABLE], [r for r, n, _ in found if n is _UNREADABLE])
        for relative, name, error in found:
            if name is _UNREADABLE:
                errors.append(BuildIssue(relative, str(error)))
                forget_file(state, relative)
            elif name:
                affected.add(name)
    return errors


_UNREADABLE: Any = object()  # a meta file that could not be read at all: forgotten, looked at again next build


def _read_meta(settings: Settings, relative: str, previous_name: str | None) -> tuple[str, Any, str | None]:
    """(path, the package it names, its error) of one meta file; an invalid one keeps the name it
    had, so that package stays at its last good tree until the file is fixed."""
    try:
        meta = parse_meta((settings.content_dir / relative).read_bytes())
    except InvalidManifest as exc:
        return relative, previous_name, "invalid registry-meta.json: " + "; ".join(map(str, exc.problems))
    except OSError as exc:
        return relative, _UNREADABLE, f"cannot read: {exc}"
    return relative, meta.name, None
