"""The user store: file modes, durability of revocations, sessions ended by a password change."""

from __future__ import annotations

import stat
from pathlib import Path

from registry_gen.settings import Settings
from tests.user_api.conftest import FAST_HASHER
from user_api.store import open_user_store


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_folder_and_database_files_are_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = open_user_store(Settings(data_dir=data), hasher=FAST_HASHER)
    try:
        store.create_user("mallory", "mallory-password")
        files = sorted(data.glob("users.sqlite3*"))
        assert {p.name for p in files} >= {"users.sqlite3", "users.sqlite3-wal"}
        assert _mode(data) == 0o700 and all(_mode(p) == 0o600 for p in files)
    finally:
        store.close()


def test_an_existing_world_readable_database_is_tightened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    open_user_store(Settings(data_dir=data), hasher=FAST_HASHER).close()
    data.chmod(0o755)
    (data / "users.sqlite3").chmod(0o644)
    open_user_store(Settings(data_dir=data), hasher=FAST_HASHER).close()
    assert _mode(data) == 0o700 and _mode(data / "users.sqlite3") == 0o600


def test_revocations_are_committed_with_synchronous_full(tmp_path: Path) -> None:
    store = open_user_store(Settings(data_dir=tmp_path / "data"), hasher=FAST_HASHER)
    try:
        assert store.dialect.pragma("synchronous") == 2  # FULL
    finally:
        store.close()


def test_a_password_change_revokes_every_token(tmp_path: Path) -> None:
    store = open_user_store(Settings(data_dir=tmp_path / "data"), hasher=FAST_HASHER)
    try:
        user = store.create_user("victim", "victim-password")
        stolen, _ = store.create_token(user.id)
        store.update_user(user.id, password="a-new-password-1")
        assert store.authenticate(stolen) is None and store.list_tokens(user.id) == []
    finally:
        store.close()
