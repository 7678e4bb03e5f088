"""What users see when a version is younger than a day: the `time` the registry publishes is
what pnpm 12 and yarn 4 judge by (both hold back versions under 1440 minutes old by default;
npm 11 has no default gate). RATIONALE.md §3 keeps those times truthful and stable.

`agegate-dep`: 1.0.0 published long ago (registry-meta.json), 1.1.0 "now" (the archive's mtime),
latest = 1.1.0. `@agegate/fresh`: a single version published now.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.clients import ClientRun
from tests.hosts.conftest import build_tree
from tests.support import make_tarball, static_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("release-age")
    content = root / "content"
    make_tarball(content / "agegate-dep", "agegate-dep", "1.0.0")
    make_tarball(content / "agegate-dep", "agegate-dep", "1.1.0")
    (content / "agegate-dep" / "registry-meta.json").write_text(
        json.dumps({"name": "agegate-dep", "time": {"1.0.0": "2021-01-01T00:00:00.000Z"}})
    )
    make_tarball(content / "fresh", "@agegate/fresh", "1.0.0")
    (root / "public").mkdir()
    with static_server(root / "public") as url:
        build_tree(content, root / "public", url)
        document = json.loads((root / "public/agegate-dep/index.html").read_bytes())
        assert document["dist-tags"]["latest"] == "1.1.0" and document["time"]["1.0.0"].startswith("2021-")
        yield url


def _version(project: Path, name: str) -> str:
    return str(json.loads((project / "node_modules" / name / "package.json").read_text())["version"])


def test_pnpm_installs_the_older_version_and_records_fresh_ones(registry: str, make_client, tmp_path: Path) -> None:
    client: ClientRun = make_client("pnpm", registry)
    project = client.new_project(tmp_path / "project")
    client.add(project, "agegate-dep")
    assert _version(project, "agegate-dep") == "1.0.0"  # latest (1.1.0) is too new: silently skipped
    added = client.add(project, "@agegate/fresh")  # nothing older: installed, and recorded as an exception
    assert _version(project, "@agegate/fresh") == "1.0.0"
    assert "minimumReleaseAgeExclude" in added.stdout
    assert "@agegate/fresh@1.0.0" in (project / "pnpm-workspace.yaml").read_text()


def test_yarn4_quarantines_fresh_versions(registry: str, make_client, tmp_path: Path) -> None:
    client: ClientRun = make_client("yarn4", registry)
    project = client.new_project(tmp_path / "project")
    client.add(project, "agegate-dep")
    assert _version(project, "agegate-dep") == "1.0.0"
    refused = client.run("add", "@agegate/fresh", cwd=project, check=False, env={"YARN_ENABLE_IMMUTABLE_INSTALLS": "false"})
    assert refused.returncode != 0
    assert "quarantined" in refused.stdout and "YN0016" in refused.stdout


def test_npm11_has_no_default_gate(registry: str, make_client, tmp_path: Path) -> None:
    client: ClientRun = make_client("npm11", registry)
    project = client.new_project(tmp_path / "project")
    client.add(project, "agegate-dep", "@agegate/fresh")
    assert _version(project, "agegate-dep") == "1.1.0"
    assert _version(project, "@agegate/fresh") == "1.0.0"
