"""Issue 14, acceptance 1 and 4: a real Verdaccio 6.8.0 loaded through real `npm adduser` and
`npm publish` (scoped packages, several versions, a custom dist-tag, a deprecation, two users);
`registry-gen import verdaccio` of its storage and htpasswd gives the same package documents, both
users log in with their Verdaccio passwords and the owner publishes; `export verdaccio` of the
imported tree is served by a real Verdaccio and npm installs the same bytes from it."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from registry_gen.cli import main as registry_gen
from registry_gen.names import escaped_name
from tests.hosts.clients import CLIENTS, ClientRun, install_client
from tests.importers.verdaccio import verdaccio_server
from tests.registry_api.helpers import RegistryProcess, write_package
from tests.support import Npm, drive_terminal

pytestmark = pytest.mark.slow
USERS = {"alice": "alice-Verdaccio-pw1", "bob": "bob-Verdaccio-pw2"}
PACKAGES = {"@acme/core": "alice", "@acme/util": "alice", "plain-widget": "bob"}
# What clients read from a version document (besides dist): compared field by field.
CLIENT_FIELDS = ("name", "version", "main", "dependencies", "bin", "deprecated", "description")


@dataclass
class LoadedVerdaccio:
    storage: Path
    htpasswd: Path
    documents: dict[str, dict[str, Any]]  # Verdaccio's own answers, fetched while it ran


def fetch_json(url: str) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310 - a test server on 127.0.0.1
        return json.loads(reply.read())


def adduser(npm: Npm, name: str, password: str, cwd: Path) -> None:
    """The real `npm adduser` (legacy prompts, as Verdaccio's htpasswd expects), on a terminal."""
    code, transcript = drive_terminal(
        ["npm", "adduser", "--auth-type=legacy", f"--registry={npm.registry}"], npm.env, cwd,
        [("Username", name), ("Password", password), ("Email", f"{name}@example.com")],
    )  # fmt: skip
    assert code == 0, transcript


def publish(npm: Npm, folder: Path, name: str, version: str, *args: str, **fields: Any) -> None:
    write_package(folder / f"{name.replace('/', '+')}-{version}", name, version, description=f"{name} for the import test", **fields)
    (folder / f"{name.replace('/', '+')}-{version}" / "README.md").write_text(f"# {name}\n\nVersion {version}.\n")
    npm.run("publish", "--access=public", *args, cwd=folder / f"{name.replace('/', '+')}-{version}")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoadedVerdaccio]:
    root = tmp_path_factory.mktemp("verdaccio-source")
    # Verdaccio 6 keeps no maintainers in storage: its config's `packages:` rules say who publishes.
    with verdaccio_server(root, publishers={"@acme/*": "alice", "plain-widget": "bob"}) as url:
        npms = {name: Npm(root / f"home-{name}", url) for name in USERS}
        for name, password in USERS.items():
            adduser(npms[name], name, password, root)
        alice, bob = npms["alice"], npms["bob"]
        work = root / "work"
        for version in ("1.0.0", "1.1.0", "2.0.0"):
            publish(alice, work, "@acme/core", version)
        publish(alice, work, "@acme/core", "3.0.0-beta.1", "--tag", "next")
        publish(alice, work, "@acme/util", "0.1.0", dependencies={"@acme/core": "^2.0.0"}, bin={"acme-util": "index.js"})
        for version in ("1.0.0", "1.0.1"):
            publish(bob, work, "plain-widget", version)
        alice.run("dist-tag", "add", "@acme/core@1.1.0", "stable", cwd=root)
        bob.run("deprecate", "plain-widget@1.0.0", "use 1.0.1: 1.0.0 leaks memory", cwd=root)
        documents = {name: fetch_json(url + escaped_name(name)) for name in PACKAGES}
    yield LoadedVerdaccio(root / "storage", root / "htpasswd", documents)


