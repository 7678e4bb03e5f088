"""Groups in the user store (issue 27): the store's calls on SQLite and PostgreSQL, the removal of
an account taking its groups, and the move of today's `data/groups.sqlite3` into the store, made
by the code of `main` before the move (tests/user_api/main_before_groups.py) and opened by this
code, also by several processes at once."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_gen.settings import Settings
from tests.user_api.conftest import FAST_HASHER, tmp_settings
from tests.user_api.main_before_groups import cli_before_groups_moved
from user_api.store_postgres import SCHEMA_VERSION as POSTGRES_SCHEMA
from user_api.store_sqlite import SCHEMA_VERSION as SQLITE_SCHEMA
from user_api.errors import InvalidFields, UserNotFound
from user_api.store import UserStore, open_user_store

# ---- the store's calls -------------------------------------------------------------------------


def _group_rows(store: UserStore) -> set[tuple[str, str]]:
    """(username, group) of every row of the table, whoever it belongs to."""
    with store.dialect.read() as tx:  # type: ignore[attr-defined]
        rows = tx.all("SELECT u.username, g.name FROM account_groups g JOIN users u ON u.pk = g.user_pk")
    return {(str(user), str(group)) for user, group in rows}


def test_groups_are_changed_in_one_call_and_stay_with_the_account(store: UserStore) -> None:
    alice = store.create_user("alice", "pw-alice-1")
    assert store.groups_of(alice.id) == frozenset()
    assert store.change_groups(alice.id, add=["group-a", "group-b"]) == {"group-a", "group-b"}
    assert store.change_groups(alice.id, add=["group-a", "ops.1"], remove=["group-b", "never-had"]) == {"group-a", "ops.1"}
    store.update_user(alice.id, username="alicia")  # kept by account, not by name
    store.update_user(alice.id, status="disabled")
    assert store.groups_of(alice.id) == {"group-a", "ops.1"}
    assert store.change_groups(alice.id) == {"group-a", "ops.1"}  # nothing asked: the groups as they are


def test_a_bad_group_name_or_an_unknown_account_changes_nothing(store: UserStore) -> None:
    alice = store.create_user("alice", "pw-alice-1")
    with pytest.raises(InvalidFields) as caught:
        store.change_groups(alice.id, add=["fine", "Not Fine"], remove=["-dash"])
    assert [problem.pointer for problem in caught.value.errors] == ["#/add/1", "#/remove/0"]
    assert store.groups_of(alice.id) == frozenset()
    for unknown in (str(uuid.uuid4()), "not-an-id"):
        with pytest.raises(UserNotFound):
            store.change_groups(unknown, add=["fine"])
        assert store.groups_of(unknown) == frozenset()


def test_removing_an_account_removes_its_groups(store: UserStore) -> None:
    alice, bob = store.create_user("alice", "pw-alice-1"), store.create_user("bob", "pw-bob-1")
    store.change_groups(alice.id, add=["group-a", "group-b"])
    store.change_groups(bob.id, add=["group-a"])
    assert store.delete_user(alice.id)
    assert _group_rows(store) == {("bob", "group-a")}  # the tombstone keeps its row, not its groups
    with pytest.raises(UserNotFound):
        store.change_groups(alice.id, add=["group-a"])
    with store.dialect.write() as tx:  # type: ignore[attr-defined]
        tx.run("DELETE FROM users WHERE id = ?", (bob.id,))  # a row removed outright: the foreign key's cascade
    assert _group_rows(store) == set()


# ---- today's layout, moved in --------------------------------------------------------------------


@dataclass
class OldLayout:
    """A registry folder as `main` before the move leaves it, and what its groups file holds."""

    root: Path
    settings: Settings
    ids: dict[str, str]  # username -> account id
    rows: list[tuple[str, str]]  # the groups file: (account id, group), sorted
    stray: str  # an account id the store never had (a host's file outliving an account)


def _old_layout(root: Path, database_url: str | None, groups: dict[str, list[str]]) -> OldLayout:
    """Accounts alice, bob, carol (removed after her groups were set: the old code kept them) made by
    the old code's own CLI, their groups, and one row naming an account that does not exist."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "registry.yaml").write_text("data_dir: data\n" + (f"database_url: '{database_url}'\n" if database_url else ""))
    ids = {}
    for name in ("alice", "bob", "carol"):
        made = cli_before_groups_moved(root, "user", "add", name, "--password-stdin", stdin=f"pw-{name}-1\n")
        ids[name] = re.search(r"\(id ([0-9a-f-]+)\)", made.stdout).group(1)  # type: ignore[union-attr]
    for name, names in groups.items():
        cli_before_groups_moved(root, "groups", name, *(arg for group in names for arg in ("--add", group)))
    cli_before_groups_moved(root, "user", "remove", "carol", "--yes")
    stray = str(uuid.uuid4())
    with sqlite3.connect(root / "data" / "groups.sqlite3") as db:
        db.execute("INSERT INTO account_groups VALUES (?, 'group-a')", (stray,))
    db.close()
    settings = tmp_settings(root, data_dir=root / "data", database_url=database_url)
    return OldLayout(root, settings, ids, _file_rows(root / "data" / "groups.sqlite3"), stray)


