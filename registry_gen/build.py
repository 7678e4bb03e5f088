"""The orchestrator: scans content/, reads what changed, writes the tree. All I/O lives here.

Order of writes: tarballs, package documents, indexes and HTML, and the state file last, so a
build that dies half-way is simply redone by the next one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from registry_gen import __version__, site
from registry_gen.archive import read_archive
from registry_gen.errors import InvalidArchive, InvalidManifest, LockTimeout, RegistryError
from registry_gen.manifest import validate_manifest
from registry_gen.meta import META_FILENAME, PackageMeta, parse_meta
from registry_gen.names import package_dir, tarball_path
from registry_gen.packument import (
    Release,
    abbreviate,
    all_index,
    build_packument,
    dumps,
    search_document,
    search_object,
    summarize,
)
from registry_gen.settings import Limits, Settings
from registry_gen.versions import choose_dist_tags
from registry_gen.writer import atomic_copy, atomic_write_bytes, gzip_bytes, remove_tree, write_if_changed

log = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".zip")
STATE_FORMAT = 2
PARALLEL_THRESHOLD = 32
PACKUMENT_FILE = "index.html"  # served for /<name> by index-file lookup; see RATIONALE.md
ABBREVIATED_FILE = "abbreviated.json"
ProgressCallback = Callable[[str, int, int], None]


@dataclass
class ArchiveRecord:
    """What the state file remembers about one archive, so an unchanged one is never reopened."""

    path: str
    size: int
    mtime_ns: int
    name: str | None = None
    version: str | None = None
    shasum: str | None = None
    integrity: str | None = None
    tarball_size: int = 0
    file_count: int = 0
    unpacked_size: int = 0
    converted: bool = False
    error: str | None = None


@dataclass(frozen=True)
class BuildIssue:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class BuildResult:
    packages: int = 0
    versions: int = 0
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: int = 0
    rebuilt_packages: list[str] = field(default_factory=list)
    archives_read: int = 0
    errors: list[BuildIssue] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{self.packages} packages, {self.versions} versions, {len(self.written)} files written, "
            f"{self.skipped} packages unchanged, {len(self.errors)} errors, {self.seconds:.2f}s"
        )


# ---------------------------------------------------------------- scanning and reading


def _is_candidate(name: str) -> bool:
    return not name.startswith(".") and not name.endswith(("~", ".tmp", ".part", ".crdownload", ".partial"))


def scan_content(content_dir: Path) -> tuple[dict[str, os.stat_result], dict[str, os.stat_result]]:
    """Every archive and every registry-meta.json below content_dir (hidden and temp files skipped)."""
    archives: dict[str, os.stat_result] = {}
    metas: dict[str, os.stat_result] = {}
    if not content_dir.is_dir():
        return archives, metas
    stack = [content_dir]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if not _is_candidate(entry.name):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    relative = Path(entry.path).relative_to(content_dir).as_posix()
                    lowered = entry.name.lower()
                    if lowered.endswith(ARCHIVE_SUFFIXES):
                        archives[relative] = entry.stat(follow_symlinks=False)
                    elif entry.name == META_FILENAME:
                        metas[relative] = entry.stat(follow_symlinks=False)
    return archives, metas


def _cache_dir(out_dir: Path) -> Path:
    return out_dir / ".registry-gen"


def _manifest_cache(out_dir: Path, shasum: str) -> Path:
    return _cache_dir(out_dir) / "manifests" / shasum[:2] / f"{shasum}.json"


def _converted_cache(out_dir: Path, shasum: str) -> Path:
    return _cache_dir(out_dir) / "converted" / shasum[:2] / f"{shasum}.tgz"


def inspect_archive(content_dir: Path, out_dir: Path, relative: str, limits: Limits) -> ArchiveRecord:
    """Reads one archive (in a worker process for big builds) and caches what packuments need."""
    path = content_dir / relative
    stat = path.stat()
    record = ArchiveRecord(relative, stat.st_size, stat.st_mtime_ns)
    try:
        with open(path, "rb") as handle:
            contents = read_archive(handle, limits)
        manifest = validate_manifest(contents.manifest)
    except InvalidManifest as exc:
        record.error = "invalid package.json: " + "; ".join(str(p) for p in exc.problems)
        return record
    except InvalidArchive as exc:
        record.error = str(exc)
        return record
    except OSError as exc:
        record.error = f"cannot read: {exc.strerror or exc}"
        return record
    digests = contents.digests
    record.name = manifest["name"]
    record.version = manifest["version"]
    record.shasum = digests.shasum
    record.integrity = digests.integrity
    record.tarball_size = digests.size
    record.file_count = contents.file_count
    record.unpacked_size = contents.unpacked_size
    record.converted = contents.converted is not None
    cached = {"manifest": manifest, "readme": contents.readme, "readmeFilename": contents.readme_filename}
    atomic_write_bytes(_manifest_cache(out_dir, digests.shasum), dumps(cached))
    if contents.converted is not None:
        atomic_write_bytes(_converted_cache(out_dir, digests.shasum), contents.converted)
    return record


def _inspect_job(args: tuple[str, str, str, Limits]) -> ArchiveRecord:
    content_dir, out_dir, relative, limits = args
    return inspect_archive(Path(content_dir), Path(out_dir), relative, limits)


def _read_changed(
    settings: Settings, relatives: list[str], progress: ProgressCallback | None
) -> list[ArchiveRecord]:
    jobs = [(str(settings.content_dir), str(settings.out_dir), r, settings.limits) for r in sorted(relatives)]
    records: list[ArchiveRecord] = []
    workers = min(os.cpu_count() or 1, 8)
    if len(jobs) >= PARALLEL_THRESHOLD and workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for record in pool.map(_inspect_job, jobs, chunksize=8):
                records.append(record)
                if progress:
                    progress("read", len(records), len(jobs))
    else:
        for job in jobs:
            records.append(_inspect_job(job))
            if progress:
                progress("read", len(records), len(jobs))
    return records


# ---------------------------------------------------------------- state


@dataclass
class BuildState:
    fingerprint: str = ""
    archives: dict[str, ArchiveRecord] = field(default_factory=dict)
    metas: dict[str, list[Any]] = field(default_factory=dict)  # path -> [size, mtime_ns, name|None, error|None]
    times: dict[str, dict[str, str]] = field(default_factory=dict)  # first-seen time per name@version
    packages: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {digest, summary, files}

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": STATE_FORMAT,
                "fingerprint": self.fingerprint,
                "archives": {k: asdict(v) for k, v in sorted(self.archives.items())},
                "metas": dict(sorted(self.metas.items())),
                "times": {k: dict(sorted(v.items())) for k, v in sorted(self.times.items())},
                "packages": dict(sorted(self.packages.items())),
            },
            separators=(",", ":"),
        ).encode("utf-8")


def load_state(path: Path) -> BuildState:
    try:
        data = json.loads(path.read_bytes())
        if data.get("format") != STATE_FORMAT:
            return BuildState()
        return BuildState(
            fingerprint=data["fingerprint"],
            archives={k: ArchiveRecord(**v) for k, v in data["archives"].items()},
            metas=data["metas"],
            times=data["times"],
            packages=data["packages"],
        )
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return BuildState()


def settings_fingerprint(settings: Settings) -> str:
    """Anything that changes every output file forces a full rebuild when it changes."""
    parts = [__version__, settings.base_url, settings.site_title, str(settings.gzip), site.template_fingerprint(settings)]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


# ---------------------------------------------------------------- the build


def iso_from_ns(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{(ns // 1_000_000) % 1000:03d}Z"


def _load_cached(out_dir: Path, record: ArchiveRecord, settings: Settings) -> dict[str, Any]:
    cache = _manifest_cache(out_dir, record.shasum or "")
    try:
        return json.loads(cache.read_bytes())
    except (FileNotFoundError, ValueError):
        # The cache went missing (a cleaned tree): read this one archive again.
        fresh = inspect_archive(settings.content_dir, out_dir, record.path, settings.limits)
        if fresh.error or fresh.shasum != record.shasum:
            raise RegistryError(f"{record.path}: changed while building, retry") from None
        return json.loads(cache.read_bytes())


def _read_metas(
    settings: Settings, found: dict[str, os.stat_result], state: BuildState, result: BuildResult
) -> tuple[dict[str, PackageMeta], set[str], dict[str, list[Any]]]:
    metas: dict[str, PackageMeta] = {}
    broken: set[str] = set()
    records: dict[str, list[Any]] = {}
    for relative, stat in sorted(found.items()):
        try:
            meta = parse_meta((settings.content_dir / relative).read_bytes())
        except InvalidManifest as exc:
            result.errors.append(BuildIssue(relative, "invalid registry-meta.json: " + "; ".join(map(str, exc.problems))))
            previous = state.metas.get(relative)
            if previous and previous[2]:
                broken.add(previous[2])
            records[relative] = [stat.st_size, stat.st_mtime_ns, previous[2] if previous else None, "invalid"]
            continue
        except OSError as exc:
            result.errors.append(BuildIssue(relative, f"cannot read: {exc}"))
            continue
        if meta.name in metas:
            result.errors.append(BuildIssue(relative, f"a second registry-meta.json for {meta.name}"))
            broken.add(meta.name)
            continue
        metas[meta.name] = meta
        records[relative] = [stat.st_size, stat.st_mtime_ns, meta.name, None]
    return metas, broken, records


def _group_releases(
    records: Iterable[ArchiveRecord], result: BuildResult
) -> dict[str, dict[str, ArchiveRecord]]:
    """name -> version -> record, refusing a name@version that comes with two different tarballs."""
    grouped: dict[str, dict[str, list[ArchiveRecord]]] = defaultdict(lambda: defaultdict(list))
    for record in sorted(records, key=lambda r: r.path):
        if record.error:
            result.errors.append(BuildIssue(record.path, record.error))
        elif record.name and record.version:
            grouped[record.name][record.version].append(record)
    chosen: dict[str, dict[str, ArchiveRecord]] = {}
    for name, versions in grouped.items():
        for version, candidates in versions.items():
            if len({c.shasum for c in candidates}) > 1:
                paths = ", ".join(c.path for c in candidates)
                for c in candidates:
                    result.errors.append(
                        BuildIssue(c.path, f"{name}@{version} comes from archives with different bytes: {paths}")
                    )
                continue
            chosen.setdefault(name, {})[version] = candidates[0]
    return chosen


def _package_digest(name: str, releases: dict[str, ArchiveRecord], times: dict[str, str], meta: PackageMeta | None) -> str:
    parts = [
        [v, r.shasum, r.path, times[v], r.file_count, r.unpacked_size] for v, r in sorted(releases.items())
    ]
    body = json.dumps([name, parts, meta.to_json() if meta else None], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _write_json_pair(out_dir: Path, relative: str, data: bytes, settings: Settings, written: list[str]) -> None:
    if write_if_changed(out_dir / relative, data):
        written.append(relative)
    if settings.gzip and write_if_changed(out_dir / (relative + ".gz"), gzip_bytes(data)):
        written.append(relative + ".gz")


def _write_package(
    settings: Settings,
    name: str,
    releases: dict[str, ArchiveRecord],
    times: dict[str, str],
    meta: PackageMeta,
    previous: dict[str, Any],
    result: BuildResult,
) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    out = settings.out_dir
    previous_files: list[str] = previous.get("files", [])
    previous_tarballs: dict[str, str] = previous.get("tarballs", {})
    files: list[str] = []
    tarballs: dict[str, str] = {}
    built: list[Release] = []
    cached_by_version: dict[str, dict[str, Any]] = {}
    for version, record in releases.items():
        cached = _load_cached(out, record, settings)
        cached_by_version[version] = cached
        built.append(
            Release(
                version=version,
                manifest=cached["manifest"],
                shasum=record.shasum or "",
                integrity=record.integrity or "",
                size=record.tarball_size,
                file_count=record.file_count,
                unpacked_size=record.unpacked_size,
                time=times[version],
            )
        )
        # Tarballs first: a packument must never point at a file that is not there yet.
        relative = tarball_path(name, version)
        files.append(relative)
        tarballs[relative] = record.shasum or ""
        target = out / relative
        unchanged = previous_tarballs.get(relative) == record.shasum
        if not (unchanged and target.exists() and target.stat().st_size == record.tarball_size):
            source = _converted_cache(out, record.shasum or "") if record.converted else settings.content_dir / record.path
            atomic_copy(source, target)
            result.written.append(relative)
    latest = cached_by_version[choose_dist_tags(releases, meta.dist_tags)["latest"]]
    packument = build_packument(
        name,
        built,
        meta,
        base_url=settings.base_url,
        readme=latest.get("readme"),
        readme_filename=latest.get("readmeFilename"),
    )
    base = package_dir(name)
    for relative, data in (
        (f"{base}/{PACKUMENT_FILE}", dumps(packument)),
        (f"{base}/{ABBREVIATED_FILE}", dumps(abbreviate(packument))),
        (f"-/package/{base}/dist-tags", dumps(packument["dist-tags"])),
    ):
        _write_json_pair(out, relative, data, settings, result.written)
        files.append(relative)
        if settings.gzip:
            files.append(relative + ".gz")
    for relative, data in site.package_pages(packument, settings).items():
        if write_if_changed(out / relative, data):
            result.written.append(relative)
        files.append(relative)
    for stale in sorted(set(previous_files) - set(files)):
        if remove_tree(out, stale):
            result.removed.append(stale)
    return packument, files, tarballs


def _write_indexes(settings: Settings, summaries: dict[str, dict[str, Any]], result: BuildResult) -> None:
    out = settings.out_dir
    ordered = [summaries[n] for n in sorted(summaries)]
    stamp = max((s["modified"] for s in ordered if s["modified"]), default="1970-01-01T00:00:00.000Z")
    _write_json_pair(out, "-/all/index.html", dumps({"_updated": stamp, **all_index(ordered)}), settings, result.written)
    objects = [search_object(s, settings.base_url) for s in ordered]
    _write_json_pair(out, "-/v1/search/index.html", dumps(search_document(objects, stamp)), settings, result.written)
    if write_if_changed(out / "-/ping", b"{}"):
        result.written.append("-/ping")
    for relative, data in site.index_pages(ordered, settings).items():
        if write_if_changed(out / relative, data):
            result.written.append(relative)


def _resolve_times(
    name: str, releases: dict[str, ArchiveRecord], meta: PackageMeta | None, state: BuildState
) -> dict[str, str]:
    """Publish time per version: the meta file's, else first seen (kept in state), else the file's mtime."""
    known = state.times.setdefault(name, {})
    times = {}
    for version, record in releases.items():
        if meta and version in meta.time:
            stamp = meta.time[version]
        else:
            stamp = known.get(version) or iso_from_ns(record.mtime_ns)
        known[version] = stamp
        times[version] = stamp
    return times


def run_build(settings: Settings, *, progress: ProgressCallback | None = None, lock_timeout: float = 600) -> BuildResult:
    """Brings settings.out_dir up to date with settings.content_dir, under the shared build lock."""
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(settings.lock_file))
    try:
        with lock.acquire(timeout=lock_timeout):
            return _build_locked(settings, progress)
    except Timeout as exc:
        raise LockTimeout(f"another build holds {settings.lock_file}") from exc


def build_lock(settings: Settings) -> FileLock:
    """The lock every writer of the tree and of content/ shares (CLI build, watch mode, the API)."""
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    return FileLock(str(settings.lock_file))


def _build_locked(settings: Settings, progress: ProgressCallback | None) -> BuildResult:
    started = time.perf_counter()
    result = BuildResult()
    state = load_state(settings.state_file)
    fingerprint = settings_fingerprint(settings)
    full = state.fingerprint != fingerprint
    if full:
        state.archives = {}  # a new generator or new settings: read every archive again
    found_archives, found_metas = scan_content(settings.content_dir)

    # Stat-based change detection: an archive whose size and mtime match the state is not reopened.
    records: dict[str, ArchiveRecord] = {}
    changed: list[str] = []
    for relative, stat in found_archives.items():
        previous = state.archives.get(relative)
        if previous and previous.size == stat.st_size and previous.mtime_ns == stat.st_mtime_ns:
            records[relative] = previous
        else:
            changed.append(relative)
    for record in _read_changed(settings, changed, progress):
        records[record.path] = record
    result.archives_read = len(changed)

    metas, broken_metas, meta_records = _read_metas(settings, found_metas, state, result)
    releases = _group_releases(records.values(), result)
    names = set(releases) | set(state.packages)
    new_packages: dict[str, dict[str, Any]] = {}
    for index, name in enumerate(sorted(names)):
        if progress:
            progress("write", index + 1, len(names))
        previous = state.packages.get(name)
        if name in broken_metas:
            if previous:
                new_packages[name] = previous  # keep the last good tree for it
            continue
        versions = releases.get(name, {})
        if not versions:
            if previous:
                for relative in previous["files"]:
                    if remove_tree(settings.out_dir, relative):
                        result.removed.append(relative)
                remove_tree(settings.out_dir, package_dir(name))
                remove_tree(settings.out_dir, f"-/package/{package_dir(name)}")
                remove_tree(settings.out_dir, site.package_folder(name))
            continue
        meta = metas.get(name) or PackageMeta(name=name)
        times = _resolve_times(name, versions, metas.get(name), state)
        digest = _package_digest(name, versions, times, metas.get(name))
        if previous and previous["digest"] == digest and not full:
            new_packages[name] = previous
            result.skipped += 1
            continue
        try:
            packument, files, tarballs = _write_package(settings, name, versions, times, meta, previous or {}, result)
        except RegistryError as exc:
            result.errors.append(BuildIssue(name, str(exc)))
            if previous:
                new_packages[name] = previous
            continue
        result.rebuilt_packages.append(name)
        new_packages[name] = {"digest": digest, "summary": summarize(packument), "files": files, "tarballs": tarballs}

    if result.rebuilt_packages or set(new_packages) != set(state.packages) or full:
        _write_indexes(settings, {n: p["summary"] for n, p in new_packages.items()}, result)

    result.packages = len(new_packages)
    result.versions = sum(p["summary"]["versions"] for p in new_packages.values())
    new_state = BuildState(
        fingerprint=fingerprint,
        archives=records,
        metas=meta_records,
        times={n: t for n, t in state.times.items() if n in names},
        packages=new_packages,
    )
    atomic_write_bytes(settings.state_file, new_state.to_json())
    result.seconds = time.perf_counter() - started
    return result