@pytest.fixture(scope="module")
def imported(loaded: LoadedVerdaccio, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A registry root (content/, public/, data/) after `import verdaccio --htpasswd`."""
    root = tmp_path_factory.mktemp("imported")
    config = root / "registry.yaml"
    config.write_text(f"content_dir: {root / 'content'}\nout_dir: {root / 'public'}\ndata_dir: {root / 'data'}\n")
    args = ["import", "verdaccio", str(loaded.storage), "--htpasswd", str(loaded.htpasswd), "--config", str(config)]
    assert registry_gen(args) == 0
    return root


def _version_view(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        version: {**{f: manifest.get(f) for f in CLIENT_FIELDS}, "integrity": manifest["dist"]["integrity"],
                  "shasum": manifest["dist"]["shasum"]}
        for version, manifest in doc["versions"].items()
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_imported_documents_equal_verdaccios_answers(loaded: LoadedVerdaccio, imported: Path, name: str) -> None:
    ours = json.loads((imported / "public" / name / "index.html").read_bytes())
    theirs = loaded.documents[name]
    assert _version_view(ours) == _version_view(theirs)
    assert ours["dist-tags"] == theirs["dist-tags"]
    assert ours["time"] == theirs["time"]
    assert {m["name"] for m in ours["maintainers"]} == {PACKAGES[name]}
    # The readme comes from the `latest` archive; Verdaccio shows the last published one (for
    # @acme/core that is 3.0.0-beta.1, published under `next`).
    latest = theirs["dist-tags"]["latest"]
    assert ours["readme"] == f"# {name}\n\nVersion {latest}.\n"
    if name != "@acme/core":
        assert ours["readme"] == theirs["readme"]


def test_custom_tag_prerelease_and_deprecation_survive(imported: Path) -> None:
    core = json.loads((imported / "public" / "@acme/core" / "index.html").read_bytes())
    assert core["dist-tags"] == {"latest": "2.0.0", "next": "3.0.0-beta.1", "stable": "1.1.0"}
    widget = json.loads((imported / "public" / "plain-widget" / "index.html").read_bytes())
    assert widget["versions"]["1.0.0"]["deprecated"] == "use 1.0.1: 1.0.0 leaks memory"
    assert "deprecated" not in widget["versions"]["1.0.1"]


def test_a_second_import_changes_nothing(loaded: LoadedVerdaccio, imported: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p: p.stat().st_mtime_ns for p in (imported / "content").rglob("*") if p.is_file()}
    config = imported / "registry.yaml"
    assert registry_gen(["import", "verdaccio", str(loaded.storage), "--config", str(config)]) == 0
    assert "imported 0, already present 7" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in (imported / "content").rglob("*") if p.is_file()} == before


def test_both_users_log_in_with_their_verdaccio_passwords_and_the_owner_publishes(imported: Path, tmp_path: Path) -> None:
    server = RegistryProcess(imported).start()
    try:
        npm_command = install_client(CLIENTS["npm11"])
        clients = {}
        for name, password in USERS.items():
            clients[name] = ClientRun(CLIENTS["npm11"], npm_command, tmp_path / name, server.base)
            clients[name].login(name, password, tmp_path)
            assert clients[name].whoami(tmp_path).strip() == name
        with sqlite3.connect(imported / "data" / "users.sqlite3") as db:
            hashes = dict(db.execute("SELECT username, password_hash FROM users"))
        assert all(hashes[name].startswith("$argon2id$") for name in USERS)  # re-hashed at the first login
        owned = write_package(tmp_path / "core-next", "@acme/core", "2.1.0")
        assert clients["alice"].publish(owned).returncode == 0
        assert "2.1.0" in server.packument("@acme/core")["versions"]
        refused = clients["bob"].run("publish", "--access=public", cwd=write_package(tmp_path / "core-bob", "@acme/core", "2.2.0"), check=False)
        assert refused.returncode != 0 and "2.2.0" not in server.packument("@acme/core")["versions"]
    finally:
        server.stop()


def test_export_is_served_by_verdaccio_with_the_same_integrity(imported: Path, tmp_path: Path) -> None:
    storage = tmp_path / "exported"
    assert registry_gen(["export", "verdaccio", str(storage), "--config", str(imported / "registry.yaml")]) == 0
    ours = json.loads((imported / "public" / "@acme/util" / "index.html").read_bytes())
    with verdaccio_server(tmp_path / "verdaccio", storage=storage) as url:
        served = fetch_json(url + escaped_name("@acme/core"))
        assert served["dist-tags"]["stable"] == "1.1.0"
        project = tmp_path / "project"
        project.mkdir()
        (project / "package.json").write_text(json.dumps({"name": "consumer", "version": "1.0.0", "private": True}))
        npm = Npm(tmp_path / "npm-home", url)
        npm.run("install", "@acme/util@0.1.0", cwd=project)
    lock = json.loads((project / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/@acme/util"]["integrity"] == ours["versions"]["0.1.0"]["dist"]["integrity"]
    core = json.loads((imported / "public" / "@acme/core" / "index.html").read_bytes())
    installed = lock["packages"]["node_modules/@acme/core"]
    assert installed["integrity"] == core["versions"][installed["version"]]["dist"]["integrity"]