def _file_rows(path: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return sorted(db.execute("SELECT user_id, name FROM account_groups").fetchall())
    finally:
        db.close()


def _schema_version(store: UserStore) -> int:
    with store.dialect.read() as tx:  # type: ignore[attr-defined]
        if store.dialect.name == "sqlite":  # type: ignore[attr-defined]
            return int(tx.one("PRAGMA user_version")[0])
        return int(tx.one("SELECT max(version) FROM user_api_schema")[0])


def _new_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """This code's `registry-gen ARGS`, run in `root` (its registry.yaml)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("REGISTRY_")}
    return subprocess.run([sys.executable, "-m", "registry_gen", *args], capture_output=True, text=True, cwd=root,
                          env=env, timeout=120)  # fmt: skip


def _database_url(kind: str, request: pytest.FixtureRequest) -> str | None:
    return None if kind == "sqlite" else request.getfixturevalue("pg_store_settings").database_url


GROUPS = {"alice": ["group-a", "group-b"], "bob": ["group-a"], "carol": ["group-c"]}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_todays_groups_file_moves_into_the_store_and_nothing_is_lost(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    old = _old_layout(tmp_path / "registry", _database_url(kind, request), GROUPS)
    data = old.root / "data"
    first = _new_cli(old.root, "groups", "alice")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "alice: group-a, group-b\n"
    warnings = [line for line in first.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "2 group memberships name no account" in warnings[0]
    assert old.ids["carol"] in warnings[0] and old.stray in warnings[0] and "groups.sqlite3.migrated" in warnings[0]
    assert sum("moved 3 group memberships of 2 accounts" in line for line in first.stderr.splitlines()) == 1
    assert not (data / "groups.sqlite3").exists()
    assert _file_rows(data / "groups.sqlite3.migrated") == old.rows  # every row kept, the unknown ones too
    store = open_user_store(old.settings, hasher=FAST_HASHER)
    try:
        assert _schema_version(store) == (SQLITE_SCHEMA if kind == "sqlite" else POSTGRES_SCHEMA)  # the latest step
        assert {name: set(store.groups_of(old.ids[name])) for name in old.ids} == {
            "alice": {"group-a", "group-b"}, "bob": {"group-a"}, "carol": set()}
        assert store.verify_password("alice", "pw-alice-1") and store.verify_password("bob", "pw-bob-1")
        assert store.get_by_username("carol") is None
    finally:
        store.close()
    again = _new_cli(old.root, "groups", "bob")
    assert again.returncode == 0 and again.stdout == "bob: group-a\n"
    assert "into the user store" not in again.stderr and "WARNING" not in again.stderr  # read once


def test_a_groups_file_put_back_moves_in_again_and_the_first_copy_is_kept(tmp_path: Path) -> None:
    """A restored backup of the old file is moved in too; no earlier `.migrated` is overwritten."""
    old = _old_layout(tmp_path / "registry", None, {"alice": ["group-a"]})
    data = old.root / "data"
    assert _new_cli(old.root, "groups", "alice", "--remove", "group-a").stdout == "alice: (no groups)\n"
    (data / "groups.sqlite3").write_bytes((data / "groups.sqlite3.migrated").read_bytes())
    assert _new_cli(old.root, "groups", "alice").stdout == "alice: group-a\n"
    assert _file_rows(data / "groups.sqlite3.migrated") == _file_rows(data / "groups.sqlite3.migrated.1") == old.rows


def test_each_hosts_groups_file_moves_into_the_shared_postgresql(tmp_path: Path, pg_store_settings: Settings) -> None:
    """Before the move, two API hosts on one PostgreSQL each had their own groups; both files move in."""
    url = pg_store_settings.database_url
    first = _old_layout(tmp_path / "host-a", url, {"alice": ["group-a"]})
    (tmp_path / "host-b").mkdir()
    (tmp_path / "host-b" / "registry.yaml").write_text(f"data_dir: data\ndatabase_url: '{url}'\n")
    cli_before_groups_moved(tmp_path / "host-b", "groups", "alice", "--add", "group-b")
    cli_before_groups_moved(tmp_path / "host-b", "groups", "bob", "--add", "group-b")
    for host in ("host-a", "host-b"):
        assert _new_cli(tmp_path / host, "user", "list").returncode == 0
        assert (tmp_path / host / "data" / "groups.sqlite3.migrated").exists()
    store = open_user_store(first.settings, hasher=FAST_HASHER)
    try:
        assert store.groups_of(first.ids["alice"]) == {"group-a", "group-b"}
        assert store.groups_of(first.ids["bob"]) == {"group-b"}
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_processes_starting_together_move_the_file_once(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    old = _old_layout(tmp_path / "registry", _database_url(kind, request), GROUPS)
    env = {key: value for key, value in os.environ.items() if not key.startswith("REGISTRY_")}
    started = [
        subprocess.Popen([sys.executable, "-m", "registry_gen", "groups", "alice"], cwd=old.root, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        for _ in range(4)
    ]
    outcomes = [process.communicate(timeout=120) for process in started]
    assert [process.returncode for process in started] == [0] * 4, outcomes
    assert [out for out, _ in outcomes] == ["alice: group-a, group-b\n"] * 4
    assert sum("moved 3 group memberships" in err for _, err in outcomes) == 1
    assert sum("name no account" in err for _, err in outcomes) == 1
    assert sorted(path.name for path in (old.root / "data").iterdir() if path.name.startswith("groups")) == [
        "groups.sqlite3.migrated"]


def test_the_groups_command_says_a_mistake_in_one_line_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from registry_gen.cli import main as registry_gen

    config = tmp_path / "registry.yaml"
    config.write_text(f"data_dir: {tmp_path / 'data'}\n")
    store = open_user_store(tmp_settings(tmp_path, data_dir=tmp_path / "data"), hasher=FAST_HASHER)
    try:
        alice = store.create_user("alice", "pw-alice-1")
        store.change_groups(alice.id, add=["group-a"])
    finally:
        store.close()
    capsys.readouterr()
    for args, said in (
        (["alice", "--add", "group-b", "--add", "Group B"], "error: group 'Group B': use 1-64 lowercase letters"),
        (["zed", "--add", "group-b"], "error: groups: no account named 'zed'"),
    ):
        assert registry_gen(["groups", *args, "-c", str(config)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(said) and err.count("\n") == 1, err
    assert registry_gen(["groups", "alice", "-c", str(config)]) == 0
    assert capsys.readouterr().out == "alice: group-a\n"


def test_a_groups_file_that_cannot_be_read_or_renamed_stops_the_start_and_is_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left in place after its rows moved in, the file would be moved in again at every start,
    bringing back the groups removed since: the start stops with one clear error instead."""
    from registry_gen.errors import ConfigError
    from user_api import groups

    old = _old_layout(tmp_path / "registry", None, {"alice": ["group-a"]})
    legacy = old.root / "data" / "groups.sqlite3"

    def refused(source: object, target: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(groups.os, "replace", refused)
    with pytest.raises(ConfigError, match=r"groups\.sqlite3: its groups are in the user store now, but it could not be renamed"):
        open_user_store(old.settings, hasher=FAST_HASHER)
    monkeypatch.undo()
    assert _file_rows(legacy) == old.rows
    store = open_user_store(old.settings, hasher=FAST_HASHER)
    store.close()
    assert not legacy.exists() and _file_rows(legacy.with_name("groups.sqlite3.migrated")) == old.rows
    legacy.write_bytes(b"not a database, whatever it was")
    with pytest.raises(ConfigError, match=r"groups\.sqlite3: cannot read the groups kept there by an earlier release"):
        open_user_store(old.settings, hasher=FAST_HASHER)
    assert legacy.read_bytes() == b"not a database, whatever it was"
