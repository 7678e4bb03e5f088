"""What in content/ counts: the one home of the scanning rules (used by build, check and watch).

Archives are `.tgz`, `.tar.gz` and `.zip` files; `registry-meta.json` holds a package's owners,
tags and times. Hidden names (dotfiles, dot folders) and the temp files of copy tools and
browsers are skipped, so a half-copied archive is never read.
"""

from __future__ import annotations

from typing import Final

from registry_gen.meta import META_FILENAME

ARCHIVE_SUFFIXES: Final = (".tgz", ".tar.gz", ".zip")
TEMP_SUFFIXES: Final = ("~", ".tmp", ".part", ".crdownload", ".partial")


def is_candidate(name: str) -> bool:
    """A file or folder name the scan looks at (not hidden, not a temp file)."""
    return not name.startswith(".") and not name.endswith(TEMP_SUFFIXES)


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def content_kind(name: str) -> str | None:
    """"archive", "meta" or None (a file the build ignores)."""
    if is_archive(name):
        return "archive"
    if name == META_FILENAME:
        return "meta"
    return None
