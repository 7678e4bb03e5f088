"""The orchestrators of `registry-gen import ...`: all the I/O (the export is in `export`).

Downloads are staged under `<data_dir>/import-staging/` (verified, then renamed into place), so an
interrupted run resumes from what it fetched and nothing half-written reaches content/. Each
package lands through the write service (`WriteService.store_batch` running `landing.land_package`
under the registry's write lock); one incremental build runs at the end."""

from __future__ import annotations

import dataclasses
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from registry_gen.build import run_build
from registry_gen.errors import RegistryError
from registry_gen.importers import lockfiles, upstream, verdaccio
from registry_gen.importers.client import RegistryClient
from registry_gen.importers.integrity import integrity_problem
from registry_gen.importers.landing import land_package
from registry_gen.importers.model import ImportProblem, PackageRecord, Skipped, Summary, VersionSource
from registry_gen.meta import PackageMeta
from registry_gen.names import package_dir, tarball_filename
from registry_gen.settings import Settings
from registry_gen.storage import archive_key, meta_key, read_meta
from registry_gen.versions import is_valid_version
from registry_gen.writer import atomic_write_bytes
from registry_gen.writes import WriteService

DEFAULT_WORKERS = 8
Fetch = Callable[[VersionSource], bytes]


class Progress(Protocol):
    def start(self, total: int) -> None: ...

    def advance(self, label: str) -> None: ...


class SilentProgress:
    def start(self, total: int) -> None:
        pass

    def advance(self, label: str) -> None:
        pass


