"""Where the mirror meets content/ (I/O, run under the write lock through `WriteService.land`):
an upstream's document as a package's meta, a tarball as an archive, and the moves a verdict
makes. Each landing first asks again whether the package is owned here: a publish may have come
in while the upstream answered, and a local name always wins.

Landed like an import: the origin ledger (`importers.origins`) names the uplink's origin for what
the mirror wrote, so `registry-gen import` and the mirror of one registry recognise each other's
files, and anything else in content/ makes the package local.

A version held back after its tarball was fetched leaves content/ (its archive is kept, byte for
byte, in `<data_dir>/mirror/held/`; it comes back if the policy allows it again), so the tree
stops serving it: a block applies to what is already mirrored. Tarballs an upstream serves that
are no npm archive the build can read are served as the upstream's bytes, checked against every
digest it lists, from `<data_dir>/mirror/tarballs/` (their tree copy is the mirror's own)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from registry_gen.errors import NotFound, RegistryError
from registry_gen.importers.landing import Verified, land_archives
from registry_gen.importers.origins import OriginLedger, OriginRecord
from registry_gen.meta import PackageMeta
from registry_gen.names import package_dir, tarball_filename, tarball_path
from registry_gen.settings import Settings
from registry_gen.storage import ContentStorage, archive_key, meta_key, read_meta, write_meta
from registry_gen.writer import atomic_copy, atomic_write_bytes


class OwnedHere(RegistryError):
    """The package has versions published here (or is otherwise this registry's own): not proxied."""


@dataclass(frozen=True)
class MirrorFolders:
    """The mirror's own folders beside the import ledger (`<data_dir>/mirror/...`)."""

    root: Path

    @classmethod
    def of(cls, settings: Settings) -> MirrorFolders:
        return cls(settings.data_dir / "mirror")

    def held(self, name: str, version: str) -> Path:
        return self.root / "held" / package_dir(name) / tarball_filename(name, version)

    def passthrough(self, name: str, version: str) -> Path:
        return self.root / "tarballs" / package_dir(name) / tarball_filename(name, version)

    @property
    def staging(self) -> Path:
        return self.root / "staging"


def mirrored_meta_or_none(storage: ContentStorage, name: str) -> PackageMeta | None:
    """The package's meta when it is mirrored; None when it has none or it is not mirrored."""
    meta = read_meta(storage, meta_key(name))
    return meta if meta is not None and meta.mirror is not None else None


def check_not_owned(storage: ContentStorage, ledger: OriginLedger, name: str, origin: str) -> OriginRecord | None:
    """Raises OwnedHere unless `name` is new here, mirrored, or follows `origin`; returns the
    ledger's record to keep (its files stay the mirror's when the uplink's URL changed)."""
    known = ledger.read(name)
    if mirrored_meta_or_none(storage, name) is not None:
        return known
    refusal = ledger.refusal(name, origin)
    if refusal is not None:
        raise OwnedHere(refusal)
    return known


def land_document(
    storage: ContentStorage, ledger: OriginLedger, folders: MirrorFolders, settings: Settings, origin: str, meta: PackageMeta
) -> list[str]:  # fmt: skip
    """The package's new meta, after the archive moves its verdicts make; the keys written."""
    name = meta.name
    known = check_not_owned(storage, ledger, name, origin)
    if known is None or known.origin != origin:  # a refresh of a package it records changes no row
        ledger.write(OriginRecord(name, origin, dict(known.files) if known is not None else {}))
    assert meta.mirror is not None
    moved = [*hold_back(storage, folders, settings, name, meta.mirror.held),
             *bring_back(storage, folders, settings, name, meta.mirror.allowed)]  # fmt: skip
    write_meta(storage, meta_key(name), meta)
    return [meta_key(name), *moved]


def hold_back(storage: ContentStorage, folders: MirrorFolders, settings: Settings, name: str, versions: Iterable[str]) -> list[str]:
    """Moves the held versions' archives out of content/ (kept in the held folder) and removes a
    passed-through tarball's tree copy; the content keys removed."""
    moved = []
    for version in versions:
        key = archive_key(name, version)
        data = storage.read(key)
        if data is not None:
            atomic_write_bytes(folders.held(name, version), data, durable=True)
            storage.remove(key)
            moved.append(key)
        if folders.passthrough(name, version).is_file():
            (settings.out_dir / tarball_path(name, version)).unlink(missing_ok=True)
    return moved


def bring_back(storage: ContentStorage, folders: MirrorFolders, settings: Settings, name: str, versions: Iterable[str]) -> list[str]:
    """Puts archives the policy allows again back into content/; the keys written."""
    restored: list[str] = []
    if not folders.held(name, "0.0.0").parent.is_dir():
        return restored  # nothing of it was ever held back (the common case: one stat)
    for version in versions:
        kept = folders.held(name, version)
        if kept.is_file() and not storage.exists(archive_key(name, version)):
            storage.create(archive_key(name, version), kept.read_bytes())
            kept.unlink()
            restored.append(archive_key(name, version))
    return restored


def land_tarball(
    storage: ContentStorage, ledger: OriginLedger, origin: str, name: str, version: str, verified: Verified
) -> list[str]:  # fmt: skip
    """A verified tarball as the package's archive, if its version is still allowed. Its ledger
    row is committed once, before the archive, with the digest and no time: the second commit an
    import makes for the time was a third of a cold install's durable ledger commits, and only
    spares a hash in an ownership check a mirrored package rarely meets (bench/PROFILE.md)."""
    meta = mirrored_meta_or_none(storage, name)
    if meta is None or meta.mirror is None or version not in meta.mirror.allowed:
        raise OwnedHere(f"{name}@{version} is no longer a mirrored version this registry serves")
    known = ledger.read(name)  # mirrored, so not owned here (check_not_owned without reading the meta again)
    files = dict(known.files) if known is not None else {}
    return land_archives(storage, ledger, OriginRecord(name, origin, files), {version: verified}, times=False)


def keep_passed_through(folders: MirrorFolders, name: str, version: str, source: Path) -> Path:
    """Keeps the upstream's bytes (already checked against its digests): what the build cannot
    read as an archive is served as the upstream served it."""
    kept = folders.passthrough(name, version)
    kept.parent.mkdir(parents=True, exist_ok=True)
    if source != kept:
        atomic_copy(source, kept, durable=True)
    return kept


def pass_through(folders: MirrorFolders, settings: Settings, name: str, version: str) -> None:
    """The kept bytes' tree copy (under the write lock: a build may be removing the package)."""
    atomic_copy(folders.passthrough(name, version), settings.out_dir / tarball_path(name, version))


def local_versions(storage: ContentStorage, folders: MirrorFolders, settings: Settings, name: str) -> list[str]:
    """Under the write lock: the mirrored package's meta made a local one's (no `mirror`), with
    the times and tags of the versions whose archives content/ holds; a passed-through tarball's
    tree copy goes (it is no archive of the package). Returns the versions kept."""
    meta = mirrored_meta_or_none(storage, name)
    if meta is None or meta.mirror is None:
        raise NotFound(f"{name} is not a mirrored package")
    record = meta.mirror
    held = sorted(v for v in record.versions if storage.exists(archive_key(name, v)))
    for version in record.versions:
        if folders.passthrough(name, version).is_file():
            (settings.out_dir / tarball_path(name, version)).unlink(missing_ok=True)
    times = {v: stamp for v in held if (stamp := record.times.get(v) or record.first_seen.get(v))}
    tags = {tag: v for tag, v in record.tags.items() if v in held}
    write_meta(storage, meta_key(name), dataclasses.replace(meta, mirror=None, time=times, dist_tags=tags, revision=meta.revision + 1))
    return held
