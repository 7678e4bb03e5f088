"""Moves the build state of a tree built by an earlier version (OUT/.registry-gen/) out of the tree.

The state was kept inside the tree, so a plain static host (`python -m http.server -d public`)
served it: the state databases, the names and errors of refused archives. It now lives beside the
tree (`Settings.state_folder`). The first build under the build lock moves it: one rename, atomic
on one filesystem (a copy, then a rename, then removing the old folder across filesystems), so
the ledger (registry_gen.state.sqlite_ledger: what a build cannot redo) is either in
the old place or in the new one, never lost. When both exist (an old tree copied over a migrated
one), the old folder is kept inside the new one under a dated name and a line says so.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from pathlib import Path

from registry_gen.layout import LEGACY_STATE_FOLDER
from registry_gen.settings import Settings

log = logging.getLogger(__name__)


def move_state_out_of_tree(settings: Settings) -> Path | None:
    """Where an old in-tree state went (None: there was none). Call with the build lock held."""
    legacy = settings.out_dir / LEGACY_STATE_FOLDER
    if not legacy.is_dir():
        return None
    target = settings.state_folder
    if target.exists():
        kept = target / time.strftime("from-tree-%Y%m%dT%H%M%SZ", time.gmtime())
        _move(legacy, kept)
        log.warning(
            "%s held an older build state while %s exists: kept it as %s (its first-seen times are not merged; "
            "see docs/reference/tree.md)", legacy, target, kept
        )
        return kept
    _move(legacy, target)
    log.warning("moved the build state out of the tree: %s -> %s (deploy %s as it is)", legacy, target, settings.out_dir)
    return target


def _move(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(source, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    # Another filesystem: a complete copy under a temporary name, renamed into place, and only
    # then the source removed; an interruption leaves the source whole.
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial, symlinks=True)
    os.rename(partial, target)
    shutil.rmtree(source)
