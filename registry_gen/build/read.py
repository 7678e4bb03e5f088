"""Phase 2, read: opens the new and changed archives and meta files (archives in worker
processes for big builds), and reads a version's manifest back from the manifest cache."""

from __future__ import annotations

import itertools
import json
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, TypeVar

from registry_gen import site
from registry_gen.build.detect import ContentChanges, PathSpool, forget_file
from registry_gen.build.results import BuildIssue, ProgressCallback
from registry_gen.errors import InvalidArchive, InvalidManifest, RegistryError
from registry_gen.layout import CONVERTED_FOLDER
from registry_gen.manifest import validate_manifest
from registry_gen.meta import parse_meta
from registry_gen.packument import dumps
from registry_gen.settings import Limits, Settings
from registry_gen.state.records import ArchiveRecord, CachedManifest
from registry_gen.state.sqlite_cache import BuildState, ManifestCache
from registry_gen.workers import worker_pool
from registry_gen.writer import atomic_write_bytes


PARALLEL_THRESHOLD = 32  # changed archives from which reading goes to worker processes


READ_BATCH = 16  # archives per worker task: fewer round trips, small enough to balance


T = TypeVar("T")


R = TypeVar("R")


def converted_cache(state_folder: Path, shasum: str) -> Path:
    return state_folder / CONVERTED_FOLDER / shasum[:2] / f"{shasum}.tgz"


def inspect_archive(
    content_dir: Path, state_folder: Path, relative: str, limits: Limits
) -> tuple[ArchiveRecord, CachedManifest | None]:
    """Reads one archive (in a worker process for big builds): its record, and the JSON the
    packuments need from it (manifest, README) for the manifest cache."""
    from registry_gen.archive import read_archive  # tarfile and zipfile load when an archive is read

    path = content_dir / relative
    record = ArchiveRecord(relative, 0, 0)
    try:
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            record.size, record.mtime_ns = stat.st_size, stat.st_mtime_ns
            contents = read_archive(handle, limits)
        manifest = validate_manifest(contents.manifest)
    except InvalidManifest as exc:
        record.error = "invalid package.json: " + "; ".join(str(p) for p in exc.problems)
        return record, None
    except InvalidArchive as exc:
        record.error = str(exc)
        return record, None
    except OSError as exc:
        record.error = f"cannot read: {exc.strerror or exc}"
        return record, None
    digests = contents.digests
    record.name = manifest["name"]
    record.version = manifest["version"]
    record.shasum = digests.shasum
    record.integrity = digests.integrity
    record.tarball_size = digests.size
    record.file_count = contents.file_count
    record.unpacked_size = contents.unpacked_size
    record.converted = contents.converted is not None
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
    cache: ManifestCache, record: ArchiveRecord, settings: Settings, *, readme: bool = False, files: bool = False
) -> dict[str, Any]:
    """{"manifest": ...} of one archive, plus "readme" and "readmeFilename", and "files", when asked."""
    body = cache.manifest(record.shasum or "")
    stored = cache.readme(record.shasum or "") if readme and body is not None else None
    listing = cache.files(record.shasum or "") if files and body is not None else None
    missing = body is None or (readme and stored is None) or (files and listing is None)
    if missing and not record.path:
        raise RegistryError(f"the manifest cache lost a published version ({record.integrity}); put its archive back into content/")
    if missing:
        # The cache went missing (a cleaned tree) or predates file lists: read this one archive again.
        fresh, cached = inspect_archive(settings.content_dir, settings.state_folder, record.path, settings.limits)
        if fresh.error or fresh.shasum != record.shasum or cached is None:
            raise RegistryError(f"{record.path}: changed while building, retry")
        cache.heal(record.shasum or "", cached)
        body, stored, listing = cached.manifest, (cached.readme, cached.readme_filename), cached.files
    loaded: dict[str, Any] = {"manifest": json.loads(body)}
    if readme and stored is not None:
        loaded["readme"], loaded["readmeFilename"] = stored
    if files and listing is not None:
        loaded["files"] = tuple((path, size) for path, size in json.loads(listing))
    return loaded


def version_extras(cache: ManifestCache, record: ArchiveRecord, settings: Settings) -> site.VersionExtras:
    """What a version's site pages need from its archive: README and file list (from the cache)."""
    loaded = load_cached(cache, record, settings, readme=True, files=True)
    return site.VersionExtras(loaded.get("readme"), loaded.get("readmeFilename"), loaded.get("files"))


def update_metas(
    settings: Settings, state: BuildState, changes: ContentChanges, errors: list[BuildIssue], affected: set[str]
) -> None:
    """Re-reads the meta files that changed; adds the names they concern to `affected`. What was
    parsed is not kept (a full build would hold every meta file): meta_of reads a package's file again."""
    for relative in changes.removed_metas:
        previous = state.meta(relative)
        if previous and previous[0]:
            affected.add(previous[0])
        state.delete_meta(relative)
    for relative in changes.metas:  # in path order
        previous = state.meta(relative)
        previous_name = previous[0] if previous else state.forgotten_meta_name(relative)
        if previous_name:
            affected.add(previous_name)
        try:
            meta = parse_meta((settings.content_dir / relative).read_bytes())
        except InvalidManifest as exc:
            # Keeps the name it had: that package stays at its last good tree until this is fixed.
            state.put_meta(relative, previous_name, "invalid registry-meta.json: " + "; ".join(map(str, exc.problems)))
            continue
        except OSError as exc:
            errors.append(BuildIssue(relative, f"cannot read: {exc}"))
            state.delete_meta(relative)
            forget_file(state, relative)
            continue
        state.put_meta(relative, meta.name, None)
        affected.add(meta.name)


def held_before(state: BuildState, previous: ArchiveRecord | None, path: str) -> tuple[str | None, str | None]:
    """The name and version an archive held when it could last be read (none: it never could)."""
    if previous is not None:
        return previous.name, previous.version
    return state.forgotten_archive(path) or (None, None)
