"""Issue 6: npm 11, pnpm and yarn 4 log in and publish against `registry-gen serve` and against
nginx in front of `registry-gen api`, and what they publish installs at once from the same URL.

Each cell: create an account, log in with the client's own login command, publish a scoped
package, install it, publish a new version and install `@latest` again with the same client
cache: the new version must come back (no stale document anywhere: not in nginx, not in the
client's cache, acceptance 3).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.settings import Settings
from tests.hosts.clients import ClientRun
from tests.hosts.servers import api_process, free_port, nginx_server
from tests.registry_api.helpers import RegistryProcess, add_user

pytestmark = pytest.mark.slow
PUBLISHERS = ("npm11", "pnpm", "yarn4")


@dataclass(frozen=True)
class WritableRegistry:
    kind: str
    base: str
    out: Path


@pytest.fixture(scope="module")
def serve_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WritableRegistry]:
    process = RegistryProcess(tmp_path_factory.mktemp("serve")).start()
    try:
        yield WritableRegistry("serve", process.base, process.out)
    finally:
        process.stop()


@pytest.fixture(scope="module")
def nginx_api_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WritableRegistry]:
    """nginx (config from `registry-gen host-config nginx --api-upstream`) + `registry-gen api`."""
    root = tmp_path_factory.mktemp("nginx-api")
    nginx_port, api_port = free_port(), free_port()
    base = f"http://127.0.0.1:{nginx_port}/"
    config = root / "registry.yaml"
    config.write_text(
        f"content_dir: content\nout_dir: public\ndata_dir: data\nbase_url: {base}\nsignup: open\n"
    )
    settings = Settings(content_dir=root / "content", out_dir=root / "public", base_url=base, data_dir=root / "data")
    (root / "content").mkdir()
    run_build(settings)  # nginx needs the tree before the first publish
    with api_process(root, config, api_port):
        with nginx_server(root / "public", root / "nginx", nginx_port, api_upstream=f"127.0.0.1:{api_port}") as served:
            assert served == base
            yield WritableRegistry("nginx+api", base, root / "public")


REGISTRIES = {"serve": "serve_registry", "nginx+api": "nginx_api_registry"}


def _write_package(folder: Path, name: str, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"name": name, "version": version, "description": "published by the client matrix", "main": "index.js", "license": "MIT"}
    (folder / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (folder / "index.js").write_text(f"module.exports = {json.dumps(version)};\n")
    return folder


def _installed_version(project: Path, name: str) -> str:
    return str(json.loads((project / "node_modules" / name / "package.json").read_text())["version"])


def _served_document(base: str, name: str) -> dict[str, object]:
    with urllib.request.urlopen(base + name.replace("/", "%2f"), timeout=30) as reply:  # noqa: S310 - 127.0.0.1
        return json.loads(reply.read())  # type: ignore[no-any-return]


@pytest.mark.parametrize("registry_kind", list(REGISTRIES))
@pytest.mark.parametrize("client_name", PUBLISHERS)
def test_login_publish_and_install_at_once(
    client_name: str, registry_kind: str, request: pytest.FixtureRequest, make_client, tmp_path: Path
) -> None:
    registry: WritableRegistry = request.getfixturevalue(REGISTRIES[registry_kind])
    username = f"{client_name}-{registry_kind.replace('+', '-')}"
    password = f"{username}-password-1"
    add_user(registry.base, username, password)
    client: ClientRun = make_client(client_name, registry.base)
    work = tmp_path / "work"
    work.mkdir()
    client.login(username, password, work)
    assert username in client.whoami(work)

    name = f"@matrix/{username}"
    source = _write_package(tmp_path / "source", name, "1.0.0")
    client.publish(source)
    assert "1.0.0" in _served_document(registry.base, name)["versions"]  # type: ignore[operator]

    project = client.new_project(tmp_path / "project")
    client.disable_release_age_gate(project)  # measure staleness here; test_release_age.py covers the gates
    client.add(project, name)
    assert _installed_version(project, name) == "1.0.0"

    _write_package(source, name, "1.1.0")
    client.publish(source)
    assert _served_document(registry.base, name)["dist-tags"] == {"latest": "1.1.0"}  # the next GET already sees it
    client.add(project, f"{name}@latest")  # same project, same client cache
    assert _installed_version(project, name) == "1.1.0"
