"""A process that builds keeps its databases open between builds (registry_gen.heldopen): a
publish's close does not checkpoint and delete the WAL, and a state deleted or replaced under
the held connection loses nothing of the new one."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from registry_gen.state import heldopen
from registry_gen.build import run_build
from registry_gen.state.sqlite_manifests import CACHE_FILE
from registry_gen.settings import Settings
from tests.support import make_tarball


def _wal(path: Path) -> Path:
    return Path(str(path) + "-wal")


def _packages_seen_afresh(state_file: Path) -> set[str]:
    """What another process reads from the state: only what SQLite really keeps for the file."""
    code = "import sqlite3, sys; print('\\n'.join(r[0] for r in sqlite3.connect(sys.argv[1]).execute('SELECT name FROM packages')))"
    out = subprocess.run([sys.executable, "-c", code, str(state_file)], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_a_build_leaves_its_commits_in_the_wal_and_another_process_reads_them(settings: Settings) -> None:
    make_tarball(settings.content_dir, "first", "1.0.0")
    run_build(settings)
    archive = make_tarball(settings.content_dir, "second", "1.0.0")
    run_build(settings, changed=[archive])
    # Without a held connection the build's close was the last: it checkpointed and deleted these.
    assert _wal(settings.state_file).stat().st_size > 0
    assert _wal(settings.state_file.parent / CACHE_FILE).is_file()
    assert _packages_seen_afresh(settings.state_file) == {"first", "second"}


def test_a_state_deleted_under_the_held_connection_keeps_the_new_ones_commits(settings: Settings) -> None:
    make_tarball(settings.content_dir, "first", "1.0.0")
    run_build(settings)
    shutil.rmtree(settings.state_file.parent)  # an operator starts the state again while a server runs
    make_tarball(settings.content_dir, "second", "1.0.0")
    result = run_build(settings)  # a new file under the same name: the old held connection is closed
    assert sorted(result.rebuilt_packages) == ["first", "second"]
    assert _packages_seen_afresh(settings.state_file) == {"first", "second"}
    assert not run_build(settings).rebuilt_packages  # this process still reads the same state


def test_releasing_every_held_connection_checkpoints_and_removes_the_wal(settings: Settings) -> None:
    make_tarball(settings.content_dir, "first", "1.0.0")
    run_build(settings)
    heldopen.release(settings.state_file)
    assert not _wal(settings.state_file).exists()  # as a one-shot CLI build leaves it at exit
    with sqlite3.connect(settings.state_file) as db:
        assert [r[0] for r in db.execute("SELECT name FROM packages")] == ["first"]


def test_a_build_that_grew_the_wal_past_its_bound_cuts_it(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    # A full build at 1M versions writes GBs in one transaction: the held connection must not keep them on disk.
    make_tarball(settings.content_dir, "first", "1.0.0")
    run_build(settings)
    assert _wal(settings.state_file).stat().st_size > 0  # a small build's WAL is kept for the next
    monkeypatch.setattr(heldopen, "WAL_KEPT_AT_MOST", 0)
    archive = make_tarball(settings.content_dir, "second", "1.0.0")
    run_build(settings, changed=[archive])
    assert _wal(settings.state_file).stat().st_size == 0
    assert _packages_seen_afresh(settings.state_file) == {"first", "second"}
