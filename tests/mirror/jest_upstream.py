"""A real upstream for the mirror tests: Verdaccio 6.8.0 holding `jest@29`'s whole tree.

Filled once (it needs the network): a Verdaccio proxying registry.npmjs.org takes one cold
`jest@29` install with each client the tests use, which leaves every document and tarball of the
tree in its storage. The storage and what each client installed (from its own lockfile: the exact
set the upstream gives) are kept in ~/.cache/registry-gen-tests/, so later runs serve that storage
with a Verdaccio that has no uplink at all: no network.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock

from registry_gen.importers.lockfiles import parse_lockfile
from tests.hosts.clients import CLIENTS, ClientRun, install_client
from tests.importers.verdaccio import CACHE, verdaccio_server
from tests.realworld.corpus import cache_root

PUBLIC_REGISTRY = "https://registry.npmjs.org/"
SPEC = "jest@29"
JEST_CLIENTS = ("npm11", "pnpm", "yarn1")
FOLDER = CACHE / "mirror-jest29-v1"  # storage/, expected.json, .complete (written last)


def clients_dir() -> Path:
    return cache_root() / "clients"


def client_run(name: str, workdir: Path, registry: str) -> ClientRun:
    """One client, isolated in `workdir`, pointed at `registry`; whole-tree installs take a while."""
    spec = CLIENTS[name]
    run = ClientRun(spec, install_client(spec, clients_dir()), workdir, registry)
    run.timeout = 900
    return run


def installed_set(run: ClientRun, project: Path) -> list[str]:
    """name@version of every registry package the client's lockfile resolved."""
    lockfile = project / run.spec.lockfile
    parsed = parse_lockfile(lockfile.name, lockfile.read_bytes())
    return sorted({f"{entry.name}@{entry.version}" for entry in parsed.entries})


def install_jest(run: ClientRun, project: Path) -> list[str]:
    """A cold `jest@29` install into a new project; returns what the client resolved."""
    run.new_project(project)
    run.disable_release_age_gate(project)  # pnpm: the same versions whatever day the storage was filled
    run.add(project, SPEC)
    return installed_set(run, project)


def jest_upstream() -> tuple[Path, dict[str, list[str]]]:
    """(a Verdaccio storage folder holding jest@29's tree, {client: the set it installs from it})."""
    with FileLock(str(CACHE / ".mirror-jest29.lock"), timeout=1800):
        if not (FOLDER / ".complete").exists():
            _fill()
    return FOLDER / "storage", json.loads((FOLDER / "expected.json").read_text())


def _fill() -> None:
    shutil.rmtree(FOLDER, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="mirror-jest-fill-") as scratch:
        work = Path(scratch)
        expected = {}
        with verdaccio_server(work / "verdaccio", proxy=PUBLIC_REGISTRY) as url:
            for name in JEST_CLIENTS:
                expected[name] = install_jest(client_run(name, work / name, url), work / name / "project")
        FOLDER.mkdir(parents=True)
        shutil.copytree(work / "verdaccio" / "storage", FOLDER / "storage")
    (FOLDER / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    (FOLDER / ".complete").write_text("")
