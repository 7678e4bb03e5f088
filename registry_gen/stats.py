"""`registry-gen stats ACCESS_LOG…` (I/O, orchestrator): folds access logs into download counts
(registry_gen.downloads, pure) remembered between runs (registry_gen.state.sqlite_downloads), and
writes each package's `-/web/package/<name>/downloads.json` into the tree, which its page reads.
No rebuild: the files sit in the package's site folder (so the read rules that guard the page
guard them too, and removing the package removes them); the build does not touch them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final
from urllib.parse import urlsplit

from registry_gen.build import build_lock
from registry_gen.downloads import MAX_LINE, Fold, Tarball, fold_lines, package_downloads
from registry_gen.state.sqlite_downloads import DownloadCounts
from registry_gen.errors import ConfigError, unreadable_file
from registry_gen.settings import Settings
from registry_gen.site import DOWNLOADS_FILE, package_folder
from registry_gen.writer import write_if_changed

GZIP_MAGIC: Final = b"\x1f\x8b"


@dataclass
class LogReport:
    path: Path
    fold: Fold
    already: bool  # nothing new: every complete line was folded by an earlier run


@dataclass
class StatsReport:
    logs: list[LogReport] = field(default_factory=list)
    packages_written: int = 0
    packages_with_downloads: int = 0
    last_day: str | None = None


class LogLines:
    """A log's complete lines from a byte offset, each at most MAX_LINE bytes (a longer one is
    None); `consumed` counts the bytes read up to the last complete line (a line still being
    written is left for the next run)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.consumed = 0

    def __iter__(self) -> Iterator[str | None]:
        while chunk := self.stream.readline(MAX_LINE + 1):
            if chunk.endswith(b"\n"):
                self.consumed += len(chunk)
                yield chunk.decode("utf-8", errors="replace")
            elif len(chunk) <= MAX_LINE:
                return
            else:
                rest = self._rest_of_line()
                if rest is None:
                    return
                self.consumed += len(chunk) + rest
                yield None

    def _rest_of_line(self) -> int | None:
        skipped = 0
        while more := self.stream.readline(MAX_LINE + 1):
            skipped += len(more)
            if more.endswith(b"\n"):
                return skipped
        return None


def open_log(path: Path) -> BinaryIO:
    """The log's text as bytes: gzip-compressed logs (a rotation's `access.log.2.gz`) decompressed."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except OSError as exc:
        raise unreadable_file(path, exc, "an access log", "no such access log") from None
    if raw.read(2) == GZIP_MAGIC:
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    raw.seek(0)
    return raw


def identity_of(stream: BinaryIO) -> str | None:
    """A log's identity: the digest of its first line (None: no complete first line yet)."""
    first = stream.readline(MAX_LINE + 1)
    stream.seek(0)
    if not first.endswith(b"\n"):
        return None
    return hashlib.sha256(first).hexdigest()


def fold_log(settings: Settings, store: DownloadCounts, path: Path) -> LogReport:
    base_path = urlsplit(settings.base_url).path or "/"

    def known(tarball: Tarball) -> bool:
        return (settings.out_dir / tarball.name / "-" / tarball.filename).is_file()

    with open_log(path) as stream:
        try:
            identity = identity_of(stream)
            if identity is None:
                return LogReport(path, Fold(), already=True)
            offset = store.offset(identity)
            stream.seek(offset)
            lines = LogLines(stream)
            fold = fold_lines(lines, base_path, known)
        except (OSError, EOFError) as exc:  # a damaged gzip member, an unreadable disk block
            raise ConfigError(f"{path}: cannot be read to its end ({exc}); nothing of it was counted") from None
        if lines.consumed:
            store.record(identity, offset + lines.consumed, str(path), fold.counts)
        return LogReport(path, fold, already=not lines.consumed)


def write_package_files(settings: Settings, store: DownloadCounts, report: StatsReport) -> None:
    """Every package with downloads, its file (rewritten only when it changed), if the tree
    still has the package's page."""
    report.last_day = store.last_day()
    if report.last_day is None:
        return
    for name, days in store.packages():
        folder = settings.out_dir / package_folder(name)
        report.packages_with_downloads += 1
        if not (folder / "index.html").is_file():
            continue
        data = json.dumps(package_downloads(name, days, report.last_day), separators=(",", ":")).encode("utf-8")
        report.packages_written += write_if_changed(folder / DOWNLOADS_FILE, data)


def run_stats(settings: Settings, logs: list[Path]) -> StatsReport:
    """Folds `logs` (in order), then writes the packages' files, under the build lock (a build
    removing a package meanwhile does not get its folder back)."""
    report = StatsReport()
    with DownloadCounts(settings.state_folder) as store:
        for path in logs:
            report.logs.append(fold_log(settings, store, path))
        with build_lock(settings):
            write_package_files(settings, store, report)
    return report
