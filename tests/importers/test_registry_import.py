"""Issue 14, acceptance 2 and 3, against the real npm registry (whatever `npm config get registry`
names) and real clients: `import registry` keeps real publish times, so pnpm 12 and yarn 4 install
with their default release-age gates; `import lockfile` of a real project's lockfile (npm, pnpm,
yarn berry) lets the frozen install run against this registry alone."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen.cli import main as registry_gen
from registry_gen.importers.lockfiles import parse_lockfile
from registry_gen.importers.model import iso_time
from registry_gen.importers.run import default_registry
from registry_gen.importers.upstream import document_url
from tests.hosts.clients import CLIENTS, ClientRun, install_client
from tests.importers.test_verdaccio_import import fetch_json
from tests.importers.verdaccio import CACHE
from tests.registry_api.helpers import RegistryProcess

pytestmark = pytest.mark.slow
# Small packages without dependencies (one scoped), named by tag, range and exact version.
SPECS = ("is-number@7.0.0", "ms@^2.1.0", "@isaacs/string-locale-compare@latest")
NAMES = ("is-number", "ms", "@isaacs/string-locale-compare")
# A real small project: a package with a dependency, and a scoped one.
PROJECT_DEPENDENCIES = {"debug": "4.3.4", "@isaacs/string-locale-compare": "1.1.0"}
LOCKFILES_CACHE = CACHE / "lockfiles"


def make_root(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "registry"
    root.mkdir()
    config = root / "registry.yaml"
    config.write_text(f"content_dir: {root / 'content'}\nout_dir: {root / 'public'}\ndata_dir: {root / 'data'}\n")
    return root, config


@pytest.fixture(scope="module")
def upstream() -> str:
    return default_registry()


@pytest.fixture(scope="module")
def registry_import(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    root, config = make_root(tmp_path_factory.mktemp("registry-import"))
    assert registry_gen(["import", "registry", *SPECS, "--config", str(config)]) == 0
    yield root, config


@pytest.mark.parametrize("name", NAMES)
def test_import_registry_keeps_the_upstream_times_tags_and_integrity(registry_import: tuple[Path, Path], upstream: str, name: str) -> None:
    root, _ = registry_import
    ours = json.loads((root / "public" / name / "index.html").read_bytes())
    theirs = fetch_json(document_url(upstream, name))
    (version,) = ours["versions"]
    assert iso_time(ours["time"][version]) == iso_time(theirs["time"][version]) == ours["time"][version]
    if "created" in theirs["time"]:
        assert ours["time"]["created"] == iso_time(theirs["time"]["created"])
    assert ours["versions"][version]["dist"]["integrity"] == theirs["versions"][version]["dist"]["integrity"]
    assert ours["dist-tags"]["latest"] == version


def test_import_registry_twice_imports_nothing_new(registry_import: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, config = registry_import
    assert registry_gen(["import", "registry", *SPECS, "--config", str(config)]) == 0
    assert "imported 0, already present 3, skipped 0" in capsys.readouterr().out


def test_all_versions_takes_the_whole_history_with_its_times(tmp_path: Path, upstream: str) -> None:
    root, config = make_root(tmp_path)
    name = "@isaacs/string-locale-compare"
    assert registry_gen(["import", "registry", name, "--all-versions", "--config", str(config)]) == 0
    theirs = fetch_json(document_url(upstream, name))
    ours = json.loads((root / "public" / name / "index.html").read_bytes())
    assert set(ours["versions"]) == set(theirs["versions"]) and len(ours["versions"]) > 1
    assert {v: ours["time"][v] for v in ours["versions"]} == {v: iso_time(theirs["time"][v]) for v in theirs["versions"]}
    assert ours["dist-tags"] == theirs["dist-tags"]


def test_unknown_package_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, config = make_root(tmp_path)
    assert registry_gen(["import", "registry", "registry-gen-no-such-package-x9", "--config", str(config)]) == 1
    out, err = capsys.readouterr()
    assert "failed: registry-gen-no-such-package-x9:" in err and "404" in err
    assert out.strip() == "imported 0, already present 0, skipped 0, failed 1"


@pytest.mark.parametrize("client", ["pnpm", "yarn4"])
def test_clients_install_imported_packages_with_their_default_age_gate(registry_import: tuple[Path, Path], tmp_path: Path, client: str) -> None:
    root, _ = registry_import
    server = RegistryProcess(root).start()
    try:
        run = ClientRun(CLIENTS[client], install_client(CLIENTS[client]), tmp_path / "client", server.base)
        project = run.new_project(tmp_path / "project")
        run.add(project, *NAMES)
    finally:
        server.stop()
    workspace = project / "pnpm-workspace.yaml"
    assert not workspace.exists() or "minimumReleaseAgeExclude" not in workspace.read_text()
    assert (project / "node_modules" / "@isaacs" / "string-locale-compare" / "package.json").is_file()


# ---------------------------------------------------------------- lockfiles


def real_lockfile(client: str, upstream: str, folder: Path) -> Path:
    """A real project's lockfile, written by the client against the real registry (cached)."""
    spec = CLIENTS[client]
    # Keyed by the upstream URL: npm's lockfile names it in every `resolved`.
    cached = LOCKFILES_CACHE / hashlib.sha256(upstream.encode()).hexdigest()[:12] / client / spec.lockfile
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps({"name": "moving-in", "version": "1.0.0", "private": True,
                                                      "dependencies": PROJECT_DEPENDENCIES}))  # fmt: skip
    if not cached.is_file():
        run = ClientRun(spec, install_client(spec), folder.parent / f"{client}-upstream", upstream)
        run.configure(folder)
        if client == "npm11":
            run.run("install", "--package-lock-only", cwd=folder)
        elif client == "pnpm":
            run.run("install", "--lockfile-only", cwd=folder)
        elif client == "yarn1":
            run.run("install", "--non-interactive", "--no-progress", "--ignore-scripts", cwd=folder)
        else:
            run.run("install", "--mode=update-lockfile", cwd=folder, env={"YARN_ENABLE_IMMUTABLE_INSTALLS": "false"})
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / spec.lockfile, cached)
    for extra in (".npmrc", ".yarnrc", ".yarnrc.yml"):
        (folder / extra).unlink(missing_ok=True)
    shutil.copyfile(cached, folder / spec.lockfile)
    return folder / spec.lockfile


