"""The yarn 1 step of the docs' "Moving in" page (issue 31), run as written with the real yarn 1: a
yarn.lock made against the public registry keeps yarn 1 on the public registry's `resolved` URLs
whatever registry is configured; after the page's `sed` line it installs from this registry
alone, checksums and all. The public registry is stood in for by a proxy that refuses everything,
so the test is the same with or without a network."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.settings import Settings
from tests.hosts.clients import CLIENTS, ClientRun, install_client
from tests.support import make_tarball, recording_static_server, refusing_proxy

pytestmark = pytest.mark.slow

MOVING_IN = Path(__file__).resolve().parents[2] / "docs" / "moving-in.md"
PAGE_URL = "https://npm.example.com/"
PUBLIC = "https://registry.yarnpkg.com/"


def documented_rewrite(base: str) -> list[str]:
    """The page's yarn 1 command, for a registry at `base` instead of its example URL."""
    found = re.search(r"`(sed -i '[^`]*' yarn\.lock)`", MOVING_IN.read_text(encoding="utf-8"))
    assert found, "docs/moving-in.md: no `sed -i '…' yarn.lock` step for yarn 1"
    return shlex.split(found.group(1).replace(PAGE_URL, base))


def tarballs(asked: list[str]) -> list[str]:
    return sorted(path for path in asked if path.endswith(".tgz"))


def test_yarn1_installs_from_here_once_the_lockfile_names_this_registry(tmp_path: Path) -> None:
    content = tmp_path / "content"
    make_tarball(content, "leaf-a", "1.0.0")
    make_tarball(content, "@team/leaf-b", "2.0.0", dependencies={"leaf-a": "^1.0.0"})
    yarn = install_client(CLIENTS["yarn1"])
    with recording_static_server(tmp_path / "public") as (base, asked), refusing_proxy() as (proxy, outside):
        assert run_build(Settings(content_dir=content, out_dir=tmp_path / "public", base_url=base)).errors == []
        client = ClientRun(CLIENTS["yarn1"], yarn, tmp_path / "yarn", base)
        project = client.new_project(tmp_path / "project")
        client.add(project, "@team/leaf-b")
        lockfile = project / "yarn.lock"
        # What `yarn add` against the public registry wrote (imported archives keep their bytes).
        lockfile.write_text(lockfile.read_text().replace(base, PUBLIC))
        with open(project / ".yarnrc", "a") as rc:
            rc.write(f'https-proxy "{proxy}"\n')  # the public registry: unreachable, but seen asked for
        shutil.rmtree(project / "node_modules")
        client.fresh_cache()
        asked.clear()
        refused = client.run("install", "--frozen-lockfile", "--non-interactive", cwd=project, check=False)
        assert refused.returncode != 0
        assert any("CONNECT registry.yarnpkg.com:443" in line for line in outside), outside
        assert tarballs(asked) == []  # the configured registry was not asked for a single tarball

        subprocess.run(documented_rewrite(base), cwd=project, check=True, timeout=60)
        assert PUBLIC not in lockfile.read_text() and lockfile.read_text().count(base) == 2
        outside.clear()
        client.fresh_cache()
        client.run("install", "--frozen-lockfile", "--non-interactive", cwd=project)
    assert tarballs(asked) == ["/@team/leaf-b/-/leaf-b-2.0.0.tgz", "/leaf-a/-/leaf-a-1.0.0.tgz"]
    assert outside == []
    assert (project / "node_modules" / "@team" / "leaf-b" / "package.json").is_file()
    assert (project / "node_modules" / "leaf-a" / "index.js").read_text() == 'module.exports = "leaf-a@1.0.0";\n'
