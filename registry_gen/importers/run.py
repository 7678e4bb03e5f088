"""The orchestrators of `registry-gen import ...`: all the I/O (the export is in `export`; the
registry and lockfile imports in `remote`).

Downloads are streamed into `<data_dir>/import-staging/` (verified whole, then renamed into
place), so an interrupted run resumes from what it fetched and nothing half-written reaches
content/. A tarball is verified before it lands: its digests, and the name and version its own
package.json states (SECURITY.md, "Imports"). Each package lands through the write service
(`WriteService.store_batch` running `landing.land_package` under the registry's write lock),
unless it is owned here (`origins`); one incremental build runs at the end."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from registry_gen.archive import read_archive
from registry_gen.build import run_build
from registry_gen.errors import InvalidArchive, RegistryError, VersionConflict
from registry_gen.importers import verdaccio
from registry_gen.importers.identity import manifest_problem
from registry_gen.importers.integrity import file_integrity_problem
from registry_gen.importers.landing import Verified, land_package
from registry_gen.importers.model import ImportProblem, PackageRecord, Skipped, Summary, VersionSource
from registry_gen.importers.origins import OriginLedger, storage_origin
from registry_gen.importers.upstream import dependency_specs
from registry_gen.meta import PackageMeta
from registry_gen.names import package_dir, tarball_filename
from registry_gen.settings import Limits, Settings
from registry_gen.state import JournalEvent
from registry_gen.state.ledger import UNCHECKED
from registry_gen.storage import ContentStorage, archive_key, meta_key, read_meta
from registry_gen.verify import check_dependency_closure, load_published
from registry_gen.versions import is_valid_version
from registry_gen.writes import BatchJournal, WriteService

DEFAULT_WORKERS = 8
# Where a version's tarball is, as a file: a fresh download (staged) or a file in a storage folder.
Fetch = Callable[[VersionSource], Path]


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
    archives: dict[str, Verified] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    present: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _journal(fetched: Fetched) -> BatchJournal:
    """One `package:import` per package an import lands, with its versions and where they came
    from; journalled before content/ changes, with the archives' digests (the sha512 the import
    verified; the merged meta is computed as it is written: not checked)."""
    record = fetched.record
    files: dict[str, str | None] = {archive_key(record.name, version): verified.sha512 for version, verified in fetched.archives.items()}
    files[meta_key(record.name)] = UNCHECKED
    event = JournalEvent("package:import", record.name, tuple(fetched.archives), {"origin": record.origin})
    return BatchJournal([event], files, "registry-gen import")


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
    """One import run: content/ storage, the staging folder, the summary and the files touched.

    `merge_into`: the names an administrator allows this run to merge into although they are
    owned here (`origins.owned_here`)."""

    settings: Settings
    progress: Progress = field(default_factory=SilentProgress)
    summary: Summary = field(default_factory=Summary)
    touched: list[str] = field(default_factory=list)
    merge_into: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.downloads: ThreadPoolExecutor | None = None
        self.writes = WriteService(self.settings)
        self.storage = self.writes.storage
        self.staging = self.settings.data_dir / "import-staging"
        self.ledger = OriginLedger(self.settings)
        self.names: set[str] = set()  # packages this run imported or found present

    # ------------------------------------------------------------ per package

    def fetch(self, record: PackageRecord, fetch: Fetch, stage: bool) -> Fetched:
        """Classifies each version (present, skipped, needed) and fetches and verifies the needed ones.

        A package owned here gets nothing fetched (unless named in `merge_into`): it is refused."""
        out = Fetched(record)
        try:
            meta = read_meta(self.storage, meta_key(record.name)) or PackageMeta(record.name)
            owner = self.ledger.refusal(record.name, record.origin) if record.name not in self.merge_into else None
        except (RegistryError, ValueError) as exc:
            out.skipped.append(Skipped(record.name, f"cannot be imported here: {exc}", error=True))
            return out
        needed = self._classify(record, meta, out)
        if owner is not None:
            return self._refused(out, owner) if needed else dataclasses.replace(out, held=set())
        # Tarballs go to their own bounded pool: package jobs wait on them, so they cannot share one.
        mapper = self.downloads.map if self.downloads is not None and len(needed) > 1 else map
        for source, result in zip(needed, mapper(lambda s: self._verified_or_problem(s, fetch, stage), needed), strict=True):
            entry = f"{source.name}@{source.version}"
            if isinstance(result, ImportProblem):
                out.skipped.append(Skipped(entry, str(result).removeprefix(f"{entry}: "), error=True))
            else:
                out.archives[source.version] = result
        return out

    def _classify(self, record: PackageRecord, meta: PackageMeta, out: Fetched) -> list[VersionSource]:
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
        return needed

    @staticmethod
    def _refused(out: Fetched, owner: str) -> Fetched:
        """Nothing of a package owned here is written: not a version, not a tag, not `latest`."""
        name = out.record.name
        reason = f"{owner}; not merged, nothing written for it (an administrator who means it: --merge-into {name})"
        return Fetched(out.record, skipped=[*out.skipped, Skipped(name, reason, error=True)])

    def _verified_or_problem(self, source: VersionSource, fetch: Fetch, stage: bool) -> Verified | ImportProblem:
        try:
            return self._verified(source, fetch, stage)
        except ImportProblem as exc:
            return exc

    def _refusal(self, source: VersionSource, meta: PackageMeta) -> str | None:
        if not is_valid_version(source.version):
            return "not a semantic version this registry can serve"
        if source.version in meta.unpublished:
            return "was unpublished here: its number stays retired"
        existing = self.settings.content_dir / archive_key(source.name, source.version)
        if existing.is_file() and file_integrity_problem(existing, source.integrity, source.shasum)[0]:
            return "content/ already holds different bytes for this version; kept those"
        return None

    def _staged_path(self, source: VersionSource) -> Path:
        return self.staging / package_dir(source.name) / tarball_filename(source.name, source.version)

    def download_path(self, source: VersionSource) -> Path:
        """A fresh file beside the staged one for a download in progress (hidden: never reused)."""
        staged = self._staged_path(source)
        staged.parent.mkdir(parents=True, exist_ok=True)
        return staged.with_name(f".{staged.name}.{uuid.uuid4().hex}.part")

    def _verified(self, source: VersionSource, fetch: Fetch, stage: bool) -> Verified:
        staged = self._staged_path(source)
        if stage and staged.is_file():
            problem, sha512 = self._check(staged, source)
            if problem is None:
                return Verified(staged, sha512, staged=True)  # fetched by an interrupted run
        path = fetch(source)
        problem, sha512 = self._check(path, source)
        if problem:
            if stage:
                path.unlink(missing_ok=True)
            raise ImportProblem(f"{problem}; not imported")
        if stage:
            os.replace(path, staged)
        return Verified(staged if stage else path, sha512, staged=stage)

    def _check(self, path: Path, source: VersionSource) -> tuple[str | None, str]:
        """(why the file cannot land as source.name@source.version, or None; its sha512 SRI)."""
        problem, sha512 = file_integrity_problem(path, source.integrity, source.shasum)
        if problem is not None:
            return problem, sha512
        return archive_problem(path, source.name, source.version, self.settings.limits)[0], sha512

    def land(self, fetched: Fetched) -> None:
        self.summary.present += fetched.present
        self.summary.skipped += fetched.skipped
        if not fetched.archives and not fetched.held:
            return
        record = fetched.record
        try:
            written = self.writes.store_batch(lambda storage: self._land_locked(storage, fetched), _journal(fetched))
        except (ImportProblem, VersionConflict) as exc:
            self.summary.skipped.append(Skipped(record.name, str(exc), error=True))
            return
        self.touched += written
        self.names.add(record.name)
        self.summary.imported += [f"{record.name}@{v}" for v in fetched.archives]
        for verified in fetched.archives.values():
            if verified.staged:
                verified.path.unlink(missing_ok=True)

    def _land_locked(self, storage: ContentStorage, fetched: Fetched) -> list[str]:
        """Under the write lock: asks again whether the package is owned here (a publish may have
        come in since `fetch`), then lands it."""
        name, origin = fetched.record.name, fetched.record.origin
        owner = self.ledger.refusal(name, origin)
        if owner is not None and name not in self.merge_into:
            raise ImportProblem(self._refused(Fetched(fetched.record), owner).skipped[-1].reason)
        return land_package(storage, self.ledger, fetched.record, fetched.archives, fetched.held, adopted=owner is not None)


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

    def report_unresolved(self) -> None:
        """Says when the imported set is not closed: what `registry-gen verify` reports as
        dependency-missing for the `latest` version of each package this run imported."""
        names = sorted(self.names)
        if not names or not self.settings.out_dir.is_dir():
            return
        wanted = set(names)
        for package in load_published(self.settings.out_dir, names).values():
            wanted |= {dependency for dependency, _ in dependency_specs(package.latest or {})}
        report = check_dependency_closure(self.settings.out_dir, sorted(wanted))
        self.summary.unresolved += [str(p) for p in report.problems if p.path.rpartition("/")[0] in self.names]

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


def archive_problem(path: Path, name: str, version: str, limits: Limits) -> tuple[str | None, str | None]:
    """(why the file at `path` cannot be served as name@version, or None; the archive rule it
    breaks, None when it reads as an archive but names another package or version)."""
    try:
        with open(path, "rb") as archive:
            manifest = read_archive(archive, limits).manifest
    except InvalidArchive as exc:
        return f"the tarball cannot be served ({exc})", exc.rule
    if not isinstance(manifest, dict):
        return "the tarball's package.json is not an object", "manifest-json"
    return manifest_problem(manifest, name, version, "tarball's package.json"), None


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


def read_verdaccio_config(path: Path | None) -> dict:
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
    accounts: Mapping[str, str] | None = None, merge_into: Iterable[str] = (),
) -> Summary:  # fmt: skip
    """`config` defaults to the config.yaml beside the storage folder (Verdaccio's own layout).
    `accounts` ({username: account id}, the ones this import created) bind the maintainers of the
    packages this import creates (never of one that was here before)."""
    importer = Importer(settings, progress or SilentProgress(), merge_into=frozenset(merge_into))
    rules = read_verdaccio_config(config or storage_dir.parent / verdaccio.CONFIG)
    folders = verdaccio.package_folders(_storage_listing(storage_dir))
    importer.progress.start(len(folders))

    def read_local(source: VersionSource) -> Path:
        path = storage_dir / source.tarball
        if not path.is_file():
            raise ImportProblem(f"tarball {source.tarball} cannot be read (no such file)")
        return path

    for folder in folders:
        record, skipped = _storage_record(storage_dir, folder, rules, accounts or {}, importer.summary)
        if record is not None:
            fetched = importer.fetch(record, read_local, stage=False)
            fetched.skipped += skipped
            importer.land(fetched)
        importer.progress.advance(folder)
    importer.build()
    importer.report_unresolved()
    return importer.summary


def _storage_record(
    storage_dir: Path, folder: str, rules: Mapping, accounts: Mapping[str, str], summary: Summary
) -> tuple[PackageRecord | None, list[Skipped]]:
    """The record of one storage folder (its stored versions only), or None when it is refused."""
    document = storage_dir / folder / verdaccio.DOCUMENT
    if not document.is_file():
        summary.skipped.append(Skipped(folder, f"no {verdaccio.DOCUMENT} in the folder (not a package)"))
        return None, []
    try:
        parsed = verdaccio.parse_document(document.read_bytes(), folder)
        record, skipped = verdaccio.record_from_document(parsed, folder, storage_origin(storage_dir))
    except ImportProblem as exc:
        summary.skipped.append(Skipped(folder, str(exc), error=True))
        return None, []
    if not record.maintainers:
        record = dataclasses.replace(record, maintainers=verdaccio.publishers(rules, record.name))
    record = dataclasses.replace(record, maintainers=verdaccio.bind_accounts(record.maintainers, accounts))
    # A proxying Verdaccio caches upstream documents listing versions whose tarballs it never fetched.
    stored = tuple(v for v in record.versions if (storage_dir / v.tarball).is_file())
    skipped += [Skipped(f"{v.name}@{v.version}", "listed by a cached upstream document but not stored by Verdaccio "
                        "(use `import registry` for it)") for v in record.versions if v not in stored]  # fmt: skip
    return dataclasses.replace(record, versions=stored), skipped