@dataclass
class Fetched:
    record: PackageRecord
    archives: dict[str, bytes] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    present: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def default_registry() -> str:
    """The registry npm itself is configured with, as a team's machines already are."""
    try:
        found = subprocess.run(["npm", "config", "get", "registry"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImportProblem(f"cannot ask npm for its registry ({exc}); pass --from URL") from exc
    url = found.stdout.strip()
    if found.returncode != 0 or not url.startswith(("http://", "https://")):
        raise ImportProblem("`npm config get registry` gave no registry URL; pass --from URL")
    return url if url.endswith("/") else url + "/"


@dataclass
class Importer:
    """One import run: content/ storage, the staging folder, the summary and the files touched."""

    settings: Settings
    progress: Progress = field(default_factory=SilentProgress)
    summary: Summary = field(default_factory=Summary)
    touched: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.downloads: ThreadPoolExecutor | None = None
        self.writes = WriteService(self.settings)
        self.storage = self.writes.storage
        self.staging = self.settings.data_dir / "import-staging"

    # ------------------------------------------------------------ per package

    def fetch(self, record: PackageRecord, fetch: Fetch, stage: bool) -> Fetched:
        """Classifies each version (present, skipped, needed) and fetches and verifies the needed ones."""
        out = Fetched(record)
        try:
            meta = read_meta(self.storage, meta_key(record.name)) or PackageMeta(record.name)
        except (RegistryError, ValueError) as exc:
            out.skipped.append(Skipped(record.name, f"cannot be imported here: {exc}", error=True))
            return out
        needed = []
        for source in record.versions:
            entry = f"{source.name}@{source.version}"
            reason = self._refusal(source, meta)
            if reason is not None:
                out.skipped.append(Skipped(entry, reason, error=reason.startswith("content/")))
            elif self.storage.exists(archive_key(source.name, source.version)):
                out.held.add(source.version)
                out.present.append(entry)
            else:
                needed.append(source)
        # Tarballs go to their own bounded pool: package jobs wait on them, so they cannot share one.
        mapper = self.downloads.map if self.downloads is not None and len(needed) > 1 else map
        for source, result in zip(needed, mapper(lambda s: self._verified_or_problem(s, fetch, stage), needed), strict=True):
            entry = f"{source.name}@{source.version}"
            if isinstance(result, ImportProblem):
                out.skipped.append(Skipped(entry, str(result).removeprefix(f"{entry}: "), error=True))
            else:
                out.archives[source.version] = result
        return out

    def _verified_or_problem(self, source: VersionSource, fetch: Fetch, stage: bool) -> bytes | ImportProblem:
        try:
            return self._verified(source, fetch, stage)
        except ImportProblem as exc:
            return exc

    def _refusal(self, source: VersionSource, meta: PackageMeta) -> str | None:
        if not is_valid_version(source.version):
            return "not a semantic version this registry can serve"
        if source.version in meta.unpublished:
            return "was unpublished here: its number stays retired"
        existing = self.storage.read(archive_key(source.name, source.version))
        if existing is not None and integrity_problem(existing, source.integrity, source.shasum):
            return "content/ already holds different bytes for this version; kept those"
        return None

    def _staged_path(self, source: VersionSource) -> Path:
        return self.staging / package_dir(source.name) / tarball_filename(source.name, source.version)

    def _verified(self, source: VersionSource, fetch: Fetch, stage: bool) -> bytes:
        staged = self._staged_path(source)
        if stage and staged.is_file():
            data = staged.read_bytes()
            if integrity_problem(data, source.integrity, source.shasum) is None:
                return data  # fetched by an interrupted run
        data = fetch(source)
        problem = integrity_problem(data, source.integrity, source.shasum)
        if problem:
            raise ImportProblem(f"{problem}; not imported")
        if stage:
            atomic_write_bytes(staged, data)
        return data

    def land(self, fetched: Fetched) -> None:
        self.summary.present += fetched.present
        self.summary.skipped += fetched.skipped
        if not fetched.archives and not fetched.held:
            return
        written = self.writes.store_batch(lambda storage: land_package(storage, fetched.record, fetched.archives, fetched.held))
        self.touched += written
        name = fetched.record.name
        self.summary.imported += [f"{name}@{v}" for v in fetched.archives]
        for version in fetched.archives:
            self._staged_path(VersionSource(name, version, "")).unlink(missing_ok=True)

    def build(self) -> None:
        """One incremental build over what this run wrote (a full one when there is no tree yet)."""
        _prune_empty(self.staging)
        if not self.touched and self.settings.state_file.exists():
            return
        # An import is an explicit write into content/: a registry that starts from one has none yet.
        self.settings.content_dir.mkdir(parents=True, exist_ok=True)
        # The keys as the storage wrote them (relative to content/): `content_dir / key` is a path
        # relative to the working folder when content_dir is, which the build would not find.
        result = run_build(self.settings, changed=list(self.touched) if self.settings.state_file.exists() else None)
        self.summary.skipped += [Skipped("build", str(issue), error=True) for issue in result.errors]

    def run_concurrently(self, jobs: Iterable[Callable[[], Fetched]], total: int, workers: int = DEFAULT_WORKERS) -> None:
        """Fetches packages on a bounded pool; lands each one on this thread as it completes."""
        self.progress.start(total)
        with ThreadPoolExecutor(max_workers=workers) as pool, ThreadPoolExecutor(max_workers=workers) as downloads:
            self.downloads = downloads
            futures = {pool.submit(job): index for index, job in enumerate(jobs)}
            for future in as_completed(futures):
                try:
                    fetched = future.result()
                except ImportProblem as exc:
                    self.summary.skipped.append(Skipped("import", str(exc), error=True))
                    self.progress.advance("failed")
                    continue
                self.land(fetched)
                self.progress.advance(fetched.record.name)
        self.downloads = None


def _prune_empty(root: Path) -> None:
    """Drops staging folders left empty; staged files of failed versions stay for the next run."""
    if not root.is_dir():
        return
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [root]:
        try:
            folder.rmdir()
        except OSError:
            pass  # not empty


# ---------------------------------------------------------------- import verdaccio


def _storage_listing(root: Path) -> dict[str, list[str]]:
    if not root.is_dir():
        raise ImportProblem(f"{root}: not a folder (pass Verdaccio's `storage` folder)")
    listing = {"": [p.name for p in root.iterdir() if p.is_dir()]}
    for scope in listing[""]:
        if scope.startswith("@"):
            listing[scope] = [p.name for p in (root / scope).iterdir() if p.is_dir()]
    return listing


def _verdaccio_config(path: Path | None) -> dict:
    """Verdaccio's config.yaml (its `packages:` rules say who publishes what), when there is one."""
    if path is None or not path.is_file():
        return {}
    try:
        loaded = yaml.safe_load(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ImportProblem(f"{path}: not a readable Verdaccio config ({exc})") from exc
    return loaded if isinstance(loaded, dict) else {}


def import_verdaccio(
    settings: Settings, storage_dir: Path, progress: Progress | None = None, config: Path | None = None,
    accounts: Mapping[str, str] | None = None,
) -> Summary:
    """`config` defaults to the config.yaml beside the storage folder (Verdaccio's own layout).
    `accounts` ({username: account id}, the ones this import created) bind the maintainers."""
    importer = Importer(settings, progress or SilentProgress())
    rules = _verdaccio_config(config or storage_dir.parent / verdaccio.CONFIG)
    folders = verdaccio.package_folders(_storage_listing(storage_dir))
    importer.progress.start(len(folders))

    def read_local(source: VersionSource) -> bytes:
        try:
            return (storage_dir / source.tarball).read_bytes()
        except OSError as exc:
            raise ImportProblem(f"tarball {source.tarball} cannot be read ({exc.strerror})") from exc

    for folder in folders:
        document = storage_dir / folder / verdaccio.DOCUMENT
        if not document.is_file():
            importer.summary.skipped.append(Skipped(folder, f"no {verdaccio.DOCUMENT} in the folder (not a package)"))
            continue
        try:
            record, skipped = verdaccio.record_from_document(verdaccio.parse_document(document.read_bytes(), folder), folder)
        except ImportProblem as exc:
            importer.summary.skipped.append(Skipped(folder, str(exc), error=True))
            continue
        if not record.maintainers:
            record = dataclasses.replace(record, maintainers=verdaccio.publishers(rules, record.name))
        record = dataclasses.replace(record, maintainers=verdaccio.bind_accounts(record.maintainers, accounts or {}))
        # A proxying Verdaccio caches upstream documents listing versions whose tarballs it never fetched.
        stored = tuple(v for v in record.versions if (storage_dir / v.tarball).is_file())
        skipped += [Skipped(f"{v.name}@{v.version}", "listed by a cached upstream document but not stored by Verdaccio "
                            "(use `import registry` for it)") for v in record.versions if v not in stored]  # fmt: skip
        fetched = importer.fetch(dataclasses.replace(record, versions=stored), read_local, stage=False)
        fetched.skipped += skipped
        importer.land(fetched)
        importer.progress.advance(record.name)
    importer.build()
    return importer.summary


# ---------------------------------------------------------------- import registry


def import_registry(
    settings: Settings, specs: list[str], *, registry: str | None = None, token: str | None = None,
    all_versions: bool = False, progress: Progress | None = None,
) -> Summary:  # fmt: skip
    importer = Importer(settings, progress or SilentProgress())
    client = RegistryClient(registry or default_registry(), token)
    wanted: dict[str, list[str | None]] = defaultdict(list)
    for spec in specs:
        name, selector = upstream.parse_spec(spec)
        wanted[name].append(selector)

    def job(name: str, selectors: list[str | None]) -> Callable[[], Fetched]:
        def fetch_one() -> Fetched:
            try:
                doc = client.document(name)
                versions: list[str] = []
                for selector in selectors:
                    spec = f"{name}@{selector}" if selector else name
                    versions += [v for v in upstream.choose_versions(doc, spec, selector, all_versions) if v not in versions]
            except ImportProblem as exc:
                return Fetched(PackageRecord(name, ()), skipped=[Skipped(name, str(exc).removeprefix(f"{name}: "), error=True)])
            record = upstream.record_from_packument(doc, versions)
            return importer.fetch(record, lambda source: client.get(_http_url(source), f"{source.name}@{source.version}"), stage=True)

        return fetch_one

    importer.run_concurrently([job(n, s) for n, s in wanted.items()], len(wanted))
    importer.build()
    return importer.summary


def _http_url(source: VersionSource) -> str:
    if not source.tarball.startswith(("http://", "https://")):
        raise ImportProblem(f"{source.name}@{source.version}: tarball URL {source.tarball!r} is not http(s)")
    return source.tarball


# ---------------------------------------------------------------- import lockfile


def import_lockfile(
    settings: Settings, lockfile: Path, *, registry: str | None = None, token: str | None = None,
    progress: Progress | None = None,
) -> Summary:  # fmt: skip
    try:
        raw = lockfile.read_bytes()
    except OSError as exc:
        raise ImportProblem(f"{lockfile}: cannot be read ({exc.strerror})") from exc
    parsed = lockfiles.parse_lockfile(lockfile.name, raw)
    importer = Importer(settings, progress or SilentProgress())
    importer.summary.skipped += list(parsed.skipped)
    fallback: list[str] = []  # asked for once, only when an entry names no registry

    def registry_for(entry: lockfiles.LockEntry) -> str:
        if registry:
            return registry
        found = upstream.registry_of(entry.resolved, entry.name) if entry.resolved else None
        if found is None and not fallback:
            fallback.append(default_registry())
        return found or fallback[0]

    by_name: dict[str, list[lockfiles.LockEntry]] = defaultdict(list)
    for entry in parsed.entries:
        by_name[entry.name].append(entry)
    jobs = [_lock_job(importer, name, entries, RegistryClient(registry_for(entries[0]), token), keep_urls=registry is None)
            for name, entries in by_name.items()]  # fmt: skip
    importer.run_concurrently(jobs, len(jobs))
    importer.build()
    return importer.summary


def _lock_job(importer: Importer, name: str, entries: list[lockfiles.LockEntry], client: RegistryClient, keep_urls: bool) -> Callable[[], Fetched]:
    expected = {
        e.version: VersionSource(name, e.version, (e.resolved or "") if keep_urls else "", e.integrity, e.shasum) for e in entries
    }

    def fetch_one() -> Fetched:
        try:
            doc = client.document(name)
        except ImportProblem as exc:
            return Fetched(PackageRecord(name, ()), skipped=[Skipped(name, str(exc).removeprefix(f"{name}: "), error=True)])
        known = [v for v in expected if v in (doc.get("versions") or {})]
        missing = [Skipped(f"{name}@{v}", "the registry no longer has this version", error=True) for v in expected if v not in known]
        record = upstream.record_from_packument(doc, known, expected)
        fetched = importer.fetch(record, lambda source: client.get(_http_url(source), f"{source.name}@{source.version}"), stage=True)
        fetched.skipped += missing
        return fetched

    return fetch_one
