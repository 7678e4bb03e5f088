"""The records the build's state keeps and hands out: plain values, no storage in them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
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


@dataclass(frozen=True)
class ListingPlace:
    """Where one package shows in the listing documents (computed by the build from its summary)."""

    listed: bool = False
    modified: str = ""
    range_key: str = ""
    search_text: str = ""
    search_keys: tuple[str, ...] = ()
    search_entry: bytes = b""  # its record in the site's search shards (site.search_entry)


@dataclass
class ListingChanges:
    """What this build's package changes touched: the front page, name ranges, search shards."""

    front: bool = False
    ranges: set[str] = field(default_factory=set)  # browse keys a package entered or left: their whole path
    pages: set[str] = field(default_factory=set)  # browse keys whose package only changed: the page listing it
    shards: set[str] = field(default_factory=set)  # shards whose leaves were cut or joined
    leaves: set[tuple[str, str]] = field(default_factory=set)  # (shard, bound) whose records changed

    @classmethod
    def ignored(cls) -> ListingChanges:
        """For a full build, which writes every listing page and shard: nothing is collected (the
        sets would hold an entry per package and per shard leaf, never read)."""
        return cls(True, Discarding(), Discarding(), Discarding(), Discarding())


class Discarding(set):  # type: ignore[type-arg]
    """A set that stays empty, for what a full build would collect and never read."""

    def add(self, item: object) -> None:
        pass

    def update(self, *items: Iterable[Any]) -> None:
        pass


@dataclass(frozen=True)
class CachedManifest:
    manifest: bytes  # the validated manifest, as JSON
    readme: str | None
    readme_filename: str | None
    files: bytes | None = None  # the archive's file list as JSON [[path, size], ...] (site pages)
