"""`registry-gen user remove|disable|enable|passwd|promote|demote|tokens`: the real CLI app
(registry_gen.cli.create_cli, with the user plugin its entry point loads) against a real store,
on SQLite and PostgreSQL; and the same actions on the API (`/user/{id}/tokens`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from registry_gen.cli import create_cli
from registry_gen.settings import Settings
from tests.user_api.conftest import FAST_HASHER, Api
from user_api import store as store_module
from user_api.store import UserStore, open_user_store

ROOT_PW = "root-password-1"
ALICE_PW = "alice-password-1"


@pytest.fixture
def setup(store_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[typer.Typer, UserStore]]:
    """The real CLI app, a registry.yaml naming the store, and that store with root (admin) and alice."""
    config = tmp_path / "registry.yaml"
    # content/ and the tree live in tmp_path: `user remove` rewrites metas that name the account.
    config.write_text(f"data_dir: {store_settings.data_dir}\ncontent_dir: {tmp_path / 'content'}\nout_dir: {tmp_path / 'public'}\n")
    if store_settings.database_url:
        monkeypatch.setenv("REGISTRY_DATABASE_URL", store_settings.database_url)
    monkeypatch.setenv("REGISTRY_GEN_CONFIG", str(config))
    # The CLI imports the store when a command runs (start-up stays small): patch it where it lives.
    monkeypatch.setattr(store_module, "open_user_store", lambda settings: open_user_store(settings, hasher=FAST_HASHER))
    store = open_user_store(store_settings, hasher=FAST_HASHER)
    store.create_user("root", ROOT_PW, "root@example.org", None, "admin")
    store.create_user("alice", ALICE_PW, "alice@example.org", "Alice", "user")
    yield create_cli(), store
    store.close()


def invoke(app: typer.Typer, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin)


def test_disable_revokes_every_token_and_enable_lets_the_user_back(setup: tuple[typer.Typer, UserStore]) -> None:
    app, store = setup
    token, _ = store.create_token(store.get_by_username("alice").id)  # type: ignore[union-attr]
    store.create_token(store.get_by_username("alice").id)  # type: ignore[union-attr]
    done = invoke(app, "user", "disable", "alice")
    assert done.exit_code == 0 and "disabled alice (2 tokens revoked)" in done.output, done.output
    assert store.authenticate(token) is None
    assert store.verify_password("alice", ALICE_PW) is None  # a disabled account cannot log in
    assert "already disabled" in invoke(app, "user", "disable", "alice").output
    assert invoke(app, "user", "enable", "alice").exit_code == 0
    assert store.verify_password("alice", ALICE_PW) is not None
    assert store.authenticate(token) is None  # enabling does not bring old sessions back


def test_passwd_reads_stdin_and_ends_sessions(setup: tuple[typer.Typer, UserStore]) -> None:
    app, store = setup
    token, _ = store.create_token(store.get_by_username("alice").id)  # type: ignore[union-attr]
    done = invoke(app, "user", "passwd", "alice", "--password-stdin", stdin="a-new-password-2\n")
    assert done.exit_code == 0 and "1 token revoked" in done.output, done.output
    assert "a-new-password-2" not in done.output
    assert store.verify_password("alice", ALICE_PW) is None
    assert store.verify_password("alice", "a-new-password-2") is not None
    assert store.authenticate(token) is None
    short = invoke(app, "user", "passwd", "alice", "--password-stdin", stdin="short\n")
    assert short.exit_code == 1 and "password" in short.output and "Traceback" not in short.output


def test_promote_and_demote_keep_one_admin(setup: tuple[typer.Typer, UserStore]) -> None:
    app, store = setup
    assert "promoted alice" in invoke(app, "user", "promote", "alice").output
    assert store.get_by_username("alice").role == "admin"  # type: ignore[union-attr]
    assert invoke(app, "user", "demote", "root").exit_code == 0
    last = invoke(app, "user", "demote", "alice")
    assert last.exit_code == 1 and "without an active administrator" in last.output
    assert store.get_by_username("alice").role == "admin"  # type: ignore[union-attr]


def test_remove_asks_unless_yes_and_keeps_the_name(setup: tuple[typer.Typer, UserStore]) -> None:
    app, store = setup
    declined = invoke(app, "user", "remove", "alice", stdin="n\n")
    assert declined.exit_code == 1 and store.get_by_username("alice").status == "active"  # type: ignore[union-attr]
    assert "removed alice" in invoke(app, "user", "remove", "alice", stdin="y\n").output
    assert store.verify_password("alice", ALICE_PW) is None
    gone = invoke(app, "user", "disable", "alice")
    assert gone.exit_code == 1 and "no user named 'alice'" in gone.output
    taken = invoke(app, "user", "add", "alice", "--password-stdin", stdin="another-password-3\n")
    assert taken.exit_code == 1  # the name stays reserved: packages name maintainers by it


def test_remove_erases_the_accounts_email_from_package_metas(setup: tuple[typer.Typer, UserStore], tmp_path: Path) -> None:
    app, _ = setup
    meta = tmp_path / "content" / "left-behind" / "registry-meta.json"
    meta.parent.mkdir(parents=True)
    people = [{"name": "alice", "email": "alice@example.org"}, {"name": "bob", "email": "bob@example.org"}]
    meta.write_text(json.dumps({"name": "left-behind", "maintainers": people}))
    done = invoke(app, "user", "remove", "alice", "--yes")
    assert done.exit_code == 0 and "email erased from 1 package file" in done.output, done.output
    kept = json.loads(meta.read_text())["maintainers"]
    assert kept == [{"name": "alice"}, {"name": "bob", "email": "bob@example.org"}]


def test_tokens_list_and_revoke(setup: tuple[typer.Typer, UserStore]) -> None:
    app, store = setup
    alice = store.get_by_username("alice")
    assert alice is not None
    first, info = store.create_token(alice.id, description="laptop")
    second, _ = store.create_token(alice.id, readonly=True, description="ci")
    listed = invoke(app, "user", "tokens", "list", "alice")
    assert listed.exit_code == 0 and "laptop" in listed.output and "read-only" in listed.output
    assert "2 tokens of alice" in listed.output and first not in listed.output and second not in listed.output
    npm_key = info.key.replace("-", "")  # as `npm token list` shows it
    assert "revoked 1 token of alice" in invoke(app, "user", "tokens", "revoke", "alice", npm_key).output
    assert store.authenticate(first) is None and store.authenticate(second) is not None
    missing = invoke(app, "user", "tokens", "revoke", "alice", npm_key)
    assert missing.exit_code == 1 and "no token with key" in missing.output
    assert invoke(app, "user", "tokens", "revoke", "alice").exit_code == 2  # neither KEY nor --all
    assert "revoked 1 token of alice" in invoke(app, "user", "tokens", "revoke", "alice", "--all").output
    assert store.authenticate(second) is None


def test_api_tokens_of_a_user(api: Api) -> None:
    root, root_token = api.make_user("root", role="admin")
    alice, alice_token = api.make_user("alice")
    bob, bob_token = api.make_user("bob")
    listed = api.get(f"/user/{alice.id}/tokens", token=alice_token, status=200).json["content"]
    assert [item["readonly"] for item in listed] == [False] and alice_token not in str(listed)
    assert api.get(f"/user/{alice.id}/tokens", token=root_token, status=200).json == {"content": listed}
    api.get(f"/user/{alice.id}/tokens", token=bob_token, status=403)
    api.get(f"/user/{alice.id}/tokens", status=401)
    xml = api.get(f"/user/{alice.id}/tokens", token=root_token, headers={"Accept": "application/xml"}, status=200)
    assert b"<tokens><content><token>" in xml.body
    api.delete(f"/user/{alice.id}/tokens/{listed[0]['key']}", token=bob_token, status=403)
    api.delete(f"/user/{alice.id}/tokens/{listed[0]['key']}", token=root_token, status=204)
    api.get("/user", token=alice_token, status=401)  # that was alice's only token
    api.delete(f"/user/{alice.id}/tokens/{listed[0]['key']}", token=root_token, status=404)
    api.delete(f"/user/{bob.id}/tokens", token=bob_token, status=204)  # a user may end all their own sessions
    api.get("/user", token=bob_token, status=401)
    api.get("/user", token=root_token, status=200)


def test_api_disable_by_an_admin_revokes_the_tokens(api: Api) -> None:
    """`user disable` over HTTP is an update of the user's status (AUTH.md, "Admin actions")."""
    root, root_token = api.make_user("root", role="admin")
    alice, alice_token = api.make_user("alice", email="alice@example.org")
    view = api.get(f"/user/{alice.id}", token=root_token, status=200).json
    body = {k: view[k] for k in ("id", "username", "email", "role")} | {"status": "disabled"}
    api.put("/user", body, token=root_token, status=200)
    api.get("/user", token=alice_token, status=401)
    assert api.store.list_tokens(alice.id) == []


def test_account_commands_print_their_own_line_and_no_log_line(tmp_path: Path) -> None:
    """`user add` and `user remove` each say what they did once: the store's INFO lines ("user
    created: id=…", "user deleted: id=…"), meant for the server's log, stayed on stderr beside them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "registry_gen", *args], cwd=tmp_path, env=env, input=stdin,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    assert cli("init", "--base-url", "http://127.0.0.1:9/", ".").returncode == 0
    added = cli("user", "add", "bob", "--password-stdin", stdin="bob-password-1\nbob-password-1\n")
    removed = cli("user", "remove", "bob", "--yes")
    assert added.returncode == 0 and "created user bob" in added.stdout, added.stderr
    assert removed.returncode == 0 and "removed bob" in removed.stdout, removed.stderr
    assert "INFO" not in added.stderr + removed.stderr, added.stderr + removed.stderr
