"""Issue 26, "Owners lose their rights on upgrade": a registry made by the previous release (b384b22,
maintainers were rights by name), opened by today's code.

The previous release runs for real (its own venv, built from this repository's history by
old_release.py): its `registry-gen serve`, with real npm 11 signing up, publishing, tagging and
adding an owner. Then today's `serve` opens the same folder on the same address. Before
`registry-gen owner bind-recorded`, the old owner's publish with its old token is refused; after it,
accepted. The account created after the package's first publish is held back and listed, and only
`owner claim` binds it. Times, dist-tags and tokens are kept. On SQLite (where the backup is a file
copy) the rollback docs/operating/upgrades.md describes is exercised: the previous release refuses the migrated
user database, and with the backup restored it reads and builds the upgraded content/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.hosts.clients import CLIENTS, install_client
from tests.hosts.servers import free_port
from tests.registry_api.helpers import RegistryProcess, http, write_package
from tests.support import Npm, drive_terminal
from tests.upgrade.old_release import old_cli, old_release_python

NOT_BOUND = "is not bound to your account"


@dataclass
class OldRegistry:
    """A registry folder as the previous release left it, and the npm homes holding its tokens."""

    root: Path
    port: int
    python: str  # the previous release's interpreter
    npms: dict[str, Npm]
    documents: dict[str, dict[str, Any]]  # as the previous release served them


def npm_adduser(command: list[str], server: RegistryProcess, name: str) -> Npm:
    """The real `npm adduser` (legacy prompts) against `server`; the token lands in the npm home."""
    npm = Npm(server.root / "homes" / name, server.base, command)
    code, transcript = drive_terminal(
        [*command, "adduser", "--auth-type=legacy"], npm.env, server.root,
        [("Username", name), ("Password", f"{name}-password-1"), ("Email", f"{name}@example.com")],
    )  # fmt: skip
    assert code == 0, transcript
    return npm


def publish(npm: Npm, root: Path, name: str, version: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    folder = write_package(root / "work" / f"{name}-{version}", name, version)
    return npm.run("publish", cwd=folder, check=check)


def make_old_registry(root: Path, database_url: str | None) -> OldRegistry:
    """olduser signs up and publishes upg-pkg (two versions, a `stable` tag); lateuser signs up after
    that first publish, is added as an owner by name, and publishes late-pkg of their own."""
    python = old_release_python()
    root.mkdir(parents=True)
    (root / "registry.yaml").write_text("signup: open\n" + (f"database_url: '{database_url}'\n" if database_url else ""))
    npm11 = install_client(CLIENTS["npm11"])
    assert Npm(root / "probe", "http://127.0.0.1:9/", npm11).run("--version", cwd=root).stdout.startswith("11.")
    server = RegistryProcess(root, python=python, port=free_port()).start()
    try:
        old = npm_adduser(npm11, server, "olduser")
        publish(old, root, "upg-pkg", "1.0.0")
        publish(old, root, "upg-pkg", "1.1.0")
        old.run("dist-tag", "add", "upg-pkg@1.0.0", "stable", cwd=root)
        late = npm_adduser(npm11, server, "lateuser")
        old.run("owner", "add", "lateuser", "upg-pkg", cwd=root)
        publish(late, root, "late-pkg", "1.0.0")
        documents = {name: http("GET", server.base + name).json for name in ("upg-pkg", "late-pkg")}
    finally:
        server.stop()
    assert (root / "public" / ".registry-gen").is_dir()  # the previous release's state, inside the tree
    return OldRegistry(root, server.port, python, {"olduser": old, "lateuser": late}, documents)


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Today's `registry-gen ARGS` on the registry's own registry.yaml."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("REGISTRY_")}
    return subprocess.run([sys.executable, "-m", "registry_gen", *args, "--config", str(root / "registry.yaml")],
                          capture_output=True, text=True, cwd=root, env=env, timeout=300)  # fmt: skip


def assert_kept(old: OldRegistry, base: str) -> None:
    """Times, dist-tags and maintainers as the previous release served them; its tokens still log in."""
    for name, before in old.documents.items():
        now = http("GET", base + name).json
        assert {v: now["time"][v] for v in before["versions"]} == {v: before["time"][v] for v in before["versions"]}
        assert now["time"]["created"] == before["time"]["created"]
        assert now["maintainers"] == before["maintainers"]  # the account id is never shown
    assert http("GET", base + "upg-pkg").json["dist-tags"]["stable"] == "1.0.0"
    for user, npm in old.npms.items():
        assert npm.run("whoami", cwd=old.root).stdout.strip() == user


def bind_recorded(root: Path) -> list[str]:
    dry = cli(root, "owner", "bind-recorded", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would bind: olduser as a maintainer of upg-pkg" in dry.stdout
    assert "account" not in (root / "content" / "upg-pkg" / "registry-meta.json").read_text()  # a dry run writes nothing
    done = cli(root, "owner", "bind-recorded")
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_owners_publish_again_once_the_recorded_names_are_bound(tmp_path: Path, database_url: str | None) -> None:
    old = make_old_registry(tmp_path / "registry", database_url)
    root, owner, late = old.root, old.npms["olduser"], old.npms["lateuser"]
    if database_url is None:
        shutil.copytree(root / "data", tmp_path / "backup-data")  # docs/operating/upgrades.md: back up first
    else:
        assert not (root / "data" / "users.sqlite3").exists()  # the accounts are in PostgreSQL
    server = RegistryProcess(root, port=old.port).start()  # today's code, the same address
    try:
        assert "owner bind-recorded" in "".join(server.output)  # every start says what is left to run
        assert not (root / "public" / ".registry-gen").exists() and (root / "public.state").is_dir()
        assert_kept(old, server.base)
        refused = publish(owner, root, "upg-pkg", "1.2.0", check=False)
        assert refused.returncode != 0 and NOT_BOUND in refused.stderr  # before the migration

        lines = bind_recorded(root)
        assert [line.split(" (")[0] for line in lines[:-1]] == [
            "bound: lateuser as a maintainer of late-pkg",
            "bound: olduser as a maintainer of upg-pkg",
            "held back: lateuser as a maintainer of upg-pkg",
        ]
        assert "after the package's first publish" in lines[2] and "owner claim upg-pkg lateuser" in lines[2]
        assert lines[-1].startswith("bound 2, held back 1")

        publish(owner, root, "upg-pkg", "1.2.0")  # after it: accepted, with the old token
        publish(late, root, "late-pkg", "1.1.0")
        held = publish(late, root, "upg-pkg", "1.3.0", check=False)
        assert held.returncode != 0 and NOT_BOUND in held.stderr  # held back until an admin says so
        assert cli(root, "owner", "claim", "upg-pkg", "lateuser").returncode == 0
        publish(late, root, "upg-pkg", "1.3.0")
        assert_kept(old, server.base)
        again = cli(root, "owner", "bind-recorded")
        assert again.returncode == 1 and "no upgrade from a release before bindings is pending" in again.stderr  # once
        forced = cli(root, "owner", "bind-recorded", "--force").stdout
        assert "bound 0, held back 0 (of 0 names" in forced  # and never rebinds what is bound
    finally:
        server.stop()
    restarted = RegistryProcess(root, port=old.port).start()
    restarted.stop()
    assert "owner bind-recorded" not in "".join(restarted.output)  # the step is done
    if database_url is None:
        assert_rolls_back(old, tmp_path / "backup-data")


def assert_rolls_back(old: OldRegistry, backup: Path) -> None:
    """docs/operating/upgrades.md, rolling back: the previous release refuses the migrated database; with the
    backup restored it reads today's content/ (versions published since the upgrade included)."""
    refused = old_cli(old.python, old.root, "user", "list")
    assert refused.returncode != 0 and "newer version" in refused.stderr
    shutil.rmtree(old.root / "data")
    shutil.copytree(backup, old.root / "data")
    listed = old_cli(old.python, old.root, "user", "list")
    assert listed.returncode == 0 and "olduser" in listed.stdout and "lateuser" in listed.stdout
    built = old_cli(old.python, old.root, "build")
    assert built.returncode == 0, built.stderr
    abbreviated = json.loads((old.root / "public" / "upg-pkg" / "abbreviated.json").read_text())
    assert {"1.0.0", "1.1.0", "1.2.0", "1.3.0"} <= set(abbreviated["versions"])
    assert old_cli(old.python, old.root, "verify", "public").returncode == 0
