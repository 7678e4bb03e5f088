"""Hosts and clients shared by the host tests: one tree per host for the whole session."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.cli import main as registry_gen
from registry_gen.settings import Settings
from tests.hosts.clients import CLIENTS, ClientRun, install_client
from tests.hosts.servers import aws_test_credentials, free_port, moto_server, nginx_server
from tests.support import make_tarball, static_server

REPO = Path(__file__).resolve().parents[2]
DEMO_CONTENT = REPO / "content"
BUCKET = "registry"


@dataclass(frozen=True)
class CellPackages:
    """What one matrix cell installs: an unscoped package that depends on a scoped one and on an
    unscoped one, plus the scoped one directly; `script` prints `expected_output` once installed."""

    direct: tuple[str, ...]
    transitive: str
    transitive_version: str
    script: str
    expected_output: str


DEMO_CELL = CellPackages(
    direct=("demo-greeter", "@demo/strings"),
    transitive="demo-core",
    transitive_version="1.2.0",
    script="console.log(require('demo-greeter').greet('matrix'))",
    expected_output="Hello, Matrix (demo-core 1.2.0)",
)
FIXTURE_CELL = CellPackages(
    direct=("fixture-greeter", "@fixture/strings"),
    transitive="fixture-core",
    transitive_version="1.2.0",
    script="console.log(require('fixture-greeter').greet('matrix'))",
    expected_output="Hello, Matrix (fixture-core 1.2.0)",
)
_DEMO_FOLDERS = ("demo-greeter", "demo-core", "@demo/strings")
_OLD = "2021-01-01T00:00:00.000Z"  # old publish times: pnpm's minimum release age stays quiet


def _fixture_content(folder: Path) -> None:
    """Stand-in for the demo content, same shape, built with tests.support.make_tarball."""
    make_tarball(folder / "@fixture/strings", "@fixture/strings", "1.0.0",
                 files={"index.js": "exports.capitalize = (s) => s.charAt(0).toUpperCase() + s.slice(1);\n"})  # fmt: skip
    for version in ("1.1.0", "1.2.0"):
        make_tarball(folder / "fixture-core", "fixture-core", version, files={"index.js": f"exports.version = '{version}';\n"})
    make_tarball(
        folder / "fixture-greeter", "fixture-greeter", "1.0.0",
        dependencies={"@fixture/strings": "^1.0.0", "fixture-core": "^1.1.0"},
        files={"index.js": "const { capitalize } = require('@fixture/strings');\n"
               "const core = require('fixture-core');\n"
               "exports.greet = (n) => `Hello, ${capitalize(n)} (fixture-core ${core.version})`;\n"},
    )  # fmt: skip
    for name, versions in {"@fixture/strings": ["1.0.0"], "fixture-core": ["1.1.0", "1.2.0"], "fixture-greeter": ["1.0.0"]}.items():
        meta = {"name": name, "time": {v: _OLD for v in versions}}
        (folder / name / "registry-meta.json").write_text(json.dumps(meta))


@pytest.fixture(scope="session")
def cell_content(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CellPackages]:
    """The demo packages a cell needs (copied from content/), or look-alike fixtures without them."""
    folder = tmp_path_factory.mktemp("cell-content")
    if all((DEMO_CONTENT / name).is_dir() for name in _DEMO_FOLDERS):
        for name in _DEMO_FOLDERS:
            shutil.copytree(DEMO_CONTENT / name, folder / name)
        return folder, DEMO_CELL
    _fixture_content(folder)
    return folder, FIXTURE_CELL


@dataclass(frozen=True)
class Host:
    name: str
    registry: str  # base URL, trailing slash
    tree: Path
    content: Path


def build_tree(content: Path, tree: Path, base_url: str) -> None:
    result = run_build(Settings(content_dir=content, out_dir=tree, base_url=base_url, data_dir=tree.parent / "data"))
    assert result.errors == [], result.errors


@pytest.fixture(scope="session")
def http_server_host(tmp_path_factory: pytest.TempPathFactory, cell_content: tuple[Path, CellPackages]) -> Iterator[Host]:
    root = tmp_path_factory.mktemp("host-http-server")
    tree = root / "public"
    tree.mkdir()
    with static_server(tree) as url:
        build_tree(cell_content[0], tree, url)
        yield Host("http.server", url, tree, cell_content[0])


@pytest.fixture(scope="session")
def nginx_host(tmp_path_factory: pytest.TempPathFactory, cell_content: tuple[Path, CellPackages]) -> Iterator[Host]:
    root = tmp_path_factory.mktemp("host-nginx")
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    build_tree(cell_content[0], root / "public", url)
    with nginx_server(root / "public", root / "nginx", port) as served:
        yield Host("nginx", served, root / "public", cell_content[0])


@contextlib.contextmanager
def deployed_bucket(root: Path, content: Path, bucket: str = BUCKET) -> Iterator[tuple[Host, str]]:
    """moto's S3 with the tree uploaded by `registry-gen deploy`; yields the host and the endpoint."""
    import boto3

    with aws_test_credentials(), moto_server() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        url = f"{endpoint}/{bucket}/"  # path-style: the bucket is the registry's base path
        build_tree(content, root / "public", url)
        assert registry_gen(["deploy", f"s3://{bucket}", "--endpoint-url", endpoint, "--region", "us-east-1",
                             "--tree", str(root / "public"), "--public-read"]) == 0  # fmt: skip
        yield Host("object-store", url, root / "public", content), endpoint


@pytest.fixture(scope="session")
def object_store_host(tmp_path_factory: pytest.TempPathFactory, cell_content: tuple[Path, CellPackages]) -> Iterator[Host]:
    with deployed_bucket(tmp_path_factory.mktemp("host-s3"), cell_content[0]) as (host, _endpoint):
        yield host


HOST_FIXTURES = {"http.server": "http_server_host", "nginx": "nginx_host", "object-store": "object_store_host"}


@pytest.fixture(scope="session")
def client_commands() -> dict[str, list[str]]:
    """Every client of the matrix, installed once into ~/.cache/registry-gen-tests/clients/ (reused when present)."""
    return {name: install_client(spec) for name, spec in CLIENTS.items()}


@pytest.fixture
def make_client(client_commands: dict[str, list[str]], tmp_path: Path):  # noqa: ANN201 - a factory
    def factory(name: str, registry: str) -> ClientRun:
        return ClientRun(CLIENTS[name], client_commands[name], tmp_path / f"client-{name}", registry)

    return factory
