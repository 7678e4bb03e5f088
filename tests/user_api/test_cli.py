"""`registry-gen user add/list`, through a Typer app the way registry_gen.cli will plug it in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from registry_gen.settings import Settings, load_settings
from tests.user_api.conftest import FAST_HASHER, tmp_settings
from user_api import cli
from user_api import store as user_store
from user_api.store import open_user_store


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def app(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    """A root app like registry_gen's, settings pointing at a temp data dir, cheap hashing."""
    root = typer.Typer()

    @root.callback()
    def main() -> None:
        """registry-gen"""

    calls: list[Any] = []

    def load(config_file: Path | str | None = None) -> Settings:
        calls.append(config_file)
        return tmp_settings(data_dir.parent, data_dir=data_dir)

    # The CLI imports the store when a command runs (start-up stays light), so it is patched at home.
    monkeypatch.setattr(user_store, "open_user_store", lambda settings: open_user_store(settings, hasher=FAST_HASHER))
    cli.register(root, load)
    root.calls = calls  # type: ignore[attr-defined]
    return root


def _store(data_dir: Path) -> Any:
    return open_user_store(tmp_settings(data_dir.parent, data_dir=data_dir), hasher=FAST_HASHER)


def test_add_admin_with_password_from_stdin(app: typer.Typer, data_dir: Path) -> None:
    result = CliRunner().invoke(app, ["user", "add", "root", "--admin", "--email", "root@example.org",
                                      "--password-stdin"], input="s3cret-admin-pw\n")
    assert result.exit_code == 0, result.output
    assert "created admin root" in result.output
    assert "s3cret-admin-pw" not in result.output
    store = _store(data_dir)
    try:
        user = store.verify_password("root", "s3cret-admin-pw")
        assert user is not None and user.role == "admin" and user.email == "root@example.org"
        assert store.verify_password("root", "s3cret-admin-pw\n") is None  # the newline is not part of it
    finally:
        store.close()


def test_add_prompts_twice_without_echo(app: typer.Typer, data_dir: Path) -> None:
    result = CliRunner().invoke(app, ["user", "add", "alice", "--full-name", "Alice A"],
                                input="prompted-pw-1\nprompted-pw-1\n")
    assert result.exit_code == 0, result.output
    assert "prompted-pw-1" not in result.output
    store = _store(data_dir)
    try:
        user = store.verify_password("alice", "prompted-pw-1")
        assert user is not None and user.role == "user" and user.full_name == "Alice A"
    finally:
        store.close()


def test_add_prompt_mismatch_retries(app: typer.Typer) -> None:
    result = CliRunner().invoke(app, ["user", "add", "bob"], input="first-pw-1\nother-pw-2\nfinal-pw-3\nfinal-pw-3\n")
    assert result.exit_code == 0, result.output


def test_add_refuses_bad_fields_and_taken_names(app: typer.Typer) -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["user", "add", "Bad Name", "--password-stdin"], input="short\n")
    assert bad.exit_code == 1
    assert "username" in bad.output and "password" in bad.output
    ok = runner.invoke(app, ["user", "add", "carol", "--password-stdin"], input="carol-password\n")
    assert ok.exit_code == 0
    taken = runner.invoke(app, ["user", "add", "carol", "--password-stdin"], input="carol-password\n")
    assert taken.exit_code == 1 and "taken" in taken.output


def test_list(app: typer.Typer) -> None:
    runner = CliRunner()
    for name in ("dave", "erin"):
        runner.invoke(app, ["user", "add", name, "--password-stdin"], input="password-123\n")
    result = runner.invoke(app, ["user", "list"])
    assert result.exit_code == 0
    lines = result.output.strip().splitlines()
    assert [line.split()[1] for line in lines[:2]] == ["dave", "erin"]
    assert lines[-1] == "2 of 2 users"


def test_config_option_reaches_the_settings_loader(app: typer.Typer, tmp_path: Path) -> None:
    CliRunner().invoke(app, ["user", "list", "--config", str(tmp_path / "registry.yaml")])
    assert app.calls == [tmp_path / "registry.yaml"]  # type: ignore[attr-defined]


def test_config_errors_exit_1(tmp_path: Path) -> None:
    root = typer.Typer()

    @root.callback()
    def main() -> None:
        """registry-gen"""

    cli.register(root, load_settings)
    result = CliRunner().invoke(root, ["user", "list", "--config", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 1 and "config file not found" in result.output


def test_database_url_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = typer.Typer()

    @root.callback()
    def main() -> None:
        """registry-gen"""

    cli.register(root, load_settings)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REGISTRY_DATABASE_URL", "mysql://nope")
    result = CliRunner().invoke(root, ["user", "list"])
    assert result.exit_code == 1 and "postgresql://" in result.output


def test_the_real_registry_gen_user_add_command(tmp_path: Path) -> None:
    """The installed `registry-gen` entry point, not a stand-in app: its plugin must register `user`."""
    import os
    import subprocess
    import sys

    (tmp_path / "registry.yaml").write_text("data_dir: state\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    command = [sys.executable, "-m", "registry_gen", "user", "add", "realroot", "--admin", "--password-stdin"]
    done = subprocess.run(command, cwd=tmp_path, env=env, input="real-cli-password-1\n", capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "created admin realroot" in done.stdout and "real-cli-password-1" not in done.stdout + done.stderr
    store = _store(tmp_path / "state")
    try:
        user = store.verify_password("realroot", "real-cli-password-1")
        assert user is not None and user.role == "admin"
    finally:
        store.close()
    again = subprocess.run(command, cwd=tmp_path, env=env, input="real-cli-password-1\n", capture_output=True,
                           text=True, timeout=120)
    assert again.returncode != 0 and "Traceback" not in again.stdout + again.stderr
