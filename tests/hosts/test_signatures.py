"""`npm audit signatures` (real npm 11) against signed trees served by http.server and nginx.

Offline stand-in, and only this one: npm first asks the Sigstore TUF repository for the
registry's keys, which these machines cannot reach. tests/signing/sigstore_tuf_offline.js,
loaded into npm with NODE_OPTIONS=--require, makes @sigstore/tuf answer what the real
repository answers for any registry but the public one ("target not found",
TUF_FIND_TARGET_ERROR). npm then fetches /-/npm/v1/keys from the registry under test and checks
every signature with its own code, unchanged.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.keyring import load_signer, write_new_key
from registry_gen.names import tarball_path
from registry_gen.settings import Settings
from tests.hosts.clients import ClientRun
from tests.hosts.conftest import CellPackages
from tests.hosts.servers import Recorded, free_port, nginx_server, recording_upstream
from tests.support import static_server

pytestmark = pytest.mark.slow

PRELOAD = Path(__file__).resolve().parents[1] / "signing" / "sigstore_tuf_offline.js"


@dataclass(frozen=True)
class SignedHost:
    name: str
    registry: str
    settings: Settings
    api_records: list[Recorded]


def signed_settings(root: Path, content: Path, base_url: str, key: str = "a.pem") -> Settings:
    settings = Settings(content_dir=content, out_dir=root / "public", base_url=base_url, data_dir=root / "data")
    if not (root / key).exists():
        write_new_key(root / key, settings)
    return Settings(content_dir=content, out_dir=root / "public", base_url=base_url, data_dir=root / "data", signing_key=root / key)


def build(settings: Settings) -> None:
    result = run_build(settings)
    assert result.errors == [], result.errors


def audit_signatures(client: ClientRun, project: Path) -> subprocess.CompletedProcess[str]:
    """`npm audit signatures`, with the TUF stand-in described at the top of this module."""
    return client.run("audit", "signatures", cwd=project, check=False, env={"NODE_OPTIONS": f'--require "{PRELOAD}"'})


def installed_count(project: Path) -> int:
    lock = json.loads((project / "package-lock.json").read_text())
    return sum(1 for path in lock["packages"] if path.startswith("node_modules/"))


def install(client: ClientRun, folder: Path, cell: CellPackages) -> Path:
    project = client.new_project(folder)
    client.add(project, *cell.direct)
    return project


def assert_all_verified(proc: subprocess.CompletedProcess[str], count: int) -> None:
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert f"audited {count} packages" in output, output
    assert f"{count} packages have verified registry signatures" in output, output
    assert "Fetching directly from" in output  # the keys came from the registry under test


@contextlib.contextmanager
def _http_server_host(root: Path, content: Path) -> Iterator[SignedHost]:
    tree = root / "public"
    tree.mkdir(parents=True)
    with static_server(tree) as url:
        settings = signed_settings(root, content, url)
        build(settings)
        yield SignedHost("http.server", url, settings, [])


@contextlib.contextmanager
def _nginx_host(root: Path, content: Path) -> Iterator[SignedHost]:
    """nginx with an API upstream: the keys must come from the tree, not from the /-/npm/ API route."""
    port = free_port()
    settings = signed_settings(root, content, f"http://127.0.0.1:{port}/")
    build(settings)
    with recording_upstream() as (api_port, records):
        with nginx_server(settings.out_dir, root / "nginx", port, api_upstream=f"127.0.0.1:{api_port}") as url:
            yield SignedHost("nginx", url, settings, records)


HOSTS = {"http.server": _http_server_host, "nginx": _nginx_host}


@pytest.mark.parametrize("host_name", sorted(HOSTS))
def test_every_installed_package_has_a_verified_signature(
    host_name: str, tmp_path: Path, cell_content: tuple[Path, CellPackages], make_client
) -> None:
    content, cell = cell_content
    with HOSTS[host_name](tmp_path / "host", content) as host:
        client = make_client("npm11", host.registry)
        project = install(client, tmp_path / "project", cell)
        assert_all_verified(audit_signatures(client, project), installed_count(project))
        assert not [r for r in host.api_records if "/keys" in r.path]


def _repack_with_extra_file(tarball: bytes) -> bytes:
    """The same package with one more file: a tarball a tamperer would serve."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as source, tarfile.open(fileobj=out, mode="w:gz") as target:
        for member in source.getmembers():
            target.addfile(member, source.extractfile(member) if member.isfile() else None)
        payload = b"console.log('tampered')\n"
        extra = tarfile.TarInfo("package/payload.js")
        extra.size = len(payload)
        target.addfile(extra, io.BytesIO(payload))
    return out.getvalue()


