"""The orchestrators of `import registry` and `import lockfile`: documents and tarballs from an
npm-protocol registry, through one bounded client (`client.RegistryClient`), landed by `run.Importer`."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from registry_gen.importers import lockfiles, upstream
from registry_gen.importers.client import RegistryClient
from registry_gen.importers.model import DEFAULT_DEADLINE, ImportProblem, PackageRecord, Skipped, Summary, VersionSource
from registry_gen.importers.run import DEFAULT_WORKERS, Fetch, Fetched, Importer, Progress, SilentProgress, default_registry
from registry_gen.settings import Settings


def _remote(importer: Importer, client: RegistryClient) -> Fetch:
    """Streams a version's tarball into a fresh staging file, within the archive size cap."""

    def fetch(source: VersionSource) -> Path:
        entry = f"{source.name}@{source.version}"
        if not source.tarball.startswith(("http://", "https://")):
            raise ImportProblem(f"{entry}: tarball URL {source.tarball[:200]!r} is not http(s)")
        target = importer.download_path(source)
        try:
            client.download(source.tarball, entry, target, importer.settings.limits.max_archive_bytes)
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        return target

    return fetch


def _failed(name: str, exc: ImportProblem) -> Fetched:
    return Fetched(PackageRecord(name, ()), skipped=[Skipped(name, str(exc).removeprefix(f"{name}: "), error=True)])


def _fetch_package(
    importer: Importer, client: RegistryClient, doc: Mapping[str, Any], name: str, versions: Iterable[str],
    expected: Mapping[str, VersionSource] | None = None,
) -> Fetched:  # fmt: skip
    """The record of `name`'s `versions` from its document, fetched and verified."""
    try:
        record, refused = upstream.record_from_packument(doc, name, versions, client.registry, expected)
    except ImportProblem as exc:
        return _failed(name, exc)
    fetched = importer.fetch(record, _remote(importer, client), stage=True)
    fetched.skipped += refused
    return fetched


# ---------------------------------------------------------------- import registry


def import_registry(
    settings: Settings, specs: list[str], *, registry: str | None = None, token: str | None = None,
    all_versions: bool = False, with_dependencies: bool = False, merge_into: Iterable[str] = (),
    deadline: float = DEFAULT_DEADLINE, progress: Progress | None = None,
) -> Summary:  # fmt: skip
    """Imports `specs`; with `with_dependencies`, also the versions npm would install for their
    dependencies, transitively (`upstream.resolve_closure`)."""
    importer = Importer(settings, progress or SilentProgress(), merge_into=frozenset(merge_into))
    client = RegistryClient(registry or default_registry(), token, deadline=deadline)
    wanted: dict[str, list[str | None]] = defaultdict(list)
    for spec in specs:
        name, selector = upstream.parse_spec(spec)
        wanted[name].append(selector)
    if with_dependencies:
        closure = upstream.resolve_closure(wanted, lambda names: _documents(client, names), all_versions)
        importer.summary.skipped += closure.failed
        jobs = [_resolved_job(importer, client, closure.documents[n], n, v) for n, v in closure.versions.items()]
    else:
        jobs = [_spec_job(importer, client, n, s, all_versions) for n, s in wanted.items()]
    importer.run_concurrently(jobs, len(jobs))
    importer.build()
    importer.report_unresolved()
    return importer.summary


def _documents(client: RegistryClient, names: list[str]) -> dict[str, Mapping[str, Any] | ImportProblem]:
    """One level of the closure's documents, fetched on a bounded pool."""

    def one(name: str) -> Mapping[str, Any] | ImportProblem:
        try:
            return client.document(name)
        except ImportProblem as exc:
            return exc

    with ThreadPoolExecutor(max_workers=DEFAULT_WORKERS) as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


def _resolved_job(importer: Importer, client: RegistryClient, doc: Mapping[str, Any], name: str, versions: list[str]) -> Callable[[], Fetched]:
    return lambda: _fetch_package(importer, client, doc, name, versions)


def _spec_job(importer: Importer, client: RegistryClient, name: str, selectors: list[str | None], all_versions: bool) -> Callable[[], Fetched]:
    def fetch_one() -> Fetched:
        try:
            doc = client.document(name)
            versions: list[str] = []
            for selector in selectors:
                spec = f"{name}@{selector}" if selector else name
                versions += [v for v in upstream.choose_versions(doc, spec, selector, all_versions) if v not in versions]
        except ImportProblem as exc:
            return _failed(name, exc)
        return _fetch_package(importer, client, doc, name, versions)

    return fetch_one


# ---------------------------------------------------------------- import lockfile


def import_lockfile(
    settings: Settings, lockfile: Path, *, registry: str | None = None, token: str | None = None,
    merge_into: Iterable[str] = (), deadline: float = DEFAULT_DEADLINE, progress: Progress | None = None,
) -> Summary:  # fmt: skip
    """Every registry package the lockfile lists, from `registry`, else from where the lockfile
    says it was resolved, else from npm's configured registry. The token goes only to `registry`
    (or npm's configured one), never to a host a lockfile names."""
    try:
        raw = lockfile.read_bytes()
    except OSError as exc:
        raise ImportProblem(f"{lockfile}: cannot be read ({exc.strerror})") from exc
    parsed = lockfiles.parse_lockfile(lockfile.name, raw)
    importer = Importer(settings, progress or SilentProgress(), merge_into=frozenset(merge_into))
    importer.summary.skipped += list(parsed.skipped)
    configured: list[str] = []  # asked for once, only when needed

    def npm_registry() -> str:
        if not configured:
            configured.append(registry or default_registry())
        return configured[0]

    def registry_for(entry: lockfiles.LockEntry) -> str:
        found = None if registry or not entry.resolved else upstream.registry_of(entry.resolved, entry.name)
        return found or npm_registry()

    by_name: dict[str, list[lockfiles.LockEntry]] = defaultdict(list)
    for entry in parsed.entries:
        by_name[entry.name].append(entry)
    token_origin = npm_registry() if token else None
    clients = {name: RegistryClient(registry_for(entries[0]), token, token_origin, deadline=deadline) for name, entries in by_name.items()}
    jobs = [_lock_job(importer, name, entries, clients[name], keep_urls=registry is None) for name, entries in by_name.items()]
    importer.run_concurrently(jobs, len(jobs))
    importer.build()
    importer.report_unresolved()
    # Every registry package a lockfile lists is needed by an install: any one left out is a failure.
    summary = importer.summary
    summary.skipped = [s if s.error or s.not_applicable else dataclasses.replace(s, error=True) for s in summary.skipped]
    return summary


def _lock_job(importer: Importer, name: str, entries: list[lockfiles.LockEntry], client: RegistryClient, keep_urls: bool) -> Callable[[], Fetched]:
    expected = {
        e.version: VersionSource(name, e.version, (e.resolved or "") if keep_urls else "", e.integrity, e.shasum) for e in entries
    }

    def fetch_one() -> Fetched:
        try:
            doc = client.document(name)
        except ImportProblem as exc:
            return _failed(name, exc)
        known = [v for v in expected if v in (doc.get("versions") or {})]
        fetched = _fetch_package(importer, client, doc, name, known, expected)
        fetched.skipped += [Skipped(f"{name}@{v}", "the registry no longer has this version", error=True) for v in expected if v not in known]
        return fetched

    return fetch_one