def test_real_lockfiles_of_every_client_parse_to_the_same_packages(upstream: str, tmp_path: Path) -> None:
    found = {}
    for client in ("npm11", "pnpm", "yarn1", "yarn4"):
        lockfile = real_lockfile(client, upstream, tmp_path / client)
        parsed = parse_lockfile(lockfile.name, lockfile.read_bytes())
        assert parsed.skipped == ()
        found[client] = {(e.name, e.version) for e in parsed.entries}
    assert ("ms", "2.1.2") in found["npm11"] and ("@isaacs/string-locale-compare", "1.1.0") in found["npm11"]
    assert found["npm11"] == found["pnpm"] == found["yarn1"] == found["yarn4"]


@pytest.mark.parametrize("client", ["npm11", "pnpm", "yarn4"])
def test_frozen_install_of_an_imported_lockfile_from_this_registry_alone(upstream: str, tmp_path: Path, client: str) -> None:
    lockfile = real_lockfile(client, upstream, tmp_path / "project")
    root, config = make_root(tmp_path)
    assert registry_gen(["import", "lockfile", str(lockfile), "--config", str(config)]) == 0
    assert (root / "content" / "ms").is_dir() and (root / "content" / "debug" / "registry-meta.json").is_file()
    server = RegistryProcess(root).start()
    try:
        run = ClientRun(CLIENTS[client], install_client(CLIENTS[client]), tmp_path / "client", server.base)
        run.configure(lockfile.parent)
        if client == "npm11":
            # The lock names the upstream tarball URLs: a team points npm at its registry for all of them.
            with open(lockfile.parent / ".npmrc", "a") as rc:
                rc.write("replace-registry-host=always\n")
        # Any request that is not for 127.0.0.1 goes to a closed port: only this registry can answer.
        dead = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1",
                "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9", "no_proxy": "127.0.0.1"}  # fmt: skip
        proc = run.run(*_frozen_args(client), cwd=lockfile.parent, env=dead)
    finally:
        server.stop()
    assert proc.returncode == 0
    assert (lockfile.parent / "node_modules" / "debug" / "package.json").is_file()
    assert (lockfile.parent / "node_modules" / "@isaacs" / "string-locale-compare" / "package.json").is_file()


def _frozen_args(client: str) -> list[str]:
    return {"npm11": ["ci"], "pnpm": ["install", "--frozen-lockfile"], "yarn4": ["install", "--immutable"]}[client]
