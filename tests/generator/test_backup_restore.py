"""docs/operating/backups.md: what it says to copy is enough. A registry with hand-dropped archives
(their publish times are first-seen times, the one thing a build cannot redo), a meta file and an
account written while the store's connection is still open is backed up as README says, restored
into an empty folder, built again: the same package documents, times included, and the account."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

from registry_gen.build import run_build
from registry_gen.layout import STATE_DATABASE
from registry_gen.settings import Settings
from tests.registry_api.helpers import tarball
from user_api.store import open_user_store

DOCUMENTS = ("alpha/index.html", "alpha/abbreviated.json", "beta/index.html", "-/package/beta/dist-tags")


def _settings(root: Path) -> Settings:
    return Settings(content_dir=root / "content", out_dir=root / "public", data_dir=root / "data",
                    base_url="http://127.0.0.1:9/")


def _registry(root: Path) -> Settings:
    for name, version, when in (("alpha", "1.0.0", 1_600_000_000), ("alpha", "1.1.0", 1_700_000_000), ("beta", "2.0.0", 1_650_000_000)):
        archive = root / "content" / name / f"{name}-{version}.tgz"
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.write_bytes(tarball(name, version))
        os.utime(archive, (when, when))
    (root / "content" / "beta" / "registry-meta.json").write_text(json.dumps({"dist-tags": {"latest": "2.0.0", "next": "2.0.0"}}))
    return _settings(root)


def _sqlite_backup(source: Path, target: Path) -> None:
    """The backups page's way for a SQLite store: the online backup, which takes what still sits in the WAL."""
    target.parent.mkdir(parents=True, exist_ok=True)
    source_db, copy = sqlite3.connect(source), sqlite3.connect(target)
    try:
        source_db.backup(copy)
    finally:
        source_db.close()
        copy.close()


def _backup(live: Settings, backups: Path) -> None:
    """The backups page's table, row by row."""
    shutil.copytree(live.content_dir, backups / "content", ignore=shutil.ignore_patterns(".*"))
    _sqlite_backup(live.data_dir / "users.sqlite3", backups / "data" / "users.sqlite3")
    _sqlite_backup(live.state_folder / "ledger.sqlite3", backups / "public.state" / "ledger.sqlite3")


def test_a_restore_from_the_documented_backup_gives_the_same_registry(tmp_path: Path) -> None:
    live = _registry(tmp_path / "live")
    run_build(live)
    for archive in live.content_dir.rglob("*.tgz"):  # content/ once copied without its times: the
        os.utime(archive, (1_800_000_000, 1_800_000_000))  # published times stay the first-seen ones
    run_build(live)
    store = open_user_store(live)
    try:
        store.create_user("ada", "correct horse battery", "ada@example.com")
        assert (live.data_dir / "users.sqlite3-wal").is_file()  # the account may sit in the WAL only
        assert (live.state_folder / "ledger.sqlite3-wal").is_file()  # so may the ledger's last build
        _backup(live, tmp_path / "backups")
    finally:
        store.close()

    restored_root = tmp_path / "restored"
    shutil.copytree(tmp_path / "backups", restored_root)
    restored = _settings(restored_root)
    run_build(restored)

    assert (restored.state_folder / STATE_DATABASE).is_file()  # rebuilt, not restored
    for document in DOCUMENTS:
        assert (restored.out_dir / document).read_bytes() == (live.out_dir / document).read_bytes(), document
    times = json.loads((restored.out_dir / "alpha" / "index.html").read_bytes())["time"]
    assert {"1.0.0", "1.1.0"} <= times.keys()
    restored_store = open_user_store(restored)
    try:
        user = restored_store.get_by_username("ada")
        assert user is not None and user.email == "ada@example.com"
    finally:
        restored_store.close()