def _tamper(settings: Settings, name: str, version: str) -> None:
    """Replace one version's tarball and rewrite dist.integrity/shasum to match; signatures untouched."""
    tarball = settings.out_dir / tarball_path(name, version)
    data = _repack_with_extra_file(tarball.read_bytes())
    tarball.write_bytes(data)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    for document in ("index.html", "abbreviated.json"):
        path = settings.out_dir / name / document
        doc = json.loads(path.read_text())
        doc["versions"][version]["dist"].update(integrity=integrity, shasum=hashlib.sha1(data).hexdigest())
        path.write_text(json.dumps(doc))
        path.with_name(document + ".gz").write_bytes(gzip.compress(path.read_bytes()))


def test_a_tampered_integrity_is_an_invalid_signature(tmp_path: Path, cell_content: tuple[Path, CellPackages], make_client) -> None:
    content, cell = cell_content
    with _http_server_host(tmp_path / "host", content) as host:
        _tamper(host.settings, cell.transitive, cell.transitive_version)
        client = make_client("npm11", host.registry)
        project = install(client, tmp_path / "project", cell)  # installs: integrity and tarball agree
        assert (project / "node_modules" / cell.transitive / "payload.js").is_file()
        proc = audit_signatures(client, project)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 1, output
        assert "1 package has an invalid registry signature" in output, output
        assert f"{cell.transitive}@{cell.transitive_version}" in output


def test_after_a_key_rotation_old_and_new_versions_verify(tmp_path: Path, cell_content: tuple[Path, CellPackages], make_client) -> None:
    """Everything but one package is built and signed with key A; then the key becomes B and the
    last package arrives: the tree holds signatures by both keys, and npm accepts both."""
    content, cell = cell_content
    late = cell.direct[1]  # the scoped package
    late_folder = late.split("/")[0]
    staged = tmp_path / "content"
    staged.mkdir()
    root = tmp_path / "host"
    (root / "public").mkdir(parents=True)
    with static_server(root / "public") as url:
        for folder in content.iterdir():
            if folder.name != late_folder:
                shutil.copytree(folder, staged / folder.name)
        first = signed_settings(root, staged, url, "a.pem")
        build(first)
        shutil.copytree(content / late_folder, staged / late_folder)
        second = signed_settings(root, staged, url, "b.pem")
        build(second)
        old_id, new_id = load_signer(first).keyid, load_signer(second).keyid  # type: ignore[union-attr]
        keys = json.loads((second.out_dir / "-/npm/v1/keys").read_text())["keys"]
        assert [k["keyid"] for k in keys] == [new_id, old_id] and keys[1]["expires"]
        signers = {
            name: json.loads((second.out_dir / name / "index.html").read_text())["versions"]
            for name in (cell.transitive, late)
        }
        assert {d["dist"]["signatures"][0]["keyid"] for d in signers[cell.transitive].values()} == {old_id}
        assert {d["dist"]["signatures"][0]["keyid"] for d in signers[late].values()} == {new_id}
        client = make_client("npm11", url)
        project = install(client, tmp_path / "project", cell)
        assert_all_verified(audit_signatures(client, project), installed_count(project))
