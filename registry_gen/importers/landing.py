"""Where an import meets content/: the meta merge (pure) and the one small function that lands a
package through the write API's storage interface (origin ledger, archives, registry-meta.json)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Set
from dataclasses import dataclass
from pathlib import Path

from registry_gen.errors import VersionConflict
from registry_gen.importers.integrity import sri_sha512
from registry_gen.importers.model import ImportProblem, PackageRecord
from registry_gen.importers.origins import FileMark, OriginLedger, OriginRecord
from registry_gen.meta import PackageMeta
from registry_gen.storage import ContentStorage, archive_key, meta_key, read_meta, write_meta


@dataclass(frozen=True)
class Verified:
    """A tarball checked whole (digests, and the name and version in its package.json)."""

    path: Path  # a staged download, or the file in a Verdaccio storage
    sha512: str  # SRI of the bytes checked: landing stores only those bytes
    staged: bool  # a staging copy, removed once landed


def merge_meta(existing: PackageMeta | None, record: PackageRecord, held: Set[str], take_maintainers: bool = True) -> PackageMeta:
    """The package's meta after importing `record`; `held` are the versions content/ now has.

    What content/ already says wins over the import for times and maintainers (a re-run changes
    nothing); tags and deprecations from the source are added for versions held here. The source's
    maintainers are taken only when `take_maintainers` (a package the import created) and the
    meta names none: an import never grants rights over a package that was already here."""
    meta = existing or PackageMeta(name=record.name)
    times, deprecated, tags = dict(meta.time), dict(meta.deprecated), dict(meta.dist_tags)
    for source in record.versions:
        if source.version not in held:
            continue
        if source.time and source.version not in times:
            times[source.version] = source.time
        if source.deprecated:
            deprecated[source.version] = source.deprecated
    tags.update({tag: version for tag, version in record.dist_tags.items() if version in held})
    created = min([c for c in (meta.created, record.created) if c], default=None)
    modified = max([m for m in (meta.modified, record.modified) if m], default=None)
    maintainers = meta.maintainers or ([dict(p) for p in record.maintainers] if take_maintainers else [])
    return dataclasses.replace(
        meta, time=times, deprecated=deprecated, dist_tags=tags, maintainers=maintainers,
        created=created, modified=modified, revision=meta.revision + 1,
    )  # fmt: skip


def land_package(
    storage: ContentStorage, ledger: OriginLedger, record: PackageRecord, archives: Mapping[str, Verified], held: Set[str],
    adopted: bool = False,
) -> list[str]:  # fmt: skip
    """Stores new archives, then the merged meta; returns the content keys written.

    Runs under `WriteService.store_batch` (the write lock). The ledger first (what this import is
    about to write, so a crash leaves archives a re-run recognises as its own), then archives (a
    crash before the meta leaves archives a re-run finds present and whose meta it then writes),
    then the meta. `adopted`: an administrator merged this import into a package owned here
    (`--merge-into`): what it held now follows the origin."""
    previous = ledger.read(record.name)
    files = dict(previous.files) if previous is not None and previous.origin == record.origin else {}
    if adopted:
        files |= {key: ledger.mark(key) for key in ledger.held(record.name)[0]}
    written = land_archives(storage, ledger, OriginRecord(record.name, record.origin, files), archives)
    key = meta_key(record.name)
    before = read_meta(storage, key)
    merged = merge_meta(before, record, set(held) | set(archives), take_maintainers=not adopted)
    if _differs(before, merged):
        write_meta(storage, key, merged)
        written.append(key)
    return written


def land_archives(
    storage: ContentStorage, ledger: OriginLedger, known: OriginRecord, archives: Mapping[str, Verified], *, times: bool = True
) -> list[str]:  # fmt: skip
    """Stores `archives` (version -> verified file) for `known.name`, recorded in the ledger as
    `known.origin`'s (with what `known.files` already says); returns the keys written. The ledger
    is written first (what is about to land), then the archives, then (`times`) the ledger again
    with the files' times, so a crash anywhere leaves nothing a re-run would take for another
    origin's. Without `times` the record keeps size and digest only (`FileMark.mtime_ns` None: a
    later ownership check hashes the file): one durable commit per landing instead of two."""
    new = {archive_key(known.name, version): verified for version, verified in archives.items()}
    files = {**known.files, **{key: FileMark(verified.path.stat().st_size, verified.sha512) for key, verified in new.items()}}
    ledger.write(OriginRecord(known.name, known.origin, files))
    written = [key for key, verified in new.items() if _store_archive(storage, key, verified)]
    if new and times:
        ledger.write(OriginRecord(known.name, known.origin, files | {k: ledger.mark(k, v.sha512) for k, v in new.items()}))
    return written


def _store_archive(storage: ContentStorage, key: str, verified: Verified) -> bool:
    """Stores the verified bytes at `key`; False when content/ already had them."""
    data = verified.path.read_bytes()  # one archive at a time, at most limits.max_archive_bytes
    if sri_sha512(data) != verified.sha512:
        raise ImportProblem(f"{key}: {verified.path} changed after it was checked; not imported")
    stored = storage.read(key)
    if stored is None:
        storage.create(key, data)
        return True
    if stored != data:  # another writer stored this version meanwhile: its bytes stay
        raise VersionConflict(f"{key}: content/ got different bytes while importing; kept those")
    return False


def _differs(before: PackageMeta | None, after: PackageMeta) -> bool:
    """True when the merge changed anything but the revision counter (re-runs write nothing)."""
    if before is None:
        return True
    return dataclasses.replace(before, revision=after.revision) != after
