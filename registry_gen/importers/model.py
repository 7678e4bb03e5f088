"""What every importer produces: packages with their versions and the facts a registry knows
beyond the archive (times, tags, deprecations, maintainers), plus the reasons an entry was skipped."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from registry_gen.errors import RegistryError


DEFAULT_DEADLINE = 600.0  # seconds one download (a request and its redirects) may take in all


class ImportProblem(RegistryError):
    """An import cannot go on: an unreachable registry, a 401/404, a malformed input. Names the entry."""


def iso_time(value: object) -> str | None:
    """npm's time format (UTC, milliseconds, `Z`) for any ISO 8601 time a source gives; else None."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class VersionSource:
    """One version to import: where its tarball is and what its bytes must hash to."""

    name: str
    version: str
    tarball: str  # URL, or a local path for Verdaccio storage
    integrity: str | None = None  # SRI string (one or more algorithms)
    shasum: str | None = None  # hex SHA-1
    time: str | None = None
    deprecated: str | None = None


@dataclass(frozen=True)
class PackageRecord:
    """Everything one import knows about one package name."""

    name: str
    versions: tuple[VersionSource, ...]
    dist_tags: dict[str, str] = field(default_factory=dict)
    maintainers: tuple[dict[str, str], ...] = ()
    created: str | None = None
    modified: str | None = None
    origin: str = ""  # where it comes from (`origins.registry_origin`, `origins.storage_origin`)


@dataclass(frozen=True)
class Skipped:
    entry: str  # name@version, a lockfile path, a storage folder...
    reason: str
    error: bool = False  # a failure (unreachable, 401/404, integrity mismatch), not a choice
    not_applicable: bool = False  # not a registry package at all (a workspace, file:, link:, git)

    def __str__(self) -> str:
        return f"{self.entry}: {self.reason}"

    @property
    def kind(self) -> str:
        return "failed" if self.error else "not applicable" if self.not_applicable else "skipped"


@dataclass
class Summary:
    """The final report of one import run."""

    imported: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)
    # Dependencies the imported packages' `latest` versions need and this registry cannot
    # satisfy: what `registry-gen verify` reports as dependency-missing.
    unresolved: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Skipped]:
        return [s for s in self.skipped if s.error]

    def line(self) -> str:
        counts = {kind: sum(1 for s in self.skipped if s.kind == kind) for kind in ("skipped", "not applicable", "failed")}
        text = f"imported {len(self.imported)}, already present {len(self.present)}, skipped {counts['skipped']}"
        text += f", not applicable {counts['not applicable']}" if counts["not applicable"] else ""
        text += f", failed {counts['failed']}" if counts["failed"] else ""
        text += f", accounts {len(self.accounts)}" if self.accounts else ""
        return text + (f"; not closed: {len(self.unresolved)} dependencies missing" if self.unresolved else "")
