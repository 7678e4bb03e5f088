"""The orchestrator: scans content/, reads what changed, writes the tree. All I/O lives here.

Order of writes: tarballs, package documents, indexes and HTML, and the state last (one SQLite
transaction, see buildstate.py), so a build that dies half-way is simply redone by the next one.

Cost model (see bench/ and bench/REPORT.md): a build stats every file of content/ (or only the
paths it is told changed), reopens only archives whose size or mtime changed, and touches only
the packages those archives (or meta files) belong to, plus the packages whose pages link to a
package that appeared or went. Big builds read archives and write packages in worker processes.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import marshal
import os
import shutil
import stat as stat_module
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import Executor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from registry_gen import __version__, site
from registry_gen.buildlock import holding_build_lock
from registry_gen.state.records import ArchiveRecord, CachedManifest, Discarding, ListingChanges, ListingPlace
from registry_gen.state.sqlite_cache import (
    CACHE_FILE,
    LEGACY_STATE_FILE,
    SHARDS_STALE,
    WHOLE_STALE,
    BuildState,
    ManifestCache,
    read_legacy_times,
)
from registry_gen.contentrules import content_kind, is_candidate
from registry_gen.errors import ContentMissing, InvalidArchive, InvalidManifest, PruneRefused, RegistryError
from registry_gen.hosting import LEGACY_SEARCH_FOLDER, STATIC_EXTRAS, tag_documents
from registry_gen.keyring import load_signer, publish_keys
from registry_gen.layout import (
    ABBREVIATED_DOCUMENT,
    ALL_DOCUMENT,
    CONVERTED_FOLDER,
    LEGACY_FULL_SEARCH_FILE,
    PACKAGE_DOCUMENT,
    SEARCH_DOCUMENT,
)
from registry_gen.manifest import validate_manifest
from registry_gen.meta import PackageMeta, parse_meta
from registry_gen.names import package_dir, tarball_path
from registry_gen.packument import (
    Release,
    abbreviate,
    all_index_chunks,
    all_index_fragment,
    build_packument,
    dumps,
    search_document_chunks,
    search_fragment,
    summarize,
)
from registry_gen.settings import Limits, Settings
from registry_gen.signing import Signer
from registry_gen.statedir import move_state_out_of_tree
from registry_gen.timestamps import iso_from_ns
from registry_gen.versions import choose_dist_tags
from registry_gen.workers import worker_pool
from registry_gen.writer import atomic_copy, atomic_write_bytes, gzip_bytes, remove_tree, write_if_changed, write_streams_if_changed

if TYPE_CHECKING:  # filelock loads for the lock's other holders, or when the build has to wait for it
    from filelock import FileLock

log = logging.getLogger(__name__)

__all__ = ["ArchiveRecord", "BuildIssue", "BuildResult", "build_lock", "run_build", "scan_content"]

PARALLEL_THRESHOLD = 32  # changed archives from which reading goes to worker processes
PARALLEL_PACKAGES = 16  # packages to write from which writing goes to worker processes
READ_BATCH = 16  # archives per worker task: fewer round trips, small enough to balance
SPOOL_HELD = 4096  # new archive paths held in memory before they wait in the state (PathSpool)
PLAN_BATCH = 1000  # packages a full build plans at a time (the plans then wait in the state)
PACKUMENT_FILE = PACKAGE_DOCUMENT  # served for /<name> by index-file lookup (registry_gen.layout)
ABBREVIATED_FILE = ABBREVIATED_DOCUMENT
# Front pages by rank and the one search index of every package (before schema 6): a full build removes them.
LEGACY_LISTINGS = (f"{site.WEB_ROOT}/page", f"{site.WEB_ROOT}/search-index.json", f"{site.WEB_ROOT}/search-index.json.gz")
ProgressCallback = Callable[[str, int, int], None]
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class BuildIssue:
    """Something of content/ the build did not serve: `path` is the file (or the package name when
    the whole package failed); `package` is the package it concerns, when known."""

    path: str
    reason: str
    package: str | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class PathLog(list):  # type: ignore[type-arg]
    """Tree paths a build wrote or removed: all counted (`total`), the first KEPT named. A first
    build of a million versions writes ~4M files; naming every one would hold ~400 MB, and even
    100,000 named (~10 MB) made a full build's memory grow from 10k to 100k versions. Nothing
    reads past the first few: the tests name what small builds wrote, the CLI prints the total."""

    KEPT = 10_000
    total = 0  # a class default, so an unpickled log (items appended before its state) counts too

    def append(self, path: str) -> None:
        self.total += 1
        if len(self) < self.KEPT:
            super().append(path)

    def extend(self, paths: Iterable[str]) -> None:
        for path in paths:
            self.append(path)


class NameLog(PathLog):
    """The packages a build wrote again: all counted (`total`), the first KEPT named. A full build
    writes every package; the watch and serve lines name ten, the tests name what small builds wrote."""

    KEPT = 1_000


@dataclass
class BuildResult:
    packages: int = 0
    versions: int = 0
    written: list[str] = field(default_factory=PathLog)  # the first PathLog.KEPT; .total counts all
    removed: list[str] = field(default_factory=PathLog)
    skipped: int = 0
    rebuilt_packages: list[str] = field(default_factory=NameLog)  # the first NameLog.KEPT; .total counts all
    archives_read: int = 0
    errors: list[BuildIssue] = field(default_factory=list)
    refused: int = 0  # archives of content/ not served: unreadable, unaddressable, or in conflict
    seconds: float = 0.0

    @property
    def rebuilt(self) -> int:
        """How many packages this build wrote again (rebuilt_packages names only the first ones)."""
        return getattr(self.rebuilt_packages, "total", len(self.rebuilt_packages))

    def refusals(self, package: str, files: Iterable[str]) -> list[BuildIssue]:
        """What this build refused of `package`: any of `files` of content/, or the package itself."""
        wanted = set(files)
        return [i for i in self.errors if i.package in (package, None) and (i.path in wanted or i.path == package)]

    def summary(self) -> str:
        return (
            f"{self.packages} packages, {self.versions} versions, {getattr(self.written, 'total', len(self.written))} files written, "
            f"{self.skipped} packages unchanged, {self.refused} archives refused, "
            f"{len(self.errors)} errors, {self.seconds:.2f}s"
        )


# ---------------------------------------------------------------- scanning and reading


def scan_content(content_dir: Path) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """(size, mtime_ns) of every archive and every registry-meta.json below content_dir, by
    relative path (hidden and temp files skipped), from the same walk the build uses."""
    archives: dict[str, tuple[int, int]] = {}
    metas: dict[str, tuple[int, int]] = {}
    for folder, listing in _walk_listings(content_dir):
        for name, size, mtime_ns in listing:
            (archives if content_kind(name) == "archive" else metas)[_join(folder, name)] = (size, mtime_ns)
    return archives, metas


Listing = list[tuple[str, int, int]]  # (file name, size, mtime_ns) of one folder's candidates, by name


def _walk_listings(content_dir: Path) -> Iterator[tuple[str, Listing]]:
    """(folder relative to content_dir, its listing) for every folder holding an archive or a meta
    file. The hot loop of every build: one stat per candidate file and nothing else per file."""
    root = str(content_dir)
    if not os.path.isdir(root):
        return
    stack: list[Iterator[str]] = [iter([""])]  # per folder being walked: its subfolders still to walk
    while stack:
        folder = next(stack[-1], None)
        if folder is None:
            stack.pop()
            continue
        listing, subfolders = _scan_folder(root, folder)
        if subfolders:
            stack.append(_subfolders(folder, subfolders))
        if listing:
            yield folder, listing


def _scan_folder(root: str, folder: str) -> tuple[Listing, bytearray]:
    """One folder's candidate files, by name, and its subfolders' names, each ended by a NUL (no
    file name holds one): one buffer of ~1.2 MB for content/'s 70,000 package folders, where a
    list of their names held ~6 MB through the whole walk."""
    listing: Listing = []
    subfolders = bytearray()
    try:
        with os.scandir(os.path.join(root, folder) if folder else root) as entries:
            for entry in entries:
                name = entry.name
                if not is_candidate(name):
                    continue
                if entry.is_dir(follow_symlinks=False):  # from the directory entry: no syscall
                    subfolders += os.fsencode(name) + b"\0"
                elif content_kind(name) is not None and entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    listing.append((name, stat.st_size, stat.st_mtime_ns))
    except FileNotFoundError:
        return [], bytearray()  # removed while we walked
    listing.sort()
    return listing, subfolders


def _subfolders(folder: str, names: bytearray) -> Iterator[str]:
    start = 0
    while start < len(names):
        end = names.index(b"\0", start)
        yield _join(folder, os.fsdecode(bytes(names[start:end])))
        start = end + 1


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _decode_listing(blob: bytes | None) -> dict[str, tuple[int, int]]:
    if not blob:
        return {}
    try:
        return {name: (size, mtime) for name, size, mtime in marshal.loads(blob)}
    except (ValueError, EOFError, TypeError):
        return {}  # unreadable: every file in the folder counts as new


class PathSpool:
    """Paths to read, handed out in path order. Past SPOOL_HELD of them (a full build finds every
    archive) they go to a temporary table of `state`, so a build holds a few thousand at most."""

    def __init__(self, state: BuildState | None = None, spool: str = "spooled_paths") -> None:
        self.state = state
        self.spool = spool  # its table (BuildState.SPOOLS): the archives' or the meta files'
        self.held: list[str] = []
        self.count = 0
        self.spilled = False

    def append(self, path: str) -> None:
        self.held.append(path)
        self.count += 1
        if len(self.held) >= SPOOL_HELD and self.state is not None:
            self.state.spool_paths(self.held, fresh=not self.spilled, spool=self.spool)
            self.held.clear()
            self.spilled = True

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        """Once: in path order (the spool is emptied)."""
        if not self.spilled or self.state is None:
            held, self.held = sorted(self.held), []
            return iter(held)
        self.state.spool_paths(self.held, spool=self.spool)
        self.held.clear()
        return self.state.spooled_paths(spool=self.spool)


@dataclass
class ContentChanges:
    """What differs between content/ and the state's folder listings. The new listings go
    straight into the state (same transaction), and so do the new archive and meta paths past a few
    thousand (PathSpool): none of them is held in memory."""

    archives: PathSpool = field(default_factory=PathSpool)  # new or changed
    removed_archives: list[str] = field(default_factory=list)
    metas: PathSpool = field(default_factory=PathSpool)  # new or changed (a full build finds one per package or so)
    removed_metas: list[str] = field(default_factory=list)

    def add(self, folder: str, old: dict[str, tuple[int, int]], new: Listing | None) -> None:
        seen = set()
        for name, size, mtime in new or ():
            seen.add(name)
            if old.get(name) != (size, mtime):
                (self.archives if content_kind(name) == "archive" else self.metas).append(_join(folder, name))
        for name in old.keys() - seen:
            (self.removed_archives if content_kind(name) == "archive" else self.removed_metas).append(_join(folder, name))


def _store_listing(state: BuildState, folder: str, listing: Listing | None) -> None:
    state.put_listing(folder, marshal.dumps(listing) if listing else None)


def forget_file(state: BuildState, relative: str) -> None:
    """Leaves one file out of its folder's stored listing, so the next build looks at it again."""
    folder, _, name = relative.rpartition("/")
    listing = [(n, size, mtime) for n, (size, mtime) in sorted(_decode_listing(state.listing(folder)).items()) if n != name]
    _store_listing(state, folder, listing or None)


