"""What a build reports: the issues it found and the files and packages it wrote."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from registry_gen.state.records import StalePage


@dataclass(frozen=True)
class BuildIssue:
    """Something of content/ the build did not serve: `path` is the file (or the package name when
    the whole package failed); `package` is the package it concerns, when known."""

    path: str
    reason: str
    package: str | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class PathLog(list):  # type: ignore[type-arg]
    """Tree paths a build wrote or removed: all counted (`total`), the first KEPT named. A first
    build of a million versions writes ~4M files; naming every one would hold ~400 MB, and even
    100,000 named (~10 MB) made a full build's memory grow from 10k to 100k versions. Nothing
    reads past the first few: the tests name what small builds wrote, the CLI prints the total."""

    KEPT = 10_000
    total = 0  # a class default, so an unpickled log (items appended before its state) counts too

    def append(self, path: str) -> None:
        self.total += 1
        if len(self) < self.KEPT:
            super().append(path)

    def extend(self, paths: Iterable[str]) -> None:
        for path in paths:
            self.append(path)

    def absorb(self, other: list[str]) -> None:
        """Another log's paths and its count (a phase's own log, folded into the build's)."""
        total = self.total + getattr(other, "total", len(other))
        self.extend(other)
        self.total = total


class NameLog(PathLog):
    """The packages a build wrote again: all counted (`total`), the first KEPT named. A full build
    writes every package; the watch and serve lines name ten, the tests name what small builds wrote."""

    KEPT = 1_000


@dataclass
class FileChanges:
    """The tree paths one phase (or one package) wrote and removed, returned to the run."""

    written: list[str] = field(default_factory=PathLog)
    removed: list[str] = field(default_factory=PathLog)

    def absorb(self, other: FileChanges) -> None:
        self.written.absorb(other.written)  # type: ignore[attr-defined]
        self.removed.absorb(other.removed)  # type: ignore[attr-defined]


@dataclass
class BuildResult:
    packages: int = 0
    versions: int = 0
    written: list[str] = field(default_factory=PathLog)  # the first PathLog.KEPT; .total counts all
    removed: list[str] = field(default_factory=PathLog)
    skipped: int = 0
    rebuilt_packages: list[str] = field(default_factory=NameLog)  # the first NameLog.KEPT; .total counts all
    archives_read: int = 0
    errors: list[BuildIssue] = field(default_factory=list)
    refused: int = 0  # archives of content/ not served: unreadable, unaddressable, or in conflict
    seconds: float = 0.0
    # Listing pages earlier builds left to the rewrite, rendered by this one and not yet settled:
    # the caller settles them (State.settle_stale_listings) once its files are visible (uploaded).
    stale_listings: tuple[StalePage, ...] = ()
    # The marking of -/all and -/search.json this build rendered and left set (State.settle_whole_documents).
    whole_mark: str = ""

    @property
    def rebuilt(self) -> int:
        """How many packages this build wrote again (rebuilt_packages names only the first ones)."""
        return getattr(self.rebuilt_packages, "total", len(self.rebuilt_packages))

    def refusals(self, package: str, files: Iterable[str]) -> list[BuildIssue]:
        """What this build refused of `package`: any of `files` of content/, or the package itself."""
        wanted = set(files)
        return [i for i in self.errors if i.package in (package, None) and (i.path in wanted or i.path == package)]

    def summary(self) -> str:
        return (
            f"{self.packages} packages, {self.versions} versions, {getattr(self.written, 'total', len(self.written))} files written, "
            f"{self.skipped} packages unchanged, {self.refused} archives refused, "
            f"{len(self.errors)} errors, {self.seconds:.2f}s"
        )
