"""The records the state keeps and hands out: plain values, no storage in them.

They are the vocabulary of the state contract (registry_gen.state): what a build reads per package
or per page, and what it hands back to be kept. Frozen and slotted: a full build holds one per
package or archive at a time, never a shared mutable one."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class ArchiveRecord:
    """What the state remembers about one archive, so an unchanged one is never reopened."""

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

    def to_json(self) -> dict[str, Any]:
        # Not dataclasses.asdict: the fields are flat scalars, and asdict deep-copies.
        return {name: getattr(self, name) for name in ARCHIVE_FIELDS}


ARCHIVE_FIELDS = tuple(f.name for f in fields(ArchiveRecord))


@dataclass(frozen=True, slots=True)
class CachedManifest:
    """What the package documents need from one archive, kept by the tarball's sha1."""

    manifest: bytes  # the validated manifest, as JSON
    readme: str | None
    readme_filename: str | None
    files: bytes | None = None  # the archive's file list as JSON [[path, size], ...] (site pages)


@dataclass(frozen=True, slots=True)
class ListingPlace:
    """Where one package shows in the listing documents (computed by the build from its summary)."""

    listed: bool = False
    modified: str = ""
    range_key: str = ""
    search_text: str = ""
    search_keys: tuple[str, ...] = ()
    search_entry: bytes = b""  # its record in the site's search shards (site.search_entry)


@dataclass(frozen=True, slots=True)
class ListedAt:
    """Where a package is listed now: its browse key and the search shards it sits in."""

    range_key: str
    shards: frozenset[str]


@dataclass(frozen=True, slots=True)
class Leaf:
    """One leaf of a search shard: the first name it may hold (`bound`, '' for the first leaf)
    and how many names it holds."""

    bound: str
    count: int


@dataclass(frozen=True, slots=True)
class LeafHood:
    """What deciding a name's move in one shard needs: the leaf that holds (or would hold) the
    name, its neighbours, and whether the shard has any leaf at all."""

    leaf: Leaf | None
    before: Leaf | None = None
    after: Leaf | None = None
    has_leaves: bool = False


@dataclass(frozen=True, slots=True)
class LeafOp:
    """One change to a shard's leaves, as decided by registry_gen.build.indexes and applied by the
    state. kind: `insert` (a new leaf `bound` with `count`), `count` (set the count), `delete`,
    `split` (cut the leaf at its middle name), `join` (`other` goes into `bound`, now `count`)."""

    kind: str
    key: str
    bound: str
    count: int = 0
    other: str = ""


@dataclass(frozen=True, slots=True)
class ListingMove:
    """How one package's place in the listings changes (registry_gen.build.indexes.listing_move):
    the prefix counts to move, the shards it leaves and enters, and the leaf operations."""

    name: str
    listing: ListingPlace | None  # its place after (None: the package goes); listed or not
    prefix_rows: tuple[tuple[str, str, int], ...] = ()  # (prefix, parent, +1/-1)
    shards_gone: tuple[str, ...] = ()
    shards_now: tuple[str, ...] = ()
    leaf_ops: tuple[LeafOp, ...] = ()

    @property
    def listed(self) -> ListingPlace | None:
        """Where it is listed after (None: not listed, or gone)."""
        return self.listing if self.listing is not None and self.listing.listed else None


@dataclass(frozen=True, slots=True)
class StalePage:
    """A listing page a write's build left to the registry-wide rewrite (on PostgreSQL: the
    leader's, registry_gen.leader) instead of rendering it: `kind` is `front` (the front page),
    `range` (every browse page on the path of browse key `key`), `page` (the browse page listing
    `key`), `shard` (search shard `key`, its leaves cut or joined) or `leaf` (the leaf of shard
    `key` starting at `bound`). `mark`: which marking of it was read; a write marking it again
    meanwhile gives it another, so what the rewrite rendered is settled and that marking kept."""

    kind: str
    key: str
    bound: str = ""
    mark: int = 0


@dataclass(frozen=True, slots=True)
class PackageInputs:
    """Everything the state knows of one package that its plan and its write need: the row of its
    last write (None: never written), the archives that claim it, the served versions' pins, the
    recorded publish times and where its meta files are."""

    name: str
    previous: dict[str, Any] | None
    archives: tuple[ArchiveRecord, ...]
    pins: dict[str, ArchiveRecord]
    damaged: tuple[tuple[str, str], ...]  # (version, path) of unreadable archives that held a version
    metas: tuple[tuple[str, str | None], ...]  # (path, error) of its meta files, by path
    times: dict[str, str]


@dataclass(frozen=True, slots=True)
class PackageBefore:
    """What the state knows of a package just before its outcome is kept: the names its page linked
    to, where it was listed, and the leaf around it in each shard it was or will be in."""

    links: frozenset[str]
    listed: ListedAt | None
    hoods: dict[str, LeafHood]


@dataclass(frozen=True, slots=True)
class PackageWrite:
    """One package written: its row (files, tarballs, links, summary...), whether it has a page,
    its pieces of -/all and -/v1/search, the versions it serves now (pinned to their archives),
    the publish times resolved afresh, and whether its last write had failed."""

    name: str
    record: dict[str, Any]
    present: bool
    fragments: tuple[bytes, bytes]
    pins: dict[str, ArchiveRecord]
    times: dict[str, str]
    retried: bool = False


@dataclass(frozen=True, slots=True)
class BuildStart:
    """What a build needs to know before it looks at content/."""

    empty: bool  # nothing was ever built from this state
    fingerprint_changed: bool  # another generator or settings: every file is written again
    unwritten: frozenset[str]  # packages whose last write failed: tried again
    shards_stale: bool  # every search shard is to be written again (a migrated state)
    whole_stale: bool  # a deferred build left -/all and -/search.json behind
    seed_pins: bool  # a state from before versions were pinned: pin what the tree serves
    pending_writes: tuple[tuple[int, dict[str, str | None]], ...] = ()  # journalled writes a crash left unresolved (id, files)


@dataclass(frozen=True, slots=True)
class BrowseInputs:
    """What one browse page shows: how many listed packages start with its prefix, its
    sub-ranges when it has more than a page of them (prefix, count, first key, last key), and the
    packages it lists itself."""

    total: int
    children: tuple[tuple[str, int, str, str], ...]
    summaries: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class BuildReport:
    """What a build reports from the state: every refusal it keeps."""

    archive_errors: tuple[tuple[str, str], ...]  # (path, reason)
    refusals: tuple[tuple[str, str, str], ...]  # (package, path, reason)
    meta_errors: tuple[tuple[str, str | None, str], ...]  # (path, name when last valid, reason)
    duplicate_metas: tuple[tuple[str, str], ...]  # (name, path)