def detect_changes(content_dir: Path, state: BuildState) -> ContentChanges:
    """Stat-based change detection over all of content/: a folder whose listing (names, sizes,
    mtimes) is byte-identical to the stored one costs one comparison, whatever its size."""
    known = state.listings()
    changes = ContentChanges(PathSpool(state), metas=PathSpool(state, "spooled_metas"))
    for folder, listing in _walk_listings(content_dir):
        old = known.pop(folder, None)
        blob = marshal.dumps(listing)
        if old is not None and old == blob:
            continue
        changes.add(folder, _decode_listing(old), listing)
        state.put_listing(folder, blob)
    for folder, old in known.items():
        changes.add(folder, _decode_listing(old), None)
        state.put_listing(folder, None)
    return changes


def _relative_hint(content_dir: Path, path: str | Path) -> str:
    candidate = Path(path)
    if candidate.is_absolute():
        try:
            candidate = candidate.relative_to(content_dir)
        except ValueError:
            candidate = candidate.resolve().relative_to(content_dir.resolve())
    relative = candidate.as_posix().strip("/")
    if not relative or relative == "." or any(part in ("", ".", "..") for part in relative.split("/")):
        raise ValueError(f"{path}: not a file path inside {content_dir}")
    return relative


def detect_hinted_changes(content_dir: Path, state: BuildState, paths: Iterable[str | Path]) -> ContentChanges:
    """Change detection limited to `paths` (what the write API or watch mode knows it touched):
    cost in proportion to the hint, not to content/. Everything else is trusted to the state."""
    by_folder: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        folder, _, name = _relative_hint(content_dir, path).rpartition("/")
        if is_candidate(name) and content_kind(name) and not any(p.startswith(".") for p in folder.split("/") if p):
            by_folder[folder].add(name)
    changes = ContentChanges()
    for folder, names in sorted(by_folder.items()):
        stored = state.listing(folder)
        old = _decode_listing(stored)
        current = dict(old)
        for name in names:
            try:
                stat = os.stat(content_dir / _join(folder, name), follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                current.pop(name, None)
                continue
            if stat_module.S_ISREG(stat.st_mode):
                current[name] = (stat.st_size, stat.st_mtime_ns)
            else:
                current.pop(name, None)
        listing = sorted((name, size, mtime) for name, (size, mtime) in current.items())
        if current != old:
            changes.add(folder, old, listing)
            _store_listing(state, folder, listing or None)
    return changes


def _converted_cache(state_folder: Path, shasum: str) -> Path:
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
        atomic_write_bytes(_converted_cache(state_folder, digests.shasum), contents.converted)
    files = json.dumps(contents.files, separators=(",", ":")).encode()
    return record, CachedManifest(dumps(manifest), contents.readme, contents.readme_filename, files)


def _inspect_batch(args: tuple[str, str, list[str], Limits]) -> list[tuple[ArchiveRecord, CachedManifest | None]]:
    content_dir, state_folder, relatives, limits = args
    return [inspect_archive(Path(content_dir), Path(state_folder), r, limits) for r in relatives]


def _worker_count() -> int:
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


def _read_changed(
    settings: Settings, relatives: PathSpool, progress: ProgressCallback | None
) -> Iterator[tuple[ArchiveRecord, CachedManifest | None]]:
    """Reads the changed archives, in path order, in worker processes when there are many."""
    total = len(relatives)
    jobs = _read_jobs(settings, relatives)
    workers = _worker_count()
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


# ---------------------------------------------------------------- state


def settings_fingerprint(settings: Settings) -> str:
    """Anything that changes every output file forces a full rebuild when it changes."""
    parts = [__version__, settings.base_url, settings.site_title, str(settings.gzip), site.template_fingerprint(settings)]
    if settings.signing_key is not None or settings.signing_key_pem:
        parts.append("signed")  # turning signing on or off re-signs (or unsigns) every document; a new key does not
    if settings.packages.in_force:
        parts.append(repr(settings.packages))  # the listings show only what everyone may read
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


# ---------------------------------------------------------------- the build


def _load_cached(
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


def _version_extras(cache: ManifestCache, record: ArchiveRecord, settings: Settings) -> site.VersionExtras:
    """What a version's site pages need from its archive: README and file list (from the cache)."""
    loaded = _load_cached(cache, record, settings, readme=True, files=True)
    return site.VersionExtras(loaded.get("readme"), loaded.get("readmeFilename"), loaded.get("files"))


def _update_metas(
    settings: Settings, state: BuildState, changes: ContentChanges, errors: list[BuildIssue], affected: set[str]
) -> None:
    """Re-reads the meta files that changed; adds the names they concern to `affected`. What was
    parsed is not kept (a full build would hold every meta file): _meta_of reads a package's file again."""
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


def _meta_problems(state: BuildState) -> tuple[list[BuildIssue], set[str]]:
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


def _meta_of(settings: Settings, state: BuildState, name: str) -> PackageMeta | None:
    """The package's meta file (the first valid one by path)."""
    for relative, error in state.metas_of(name):
        if error is None:
            meta = parse_meta((settings.content_dir / relative).read_bytes())
            return meta if meta.name == name else None
    return None


def _releases_of(state: BuildState, name: str) -> tuple[dict[str, ArchiveRecord], list[tuple[str, str]]]:
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


def _seed_live(state: BuildState) -> None:
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


def _package_digest(name: str, releases: dict[str, ArchiveRecord], times: dict[str, str], meta: PackageMeta | None) -> str:
    parts = [
        [v, r.shasum, r.path, times[v], r.file_count, r.unpacked_size] for v, r in sorted(releases.items())
    ]
    body = json.dumps([name, parts, meta.to_json() if meta else None], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _tarball_source(settings: Settings, name: str, version: str, record: ArchiveRecord) -> Path:
    if not record.path:
        raise RegistryError(
            f"{name}@{version}: its published tarball is gone from {settings.out_dir} and content/ no longer "
            "holds its bytes; put the original archive back into content/"
        )
    return _converted_cache(settings.state_folder, record.shasum or "") if record.converted else settings.content_dir / record.path


def _write_json_pair(out_dir: Path, relative: str, data: bytes, settings: Settings, written: list[str]) -> None:
    if write_if_changed(out_dir / relative, data):
        written.append(relative)
    if settings.gzip:
        if write_if_changed(out_dir / (relative + ".gz"), gzip_bytes(data)):
            written.append(relative + ".gz")


def _write_package(
    context: _WriterContext, job: PackageJob, result: BuildResult
) -> tuple[dict[str, Any], list[str], dict[str, str], dict[str, str]]:
    """One package's files: tarballs first (a document must never point at a missing file), then
    its documents and pages; files it had before and has no more go. Returns the package
    document, its files, its tarballs (path -> sha1) and each version page's input key."""
    settings = context.settings
    built, tarballs = _write_tarballs(context, job, result)
    tags = choose_dist_tags(job.releases, job.meta.dist_tags)
    latest = _load_cached(context.cache, job.releases[tags["latest"]], settings, readme=True) if tags else {}
    packument = build_packument(
        job.name, built, job.meta, base_url=settings.base_url,
        readme=latest.get("readme"), readme_filename=latest.get("readmeFilename"), signer=context.signer,
    )
    files = [*tarballs, *_write_documents(settings, packument, result)]
    page_keys: dict[str, str] = {}
    if job.releases:
        site_files, page_keys = _write_site(context, job, packument, result)
        files.extend(site_files)
    for stale in sorted(set(job.previous.get("files", [])) - set(files)):
        if remove_tree(settings.out_dir, stale):
            result.removed.append(stale)
    return packument, files, tarballs, page_keys


def _write_tarballs(context: _WriterContext, job: PackageJob, result: BuildResult) -> tuple[list[Release], dict[str, str]]:
    """Copies each version's tarball unless the tree already has those bytes; the releases for the document."""
    settings = context.settings
    previous_tarballs: dict[str, str] = job.previous.get("tarballs", {})
    tarballs: dict[str, str] = {}
    built: list[Release] = []
    for version, record in job.releases.items():
        cached = _load_cached(context.cache, record, settings)
        built.append(Release(
            version=version, manifest=cached["manifest"], shasum=record.shasum or "", integrity=record.integrity or "",
            size=record.tarball_size, file_count=record.file_count, unpacked_size=record.unpacked_size,
            time=job.times[version],
        ))
        relative = tarball_path(job.name, version)
        tarballs[relative] = record.shasum or ""
        target = settings.out_dir / relative
        unchanged = previous_tarballs.get(relative) == record.shasum
        if not (unchanged and target.exists() and target.stat().st_size == record.tarball_size):
            atomic_copy(_tarball_source(settings, job.name, version, record), target)
            result.written.append(relative)
    return built, tarballs


def _write_documents(settings: Settings, packument: dict[str, Any], result: BuildResult) -> list[str]:
    """The full and abbreviated documents, the dist-tags, one document per tag (GET /<name>/<tag>)."""
    base = package_dir(packument["name"])
    files = []
    for relative, data in (
        (f"{base}/{PACKUMENT_FILE}", dumps(packument)),
        (f"{base}/{ABBREVIATED_FILE}", dumps(abbreviate(packument))),
        (f"-/package/{base}/dist-tags", dumps(packument["dist-tags"])),
        *((f"{base}/{tag}/{PACKUMENT_FILE}", dumps(doc)) for tag, doc in tag_documents(packument).items()),
    ):
        _write_json_pair(settings.out_dir, relative, data, settings, result.written)
        files.append(relative)
        if settings.gzip:
            files.append(relative + ".gz")
    return files


def _write_site(
    context: _WriterContext, job: PackageJob, packument: dict[str, Any], result: BuildResult
) -> tuple[list[str], dict[str, str]]:
    """Writes the package's HTML pages; a version's pages still on disk from the same inputs are
    kept as they are. Returns every page the package owns and each version's input key."""
    settings, name = context.settings, job.name
    previous_keys: dict[str, str] = job.previous.get("pages", {})
    on_disk = {v: k for v, k in previous_keys.items() if (settings.out_dir / site.version_page_path(name, v)).is_file()}
    rendered = site.render_package_site(
        packument,
        settings,
        registry_names=context.registry_names,
        tarball_sizes={version: record.tarball_size for version, record in job.releases.items()},
        dependents=job.dependents,
        extras=lambda version: _version_extras(context.cache, job.releases[version], settings),
        previous_keys=on_disk,
    )
    for relative, data in rendered.pages.items():
        if write_if_changed(settings.out_dir / relative, data):
            result.written.append(relative)
    return [*rendered.pages, *rendered.kept], rendered.keys


def _refresh_dependents(run: _Run, names: set[str], registry_names: AbstractSet[str]) -> None:
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
        releases, _ = _releases_of(state, name)
        latest = releases.get(packument.get("dist-tags", {}).get("latest"))
        page = site.package_page(
            packument,
            settings,
            registry_names=registry_names,
            tarball_sizes={version: r.tarball_size for version, r in releases.items()},
            dependents=dependents,
            latest_files=_version_extras(cache, latest, settings).files if latest else None,
        )
        for relative, data in page.items():
            if write_if_changed(settings.out_dir / relative, data):
                result.written.append(relative)


def listing_of(settings: Settings, summary: Mapping[str, Any]) -> ListingPlace:
    """Where a package shows in the listing documents: only packages with versions that anyone
    may read are listed (registry_gen.access); the API's search text covers every package."""
    name = str(summary["name"])
    people = [str(m.get("name", "")) for m in summary.get("maintainers", []) if isinstance(m, Mapping)]
    keywords = [str(k).lower() for k in summary.get("keywords") or [] if isinstance(k, str)]
    text = " ".join([name, str(summary.get("description") or ""), *keywords, *people]).lower()
    listed = bool(summary["versions"]) and settings.packages.is_public(name)
    return ListingPlace(
        listed, str(summary.get("modified") or ""), site.name_key(name), text, tuple(site.search_keys(summary)), site.search_entry(summary)
    )


def _write_listings(run: _Run) -> None:
    """The front page, and the browse pages and search shards this build's changes touched (all
    of them in a full build; emptied ones removed): a publish rewrites O(1) files here, each of
    bounded size, whatever the registry's size."""
    settings, state, result = run.settings, run.state, run.result
    changes = state.listing_changes
    if run.full:
        roots = state.listed_ranges() | _folders_in(settings.out_dir / site.BROWSE_ROOT)
        for root in sorted(roots):
            _write_browse_tree(run, root)
    else:
        for key in sorted(changes.ranges):
            _write_browse_path(run, key)
        for key in sorted(changes.pages):
            _write_browse_page(run, _listing_prefix(state, key))
    every_shard = run.full or bool(state.get_setting(SHARDS_STALE))
    shards = state.listed_shards() | _shards_on_disk(settings.out_dir) if every_shard else set(changes.shards)
    changed_leaves: dict[str, set[str]] = defaultdict(set)
    for key, bound in changes.leaves:
        changed_leaves[key].add(bound)
    for key in sorted(shards | set(changed_leaves)):
        _write_shard(run, key, recut=key in shards, changed=None if every_shard else changed_leaves[key])
    state.set_setting(SHARDS_STALE, "")
    if changes.front or run.full:
        counts = state.ranges()
        page = site.front_page(state.recent_summaries(site.RECENT_COUNT), sum(c for _, c in counts), counts, settings)
        _write_files(settings.out_dir, page, result)


def _write_browse_path(run: _Run, key: str) -> None:
    """The browse pages from a changed package's two-character range down to the range that lists
    it: O(depth) pages. A range that has just grown past PAGE_SIZE gets its sub-ranges written."""
    prefix = key[:2]
    while True:
        children = _write_browse_page(run, prefix)
        if children is None:
            return
        for child in children:
            if key.startswith(child) or child in run.browse_pages:  # next on this path, or written already
                continue
            if not (run.settings.out_dir / site.browse_page_path(child)).is_file():
                _write_browse_tree(run, child)
        if len(prefix) >= len(key):
            return
        prefix = key[: len(prefix) + 1]


def _listing_prefix(state: BuildState, key: str) -> str:
    """The browse page that lists the packages of browse key `key`: the first range on its path
    that is not split into sub-ranges, or the key itself (a split page lists its exact key)."""
    prefix = key[:2]
    while len(prefix) < len(key) and state.prefix_count(prefix) > site.PAGE_SIZE:
        prefix = key[: len(prefix) + 1]
    return prefix


def _write_browse_tree(run: _Run, prefix: str) -> None:
    """The page of `prefix` and of every range under it (a full build, a range that split)."""
    for child in _write_browse_page(run, prefix) or []:
        _write_browse_tree(run, child)


def _write_browse_page(run: _Run, prefix: str) -> list[str] | None:
    """Writes (or, if nothing starts with it any more, removes) the page of `prefix`, once per
    build; returns its sub-ranges when it lists them instead of packages, else None. Sub-range
    folders that no longer belong go."""
    if prefix not in run.browse_pages:
        run.browse_pages[prefix] = _render_browse_page(run, prefix)
    return run.browse_pages[prefix]


def _render_browse_page(run: _Run, prefix: str) -> list[str] | None:
    settings, state, result = run.settings, run.state, run.result
    folder = site.browse_folder(prefix)
    total = state.prefix_count(prefix)
    if not total:
        if remove_tree(settings.out_dir, folder):
            result.removed.append(folder)
        return None
    split = total > site.PAGE_SIZE
    children = state.prefix_children(prefix) if split else []
    packages = state.prefix_summaries(prefix, exact=split)
    links = [(_past_single_narrowings(state, child, count), count) for child, count in children]
    _write_files(settings.out_dir, site.browse_page(prefix, total, packages, links, settings), result)
    wanted = {child[-1] for child, _ in children}
    for stale in sorted(_folders_in(settings.out_dir / folder) - wanted):
        if remove_tree(settings.out_dir, f"{folder}/{stale}"):
            result.removed.append(f"{folder}/{stale}")
    return [child for child, _ in children] if split else None


def _past_single_narrowings(state: BuildState, prefix: str, count: int) -> str:
    """Where a sub-range's link should land: past ranges that only narrow to one sub-range and hold
    no package of their own (`syn` -> `syn-` when every name goes on with a dash), so a reader is
    not walked through pages offering a single link. Those pages still exist, for breadcrumbs.
    That landing is the longest prefix every key under `prefix` shares (a key that is itself a
    prefix of the others stops it there), read from the smallest and greatest key: two index
    reads, however many single narrowings a long shared name part makes."""
    if count <= site.PAGE_SIZE:
        return prefix
    first, last = state.key_bounds(prefix)
    return os.path.commonprefix([first, last]) if first else prefix


def _write_shard(run: _Run, key: str, *, recut: bool, changed: set[str] | None) -> None:
    """One search shard: its records in `<key>.json` while it is one leaf; else that file lists its
    leaves, each in `<key>/<id>.json`. `recut`: its leaves were cut or joined (the list is written
    again and leaves no longer listed go); `changed`: the leaves whose records changed (None: all).
    Without a cut, only the changed leaves are looked at: O(1) however many leaves the shard has."""
    settings, state, result = run.settings, run.state, run.result
    relative, folder = site.search_shard_path(key), f"{site.SEARCH_SHARD_ROOT}/{key}"
    if state.leaf_count(key, at_most=2) <= 1:
        bounds = state.shard_leaves(key)
        for path in (folder,) if bounds else (folder, relative, relative + ".gz"):
            if remove_tree(settings.out_dir, path):
                result.removed.append(path)
        if bounds:
            _write_search_json(settings, relative, site.join_search_shard(state.leaf_entries(key, bounds[0])), result)
        return
    if recut or changed is None:
        targets = _recut_shard(run, key, changed)
    else:
        targets = sorted(bound for bound in changed if state.has_leaf(key, bound))
    for bound in targets:
        _write_search_json(settings, site.search_leaf_path(key, bound), site.join_search_shard(state.leaf_entries(key, bound)), result)


def _recut_shard(run: _Run, key: str, changed: set[str] | None) -> list[str]:
    """Writes the list of a shard's leaves and removes the leaf files it no longer lists; returns
    the leaves to write: the changed ones (None: all) and any whose file is missing."""
    settings, result = run.settings, run.result
    bounds = run.state.shard_leaves(key)
    _write_search_json(settings, site.search_shard_path(key), site.search_shard_index(bounds), result)
    folder = f"{site.SEARCH_SHARD_ROOT}/{key}"
    ids = {site.search_leaf_id(bound): bound for bound in bounds}
    on_disk = set()
    for name in sorted(_names_in(settings.out_dir / folder)):
        leaf = name.split(".", 1)[0]
        if leaf not in ids:
            if remove_tree(settings.out_dir, f"{folder}/{name}"):
                result.removed.append(f"{folder}/{name}")
        elif name.endswith(".json"):
            on_disk.add(leaf)
    return [bound for leaf, bound in ids.items() if changed is None or bound in changed or leaf not in on_disk]


def _write_search_json(settings: Settings, relative: str, data: bytes, result: BuildResult) -> None:
    # Level 6, not 9: a publish rewrites up to SEARCH_KEY_LIMIT leaves; 9 costs 2-3x for ~2 % smaller.
    files = {relative: data, relative + ".gz": gzip_bytes(data, 6)} if settings.gzip else {relative: data}
    _write_files(settings.out_dir, files, result)


def _write_files(out: Path, files: Mapping[str, bytes], result: BuildResult) -> None:
    for relative, data in files.items():
        if write_if_changed(out / relative, data):
            result.written.append(relative)


def _folders_in(folder: Path) -> set[str]:
    try:
        return {entry.name for entry in os.scandir(folder) if entry.is_dir()}
    except FileNotFoundError:
        return set()


def _names_in(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _shards_on_disk(out: Path) -> set[str]:
    """The shards the tree holds: `<key>.json` files and the leaf folders of `<key>`."""
    root = out / site.SEARCH_SHARD_ROOT
    names = _names_in(root)
    keys = {name.split(".", 1)[0] for name in names if name.endswith((".json", ".json.gz"))}
    return {key for key in keys | {name for name in names if (root / name).is_dir()} if key}


def _write_fixed_files(settings: Settings, result: BuildResult) -> None:
    """What a full build writes once: the site's assets and not-found page, the ping answer and
    the extras for unconfigurable hosts; and what older trees kept that this layout does not."""
    _write_files(settings.out_dir, {**site.site_assets(settings), "-/ping": b"{}", **STATIC_EXTRAS}, result)
    for legacy in (LEGACY_SEARCH_FOLDER, *LEGACY_LISTINGS):
        if remove_tree(settings.out_dir, legacy):
            result.removed.append(legacy)
    (settings.state_folder / LEGACY_FULL_SEARCH_FILE).unlink(missing_ok=True)


def _write_whole_documents(settings: Settings, state: BuildState, result: BuildResult) -> None:
    """-/all and -/search.json: one URL each, listing every package, so they cannot be sharded.
    The long-running writers defer them (Settings.index_refresh_seconds; see IndexRefresher)."""
    out = settings.out_dir
    stamp = state.whole_document_stamp()
    # Both grow with the registry (tens of MB at 1M versions): streamed from the state to their
    # files and gzip siblings, never held whole.
    documents = {
        out / ALL_DOCUMENT: all_index_chunks(stamp, state.whole_document_fragments("all_fragment")),
        out / SEARCH_DOCUMENT: search_document_chunks(state.whole_document_fragments("search_fragment"), stamp),
    }
    written = write_streams_if_changed(documents, 9 if settings.gzip else None)
    result.written.extend(path.relative_to(out).as_posix() for path in written)
    state.set_setting(WHOLE_STALE, "")


def _resolve_times(
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


def _going(settings: Settings, state: BuildState, plans: Iterable[PackagePlan]) -> int:
    """How many of the packages planned would leave the tree unasked (see _refuse_mass_removal);
    0 with `--prune`. A package whose registry-meta.json records its unpublishing went on purpose."""
    if settings.prune:
        return 0
    return sum(1 for p in plans if not p.present and state.is_present(p.name) and not _unpublished(settings, state, p.name))


def _refuse_mass_removal(settings: Settings, state: BuildState, going: int) -> None:
    """Stops a build that would take most of the tree's packages away (`going` of them, _going)
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
        meta = _meta_of(settings, state, name)
    except (InvalidManifest, OSError):
        return False
    return bool(meta and meta.unpublished)


def is_open_entry(meta: PackageMeta) -> bool:
    """A name created before its first upload (the legacy publish's first step, PUT /<name>) gets
    a version-less packument, so the client's next GET succeeds; a fully unpublished one does not."""
    last_unpublish = max(meta.unpublished.values(), default="")
    return bool(meta.maintainers) and (bool(meta.pending) or (meta.created or "") > last_unpublish)


@dataclass(frozen=True)
class PackageJob:
    """Everything needed to write one package's files (sent to a worker process for big builds)."""

    name: str
    releases: dict[str, ArchiveRecord]
    times: dict[str, str]
    meta: PackageMeta
    previous: dict[str, Any]
    digest: str
    dependents: tuple[str, ...] = ()  # present packages whose latest version depends on this one


@dataclass
class PackageOutcome:
    name: str
    record: dict[str, Any] | None  # None when writing failed: the previous tree stays
    written: list[str]
    removed: list[str]
    error: str | None = None
    fragments: tuple[bytes, bytes] = (b"", b"")  # the package's -/all and -/v1/search pieces
    new: bool = False  # the package was not in the tree before
    releases: dict[str, ArchiveRecord] = field(default_factory=dict)  # what it now serves
    listing: ListingPlace | None = None  # where it shows in the listings (computed with its pieces, in the worker)


@dataclass
class _WriterContext:
    settings: Settings
    cache: ManifestCache
    registry_names: AbstractSet[str]
    signer: Signer | None = None


_worker_context: _WriterContext | None = None  # set once per worker process by _init_writer


def _init_writer(settings: Settings, cache_path: str, names_file: str) -> None:
    """`names_file`: the packages with a page after this build, one a line (write_names)."""
    global _worker_context
    cache = ManifestCache(Path(cache_path), readonly=True)
    registry_names = set(Path(names_file).read_text(encoding="utf-8").split("\n")) - {""}
    _worker_context = _WriterContext(settings, cache, registry_names, load_signer(settings))


PRESENT_NAMES_FILE = "present-names.txt"  # in the state folder, while a build's workers run


def write_names(folder: Path, names: Iterable[str]) -> Path:
    """Package names one a line (a name holds no line break) in `folder`, as the worker processes
    get them: written as they come from the state, never joined in the build's heap (at 100,000
    packages the joined blob and its parts were ~10 MB, held while workers ran). One fixed name:
    builds hold the build lock, and a build killed before removing it leaves one file, replaced next time."""
    path = folder / PRESENT_NAMES_FILE
    with open(path, "w", encoding="utf-8") as out:
        for name in names:
            out.write(name + "\n")
    return path


def _pooled_write(job: PackageJob) -> PackageOutcome:
    assert _worker_context is not None, "worker started without _init_writer"
    return write_package_job(_worker_context, job)


def write_package_job(context: _WriterContext, job: PackageJob) -> PackageOutcome:
    local = BuildResult()
    try:
        packument, files, tarballs, page_keys = _write_package(context, job, local)
    except RegistryError as exc:
        return PackageOutcome(job.name, None, local.written, local.removed, str(exc), new=not job.previous)
    summary = summarize(packument)
    record = {
        "digest": job.digest,
        "summary": summary,
        "files": files,
        "tarballs": tarballs,
        "links": site.linked_names(packument),
        "pages": page_keys,
    }
    fragments = (all_index_fragment(summary), search_fragment(summary, context.settings.base_url))
    return PackageOutcome(
        job.name, record, local.written, local.removed, fragments=fragments, new=not job.previous, releases=job.releases,
        listing=listing_of(context.settings, summary),
    )


def _write_packages(
    settings: Settings,
    cache: ManifestCache,
    registry_names: AbstractSet[str],
    jobs: Iterator[PackageJob],
    at_most: int,
    progress: ProgressCallback | None,
    signer: Signer | None = None,
) -> Iterator[PackageOutcome]:
    """Runs the jobs (at most `at_most` of them) in order, in worker processes when many."""
    workers = _worker_count()
    if at_most >= PARALLEL_PACKAGES and workers > 1:
        names_file = write_names(settings.state_folder, registry_names)
        try:
            with worker_pool(workers, _init_writer, (settings, str(cache.path), str(names_file))) as pool:
                for index, outcome in enumerate(ordered_map(pool, _pooled_write, jobs, window=workers * 4)):
                    if progress:
                        progress("write", index + 1, at_most)
                    yield outcome
        finally:
            names_file.unlink(missing_ok=True)
    else:
        context = _WriterContext(settings, cache, registry_names, signer)
        for index, job in enumerate(jobs):
            if progress:
                progress("write", index + 1, at_most)
            yield write_package_job(context, job)


def _remove_package(settings: Settings, name: str, previous: dict[str, Any], result: BuildResult) -> None:
    for relative in previous["files"]:
        if remove_tree(settings.out_dir, relative):
            result.removed.append(relative)
    remove_tree(settings.out_dir, package_dir(name))
    remove_tree(settings.out_dir, f"-/package/{package_dir(name)}")
    remove_tree(settings.out_dir, site.package_folder(name))


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


@dataclass
class _Run:
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
    # Each browse page written by this build -> what _write_browse_page returned for it: the
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
    run = _Run(settings, state, cache, progress, unwritten=state.unwritten_names())
    changes = _detect(run, changed, force_full)
    affected = _read(run, changes)
    del changes  # its meta and removed paths: read, not needed again
    if run.full:
        _write_everything(run)
    else:
        # A package whose write failed before is tried again, whatever changed (_take_outcome).
        affected |= run.unwritten
        plans = _plan(settings, state, affected)
        relinked = _relinked(state, plans)
        plans.update(_plan(settings, state, relinked - affected))
        del affected
        _write(run, plans, relinked)
    _write_indexes(run, defer_whole and not run.full)
    publish_keys(settings, state, run.signer, run.result.written)
    return _commit(run), run.dropped


def _write_indexes(run: _Run, defer_whole: bool) -> None:
    """Phase 5: the listing documents; -/all and -/search.json now, or marked for the refresher."""
    settings, state = run.settings, run.state
    if run.full:
        _write_fixed_files(settings, run.result)
    if state.listing_changes.front or run.full or state.get_setting(SHARDS_STALE):
        _write_listings(run)
    changed = bool(run.result.rebuilt or run.package_set_changed or run.full)
    if not (changed or state.get_setting(WHOLE_STALE)):
        return
    if defer_whole:
        state.set_setting(WHOLE_STALE, "1")
    else:
        _write_whole_documents(settings, state, run.result)


def _detect(run: _Run, changed: Iterable[str | Path] | None, force_full: bool) -> ContentChanges:
    """Phase 1: what differs between content/ and the state (all of it after a settings change)."""
    state, settings = run.state, run.settings
    run.fingerprint = fingerprint = settings_fingerprint(settings)
    if state.is_empty():
        state.import_times(read_legacy_times(settings.state_folder))
    elif not state.has_live():
        _seed_live(state)  # a tree built before versions were pinned: pin what it serves now
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


def _read(run: _Run, changes: ContentChanges) -> set[str]:
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
    for record, body in _read_changed(run.settings, changes.archives, run.progress):
        previous = state.archive(record.path)
        if record.error is not None:  # damaged: it keeps what it held, so a version published from it stays served
            record.name, record.version = _held_before(state, previous, record.path)
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
    _update_metas(run.settings, state, changes, run.errors, touched)
    return affected


def _held_before(state: BuildState, previous: ArchiveRecord | None, path: str) -> tuple[str | None, str | None]:
    """The name and version an archive held when it could last be read (none: it never could)."""
    if previous is not None:
        return previous.name, previous.version
    return state.forgotten_archive(path) or (None, None)


def _drop_tarball(run: _Run, shasum: str | None) -> None:
    if shasum and run.dropped is not None:
        run.dropped.add(shasum)


def _plan(settings: Settings, state: BuildState, names: Iterable[str]) -> dict[str, PackagePlan]:
    """Phase 3 (pure: reads the state, writes nothing): keep, remove or write, per package."""
    _, broken = _meta_problems(state)
    return {name: _plan_package(settings, state, name, name in broken) for name in sorted(names)}


def _plan_package(settings: Settings, state: BuildState, name: str, broken: bool) -> PackagePlan:
    previous = state.package(name)
    was_present = bool(previous and previous["present"])
    if broken:
        return PackagePlan(name, Action.KEEP, was_present, was_present)
    releases, refusals = _releases_of(state, name)
    try:
        meta = _meta_of(settings, state, name)
    except (InvalidManifest, OSError) as exc:
        error = f"cannot read its registry-meta.json again: {exc}"
        return PackagePlan(name, Action.KEEP, was_present, was_present, tuple(refusals), error)
    if not releases and not (meta and is_open_entry(meta)):
        return PackagePlan(name, Action.REMOVE, False, was_present, tuple(refusals))
    return PackagePlan(name, Action.WRITE, bool(releases), was_present, tuple(refusals))


def _relinked(state: BuildState, plans: Mapping[str, PackagePlan]) -> set[str]:
    """Package pages link dependencies only to packages in the registry, so a page whose linked
    names gained or lost a package is rendered again."""
    appeared_or_gone = {p.name for p in plans.values() if p.present != p.was_present}
    return state.linking_to(appeared_or_gone) if appeared_or_gone else set()


def _write(run: _Run, plans: dict[str, PackagePlan], relinked: set[str]) -> None:
    """Phase 4: records what the plan found, removes what went, writes what changed."""
    settings, state = run.settings, run.state
    _record_plans(run, plans.values())
    _refuse_mass_removal(settings, state, _going(settings, state, plans.values()))
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
    for outcome in _write_packages(settings, run.cache, registry_names, jobs, len(to_write), run.progress, run.signer):
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


def _record_plans(run: _Run, plans: Iterable[PackagePlan]) -> None:
    """What the plans found wrong: the archives each package refused, the meta files unread."""
    for plan in plans:
        if plan.refusals is not None:
            run.state.set_issues(plan.name, list(plan.refusals))
        if plan.error is not None:
            run.errors.append(BuildIssue(plan.name, plan.error, plan.name))


def _write_everything(run: _Run) -> None:
    """Phases 3 and 4 of a full build, which writes every package: from cursors over the state, a
    batch at a time. What it needs per package (the plans, who will link to whom) waits in
    temporary tables of the state, so its memory does not grow with the registry's size."""
    settings, state = run.settings, run.state
    state.start_full_build()
    _refuse_mass_removal(settings, state, _plan_everything(run))
    recheck: set[str] = set()  # whose Dependents list may differ from the one rendered (few)
    for name in state.planned(Action.REMOVE.value):
        recheck.update(_remove(run, name))  # what it linked to: rendered after this without it
    plans = PlanTable(state)
    recheck = {n for n in recheck if _planned_unwritten(plans, n)}
    for name in state.planned(Action.WRITE.value):
        state.put_predicted_links(name, _predicted_links(run, name))
    registry_names = PresentNames(state, plans, full=True)
    times_found: tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]] = ({}, {})
    links_to = functools.partial(state.linking_after_full_build, action=Action.WRITE.value)
    jobs = _jobs(run, state.planned(Action.WRITE.value), set(), times_found, registry_names, links_to)
    written = state.planned_count(Action.WRITE.value)
    for outcome in _write_packages(settings, run.cache, registry_names, jobs, written, run.progress, run.signer):
        before = set((state.package(outcome.name) or {}).get("links", ()))
        _take_outcome(run, outcome, plans[outcome.name].present)
        after = set(outcome.record["links"]) if outcome.record is not None else before
        # Rendered from the predicted links: a package whose links came out otherwise (or whose
        # write failed) changed its targets' lists after they were rendered. A package not
        # written here (its meta files in conflict, or unreadable) has its page rendered again when its list changed.
        recheck.update(state.predicted_links_of(outcome.name) ^ after)
        recheck.update(n for n in before ^ after if _planned_unwritten(plans, n))
        if outcome.record is None:
            recheck.add(outcome.name)
        _store_times(state, outcome.name, times_found[0].pop(outcome.name, {}), times_found[1].pop(outcome.name, {}))
    _refresh_dependents(run, {n for n in recheck if n in registry_names}, registry_names)


def _planned_unwritten(plans: Mapping[str, PackagePlan], name: str) -> bool:
    """A package this full build plans but does not write (kept or removed): one lookup of its plan."""
    plan = plans.get(name)
    return plan is not None and plan.action is not Action.WRITE


def _plan_everything(run: _Run) -> int:
    """Phase 3 of a full build: every package the state knows, planned into its plan table a batch
    at a time, with what the plans found recorded; returns how many present packages would go."""
    settings, state = run.settings, run.state
    _, broken = _meta_problems(state)
    going = 0
    names = state.every_package_name()
    while batch := list(itertools.islice(names, PLAN_BATCH)):
        plans = [_plan_package(settings, state, name, name in broken) for name in batch]
        _record_plans(run, plans)
        going += _going(settings, state, plans)
        state.put_plans((p.name, p.action.value, p.present, p.was_present) for p in plans)
    return going


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


def _store_times(state: BuildState, name: str, stamps: dict[str, str], kept: dict[str, str]) -> None:
    """First-seen times into the state (durably: nothing else records them), and the ones a
    registry-meta.json already keeps (not durably)."""
    if stamps:
        state.put_times(name, {v: t for v, t in stamps.items() if v not in kept})
        state.put_times(name, kept, durable=False)


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


def _remove(run: _Run, name: str) -> list[str]:
    """Takes a package out of the tree; returns the names it linked to (their Dependents change)."""
    previous = run.state.package(name)
    if previous:
        _remove_package(run.settings, name, previous, run.result)
        run.state.delete_package(name)
        run.package_set_changed = True
    run.state.delete_times(name)
    run.record_write(name, None)  # a package that never got written, gone before it was
    return list(previous.get("links", [])) if previous else []


def _incoming_links(run: _Run, names: list[str]) -> dict[str, list[str]]:
    """For each package, which of `names` will link to it: from each one's latest manifest, the
    names site.linked_names reads from its document. Lets a build that writes many packages (a
    full one: all of them) render each page once with its final Dependents list, not once with
    the last build's list and again after."""
    incoming: dict[str, list[str]] = defaultdict(list)  # a list of a few names: a quarter of a set's size
    for name in names:
        for target in _predicted_links(run, name):
            incoming[target].append(name)  # linked_names has each target once
    return incoming


def _predicted_links(run: _Run, name: str) -> list[str]:
    """The names the page of `name` will link to once written, from its latest manifest."""
    releases, _ = _releases_of(run.state, name)
    meta = _meta_of(run.settings, run.state, name)
    tags = choose_dist_tags(releases, (meta or PackageMeta(name=name)).dist_tags)
    if not tags:
        return []
    try:
        manifest = _load_cached(run.cache, releases[tags["latest"]], run.settings)["manifest"]
    except RegistryError:
        return []  # its write reports the problem; a missed link only costs a second render
    return list(site.linked_names({"dist-tags": {"latest": "x"}, "versions": {"x": manifest}}))


def _jobs(
    run: _Run,
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
        releases, _ = _releases_of(state, name)
        meta = _meta_of(settings, state, name)
        times, fresh = _resolve_times(releases, meta, state.times_of(name))
        if fresh:
            fresh_times[name] = fresh
            if meta is not None:
                kept = {v: t for v, t in fresh.items() if meta.time.get(v) == t}
                if kept:
                    meta_times[name] = kept
        digest = _package_digest(name, releases, times, meta)
        if previous and previous["digest"] == digest and not run.full and name not in relinked:
            continue
        dependents = tuple(sorted(n for n in links_to(name) if n in registry_names))
        if not run.full:  # a full build knows which lists may be stale without them (_write_everything)
            run.rendered_dependents[name] = dependents
        yield PackageJob(name, releases, times, meta or PackageMeta(name=name), previous or {}, digest, dependents)


def _in_sorted(items: list[str], item: str) -> bool:
    index = bisect.bisect_left(items, item)
    return index < len(items) and items[index] == item


def _take_outcome(run: _Run, outcome: PackageOutcome, present: bool) -> None:
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


def _commit(run: _Run) -> BuildResult:
    """Phase 6: totals and issues into the result, the settings fingerprint into the state."""
    state, result = run.state, run.result
    meta_issues, _ = _meta_problems(state)
    result.packages, result.versions = state.totals()
    result.skipped = result.packages - result.rebuilt
    archive_issues = [BuildIssue(p, r) for p, r in state.archive_errors()]
    archive_issues += [BuildIssue(p, r, n) for n, p, r in state.all_issues()]
    result.refused = len({issue.path for issue in archive_issues})
    result.errors = meta_issues + sorted(archive_issues, key=lambda i: i.path) + run.errors
    # The fingerprint the build started from: a template edited meanwhile makes the next build redo it.
    state.set_setting("fingerprint", run.fingerprint)
    return result
