"""Where an import meets content/: the meta merge (pure) and the one small function that lands a
package through the write API's storage interface (archives first, then registry-meta.json)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Set

from registry_gen.errors import VersionConflict
from registry_gen.importers.model import PackageRecord
from registry_gen.meta import PackageMeta
from registry_gen.storage import ContentStorage, archive_key, meta_key, read_meta, write_meta


def merge_meta(existing: PackageMeta | None, record: PackageRecord, held: Set[str]) -> PackageMeta:
    """The package's meta after importing `record`; `held` are the versions content/ now has.

    What content/ already says wins over the import for times and maintainers (a re-run changes
    nothing); tags and deprecations from the source are added for versions held here."""
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
    return dataclasses.replace(
        meta, time=times, deprecated=deprecated, dist_tags=tags,
        maintainers=meta.maintainers or [dict(p) for p in record.maintainers],
        created=created, modified=modified, revision=meta.revision + 1,
    )  # fmt: skip


def land_package(storage: ContentStorage, record: PackageRecord, archives: Mapping[str, bytes], held: Set[str]) -> list[str]:
    """Stores new archives, then the merged meta; returns the content keys written.

    Runs under `WriteService.store_batch` (the write lock). Archives first: a crash before the meta
    leaves archives a re-run finds present and whose meta it then writes."""
    written = []
    for version, data in archives.items():
        key = archive_key(record.name, version)
        stored = storage.read(key)
        if stored is None:
            storage.create(key, data)
            written.append(key)
        elif stored != data:  # another writer stored this version meanwhile: its bytes stay
            raise VersionConflict(f"{record.name}@{version}: content/ got different bytes while importing; kept those")
    key = meta_key(record.name)
    before = read_meta(storage, key)
    merged = merge_meta(before, record, set(held) | set(archives))
    if _differs(before, merged):
        write_meta(storage, key, merged)
        written.append(key)
    return written


def _differs(before: PackageMeta | None, after: PackageMeta) -> bool:
    """True when the merge changed anything but the revision counter (re-runs write nothing)."""
    if before is None:
        return True
    return dataclasses.replace(before, revision=after.revision) != after
