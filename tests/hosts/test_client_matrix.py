"""Issue 6: every client installs from every host, then reinstalls from its lockfile alone.

A cell: fresh cache, add an unscoped package that depends on a scoped and an unscoped one (plus
the scoped one directly), run it, then delete node_modules, start another empty cache and
install from the lockfile (npm ci, pnpm --frozen-lockfile, yarn --frozen-lockfile/--immutable).
The compatibility table (docs/compatibility.md) lists these cells; a cell known to fail is marked here with
xfail(strict=True) and the reason the page gives.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.hosts.clients import CLIENTS, ClientRun
from tests.hosts.conftest import HOST_FIXTURES, CellPackages, Host

pytestmark = pytest.mark.slow

# (client, host) -> reason, for cells the page says fail. None at present.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}


def _cells() -> list[object]:
    cells = []
    for host in HOST_FIXTURES:
        for client in CLIENTS:
            marks = []
            if (client, host) in KNOWN_FAILURES:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[client, host]))
            cells.append(pytest.param(client, host, id=f"{client}-{host}", marks=marks))
    return cells


def _assert_installed(project: Path, cell: CellPackages) -> None:
    for name in cell.direct:
        assert (project / "node_modules" / name / "package.json").is_file(), f"{name} not installed"
    # The script's output names the transitive dependency's version (pnpm does not hoist it).
    run = subprocess.run(["node", "-e", cell.script], cwd=project, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == cell.expected_output


def _assert_lockfile_names_the_registry(client: ClientRun, lockfile: str, host: Host, cell: CellPackages) -> None:
    for name in (*cell.direct, cell.transitive):
        assert name in lockfile, f"{name} missing from {client.spec.lockfile}"
    if client.spec.kind in ("npm", "yarn1"):
        # These record each tarball's URL: it must be this host's, with a literal slash for scopes.
        scope, bare = cell.direct[1].split("/")
        assert f"{host.registry}{scope}/{bare}/-/{bare}-1.0.0.tgz" in lockfile
    if client.spec.kind in ("npm", "pnpm"):
        assert "sha512-" in lockfile  # dist.integrity went into the lockfile


@pytest.mark.parametrize(("client_name", "host_name"), _cells())
def test_install_then_reinstall_from_lockfile(
    client_name: str, host_name: str, request: pytest.FixtureRequest, make_client, tmp_path: Path,
    cell_content: tuple[Path, CellPackages],
) -> None:  # fmt: skip
    host: Host = request.getfixturevalue(HOST_FIXTURES[host_name])
    cell = cell_content[1]
    client: ClientRun = make_client(client_name, host.registry)
    project = client.new_project(tmp_path / "project")

    client.add(project, *cell.direct)
    _assert_installed(project, cell)
    lockfile = (project / client.spec.lockfile).read_text()
    _assert_lockfile_names_the_registry(client, lockfile, host, cell)

    shutil.rmtree(project / "node_modules")
    client.fresh_cache()
    client.install_frozen(project)
    _assert_installed(project, cell)
    assert (project / client.spec.lockfile).read_text() == lockfile, "the lockfile changed on a frozen install"
