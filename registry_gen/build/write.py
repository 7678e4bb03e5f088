"""Phase 4, the worker side: one package's files (tarballs, documents, pages), in worker processes
for big builds. What to write comes in a PackageJob; what was written goes back as a PackageOutcome."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry_gen import site, site_search
from registry_gen.build.context import ProgressCallback
from registry_gen.build.read import converted_cache, load_cached, ordered_map, version_extras, worker_count
from registry_gen.build.results import FileChanges
from registry_gen.downloads import no_downloads
from registry_gen.errors import RegistryError
from registry_gen.hosting import tag_documents
from registry_gen.keyring import load_signer
from registry_gen.layout import ABBREVIATED_DOCUMENT, PACKAGE_DOCUMENT
from registry_gen.meta import PackageMeta
from registry_gen.names import package_dir, tarball_path
from registry_gen.packument import (
    Release,
    abbreviate,
    all_index_fragment,
    build_packument,
    dumps,
    search_fragment,
    summarize,
)
from registry_gen.settings import Settings
from registry_gen.signing import Signer
from registry_gen.state.records import ArchiveRecord, ListingPlace
from registry_gen.state import Manifests, open_state
from registry_gen.versions import choose_dist_tags
from registry_gen.workers import worker_pool
from registry_gen.writer import atomic_copy, atomic_write_bytes, gzip_bytes, remove_tree, write_if_changed


PARALLEL_PACKAGES = 16  # packages to write from which writing goes to worker processes
PACKUMENT_FILE = PACKAGE_DOCUMENT  # served for /<name> by index-file lookup (registry_gen.layout)
ABBREVIATED_FILE = ABBREVIATED_DOCUMENT


def _tarball_source(settings: Settings, name: str, version: str, record: ArchiveRecord) -> Path:
    if not record.path:
        raise RegistryError(
            f"{name}@{version}: its published tarball is gone from {settings.out_dir} and content/ no longer "
            "holds its bytes; put the original archive back into content/"
        )
    return converted_cache(settings.state_folder, record.shasum or "") if record.converted else settings.content_dir / record.path


def _holds(target: Path, record: ArchiveRecord) -> bool:
    """Whether the tree's copy at `target` holds the published bytes of `record` (a version content/
    no longer holds, after the cache that remembered writing it was dropped): checked by sha1."""
    try:
        with open(target, "rb") as handle:
            return hashlib.file_digest(handle, "sha1").hexdigest() == record.shasum
    except OSError:
        return False


DOCUMENT_GZIP_LEVEL = 6  # level 9 took a third more time for 0.2 % smaller documents (bench/PROFILE.md)
# A document shorter than this gets no `.gz` sibling. Under about one TCP segment (~1,400 bytes of
# payload in a 1,500-byte MTU) the whole answer fits the first segment compressed or not, so a
# sibling saves the client no round trip; nginx's `gzip on` still compresses such a document on the
# fly, and a bucket never had siblings. Each sibling is a file to create, and creating files is the
# full build's largest cost (bench/PROFILE.md, buildcpu and gzsmall): this drops ~1,641 of 14,314.
# It also covers the shortest documents gzip could never shrink (a gzip member is at least 21 bytes).
GZIP_SIBLING_FROM = 1400


@dataclass(frozen=True)
class DocumentFile:
    """One package document as the tree holds it: its path, its bytes, and its gzip sibling's
    bytes where that is smaller than the document (None: no sibling)."""

    relative: str
    data: bytes
    packed: bytes | None


def package_documents(packument: Mapping[str, Any], *, gzip: bool) -> list[DocumentFile]:
    """The package's documents, pure: the full and abbreviated ones, the dist-tags, one per tag
    (GET /<name>/<tag>), each with its gzip sibling when `gzip` and the rule of gzip_sibling
    gives one. A document without one is sent plain by `serve`, compressed on the fly by nginx."""
    base = package_dir(packument["name"])
    documents = [
        (f"{base}/{PACKUMENT_FILE}", dumps(packument)),
        (f"{base}/{ABBREVIATED_FILE}", dumps(abbreviate(packument))),
        (f"-/package/{base}/dist-tags", dumps(packument["dist-tags"])),
        *((f"{base}/{tag}/{PACKUMENT_FILE}", dumps(doc)) for tag, doc in tag_documents(packument).items()),
    ]
    return [DocumentFile(relative, data, gzip_sibling(data) if gzip else None) for relative, data in documents]


def gzip_sibling(data: bytes) -> bytes | None:
    """A document's gzip sibling, or None where the document is under GZIP_SIBLING_FROM bytes or
    the sibling would not be smaller than it."""
    if len(data) < GZIP_SIBLING_FROM:
        return None
    packed = gzip_bytes(data, DOCUMENT_GZIP_LEVEL)
    return packed if len(packed) < len(data) else None


def _write_document(out_dir: Path, document: DocumentFile, written: list[str]) -> list[str]:
    """Writes a document and its gzip sibling, if it has one; returns the files it owns (a stale
    sibling goes with the package's other files that are no longer its own)."""
    if write_if_changed(out_dir / document.relative, document.data):
        written.append(document.relative)
    if document.packed is None:
        return [document.relative]
    sibling = document.relative + ".gz"
    if write_if_changed(out_dir / sibling, document.packed):
        written.append(sibling)
    return [document.relative, sibling]


def _write_package(
    context: _WriterContext, job: PackageJob, result: FileChanges
) -> tuple[dict[str, Any], list[str], dict[str, str], dict[str, str]]:
    """One package's files: tarballs first (a document must never point at a missing file), then
    its documents and pages; files it had before and has no more go. Returns the package
    document, its files, its tarballs (path -> sha1) and each version page's input key."""
    settings = context.settings
    built, tarballs = _write_tarballs(context, job, result)
    tags = choose_dist_tags(job.releases, job.meta.dist_tags)
    extras = _extras_loader(context, job)
    latest = extras(tags["latest"]) if tags else site.VersionExtras()
    packument = build_packument(
        job.name, built, job.meta, base_url=settings.base_url,
        readme=latest.readme, readme_filename=latest.readme_filename, signer=context.signer,
    )
    files = [*tarballs, *_write_documents(settings, packument, result)]
    page_keys: dict[str, str] = {}
    if job.releases:
        site_files, page_keys = _write_site(context, job, packument, result, extras)
        files.extend(site_files)
    for stale in sorted(set(job.previous.get("files", [])) - set(files)):
        # Named whatever this folder held: the state recorded it written, maybe by another
        # instance, whose file the tree bucket holds though this work folder never did.
        remove_tree(settings.out_dir, stale)
        result.removed.append(stale)
    return packument, files, tarballs, page_keys


def _write_tarballs(context: _WriterContext, job: PackageJob, result: FileChanges) -> tuple[list[Release], dict[str, str]]:
    """Copies each version's tarball unless the tree already has those bytes; the releases for the document."""
    settings = context.settings
    previous_tarballs: dict[str, str] = job.previous.get("tarballs", {})
    tarballs: dict[str, str] = {}
    built: list[Release] = []
    known = context.cache.manifests_of(record.shasum for record in job.releases.values() if record.shasum)  # one query, not one a version
    for version, record in job.releases.items():
        cached = load_cached(context.cache, record, settings, known=known)
        built.append(Release(
            version=version, manifest=cached["manifest"], shasum=record.shasum or "", integrity=record.integrity or "",
            size=record.tarball_size, file_count=record.file_count, unpacked_size=record.unpacked_size,
            time=job.times[version],
        ))
        relative = tarball_path(job.name, version)
        tarballs[relative] = record.shasum or ""
        target = settings.out_dir / relative
        unchanged = previous_tarballs.get(relative) == record.shasum or (not record.path and _holds(target, record))
        if not (unchanged and target.exists() and target.stat().st_size == record.tarball_size):
            atomic_copy(_tarball_source(settings, job.name, version, record), target)
            result.written.append(relative)
    return built, tarballs


def _write_documents(settings: Settings, packument: dict[str, Any], result: FileChanges) -> list[str]:
    """The package's documents (package_documents) into the tree; returns the files they own."""
    files = []
    for document in package_documents(packument, gzip=settings.gzip):
        files.extend(_write_document(settings.out_dir, document, result.written))
    return files


def _extras_loader(context: _WriterContext, job: PackageJob) -> Callable[[str], site.VersionExtras]:
    """A version's README and file list from the manifest cache. The latest version's are asked
    twice in a row, for the document's README and then for the package page: read once."""

    @functools.lru_cache(maxsize=1)
    def load(version: str) -> site.VersionExtras:
        return version_extras(context.cache, job.releases[version], context.settings)

    return load


def _write_site(
    context: _WriterContext, job: PackageJob, packument: dict[str, Any], result: FileChanges,
    extras: Callable[[str], site.VersionExtras],
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
        extras=extras,
        previous_keys=on_disk,
    )
    for relative, data in rendered.pages.items():
        if write_if_changed(settings.out_dir / relative, data):
            result.written.append(relative)
    _leave_downloads_file(settings, name)
    return [*rendered.pages, *rendered.kept], rendered.keys


def _leave_downloads_file(settings: Settings, name: str) -> None:
    """The page reads its download counts from a file beside it that `registry-gen stats` writes
    (registry_gen.stats); until it does, one saying nothing is known, so the page's request never
    fails. Not one of the package's files: the build never rewrites or removes it (the package's
    folder goes with the package)."""
    path = settings.out_dir / site.package_folder(name) / site.DOWNLOADS_FILE
    if not path.exists():
        atomic_write_bytes(path, json.dumps(no_downloads(name), separators=(",", ":")).encode("utf-8"))


def listing_of(settings: Settings, summary: Mapping[str, Any]) -> ListingPlace:
    """Where a package shows in the listing documents: only packages with versions that anyone
    may read are listed (registry_gen.access); the API's search text covers every package."""
    name = str(summary["name"])
    people = [str(m.get("name", "")) for m in summary.get("maintainers", []) if isinstance(m, Mapping)]
    keywords = [str(k).lower() for k in summary.get("keywords") or [] if isinstance(k, str)]
    text = " ".join([name, str(summary.get("description") or ""), *keywords, *people]).lower()
    listed = bool(summary["versions"]) and settings.packages.is_public(name)
    return ListingPlace(
        listed, str(summary.get("modified") or ""), site.name_key(name), text, tuple(site_search.search_keys(summary)), site.search_entry(summary)
    )


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
    # Every file reported as written, changed or not: a write resolved as landed whose tree upload
    # may never have happened (detect.landed_packages) is uploaded whole, even from a work folder
    # that already holds what its render writes.
    republish: bool = False


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
    cache: Manifests
    registry_names: AbstractSet[str]
    signer: Signer | None = None


_worker_context: _WriterContext | None = None  # set once per worker process by _init_writer


def _init_writer(settings: Settings, names_file: str) -> None:
    """`names_file`: the packages with a page after this build, one a line (write_names)."""
    global _worker_context
    cache = open_state(settings).manifests(readonly=True)
    registry_names = set(Path(names_file).read_text(encoding="utf-8").split("\n")) - {""}
    _worker_context = _WriterContext(settings, cache, registry_names, load_signer(settings))


PRESENT_NAMES_FILE = "present-names.txt"  # in the state folder, while a build's workers run


def write_names(folder: Path, names: Iterable[str]) -> Path:
    """Package names one a line (a name holds no line break) in `folder`, as the worker processes
    get them: written as they come from the state, never joined in the build's heap (at 100,000
    packages the joined blob and its parts were ~10 MB, held while workers ran). One fixed name:
    builds hold the build lock, and a build killed before removing it leaves one file, replaced next time."""
    folder.mkdir(parents=True, exist_ok=True)  # on PostgreSQL nothing else creates the state folder
    path = folder / PRESENT_NAMES_FILE
    with open(path, "w", encoding="utf-8") as out:
        for name in names:
            out.write(name + "\n")
    return path


def _pooled_write(job: PackageJob) -> PackageOutcome:
    assert _worker_context is not None, "worker started without _init_writer"
    return write_package_job(_worker_context, job)


def write_package_job(context: _WriterContext, job: PackageJob) -> PackageOutcome:
    local = FileChanges()
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
    if job.republish:
        local.written.extend(sorted(set(files) - set(local.written)))
    return PackageOutcome(
        job.name, record, local.written, local.removed, fragments=fragments, new=not job.previous, releases=job.releases,
        listing=listing_of(context.settings, summary),
    )


def write_packages(
    settings: Settings,
    cache: Manifests,
    registry_names: AbstractSet[str],
    jobs: Iterator[PackageJob],
    at_most: int,
    progress: ProgressCallback | None,
    signer: Signer | None = None,
) -> Iterator[PackageOutcome]:
    """Runs the jobs (at most `at_most` of them) in order, in worker processes when many."""
    workers = worker_count()
    if at_most >= PARALLEL_PACKAGES and workers > 1:
        names_file = write_names(settings.state_folder, registry_names)
        try:
            with worker_pool(workers, _init_writer, (settings, str(names_file))) as pool:
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


def remove_package(settings: Settings, name: str, previous: dict[str, Any]) -> FileChanges:
    """Takes a package's files out of the tree (those its last write recorded, and its folders)."""
    files = FileChanges()
    for relative in previous["files"]:  # named whatever this folder held (as _write_package's stale files)
        remove_tree(settings.out_dir, relative)
        files.removed.append(relative)
    remove_tree(settings.out_dir, package_dir(name))
    remove_tree(settings.out_dir, f"-/package/{package_dir(name)}")
    remove_tree(settings.out_dir, site.package_folder(name))
    return files
