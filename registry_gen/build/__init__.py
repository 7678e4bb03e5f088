"""The build: brings the tree (out_dir) up to date with content/. All of its I/O lives in this package.

Order of writes: tarballs, package documents, indexes and HTML, and the state last (one SQLite
transaction, see registry_gen.state), so a build that dies half-way is simply redone by the next one.

Cost model (see bench/ and bench/REPORT.md): a build stats every file of content/ (or only the
paths it is told changed), reopens only archives whose size or mtime changed, and touches only
the packages those archives (or meta files) belong to, plus the packages whose pages link to a
package that appeared or went. Big builds read archives and write packages in worker processes.

The phases, one module each: `detect` -> `read` -> `plan` -> `write` -> `indexes`, sequenced by `run`.
"""

from __future__ import annotations

from registry_gen.build.detect import PathSpool, scan_content
from registry_gen.build.results import BuildIssue, BuildResult, NameLog, PathLog
from registry_gen.build.run import build_lock, build_locked, run_build
from registry_gen.build.write import ABBREVIATED_FILE, PACKUMENT_FILE
from registry_gen.state.records import ArchiveRecord


__all__ = [
    "ABBREVIATED_FILE",
    "PACKUMENT_FILE",
    "ArchiveRecord",
    "BuildIssue",
    "BuildResult",
    "NameLog",
    "PathLog",
    "PathSpool",
    "build_lock",
    "build_locked",
    "run_build",
    "scan_content",
]
