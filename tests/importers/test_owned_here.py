"""Issue 26: imports never take over packages of this registry. Against a real `registry-gen serve`
(its API publishes, its user store logs in), a hostile loopback upstream and a Verdaccio storage:
the dependency-confusion pair is refused unless an administrator names the package
(`--merge-into`), and a Verdaccio storage never hands an existing package to a new owner."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from registry_gen.cli import main as registry_gen
from registry_gen.importers.integrity import sri_sha512
from tests.importers.upstream_server import hostile_upstream, make_root, served
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball

pytestmark = pytest.mark.slow
MALLORY = ("mallory", "mallory-pw-123")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RegistryProcess]:
    root, _ = make_root(tmp_path, "signup: open\n")  # the in-process imports read the same folders
    process = RegistryProcess(root)
    try:
        yield process
    finally:
        process.stop()


def _import(server: RegistryProcess, *args: str) -> int:
    return registry_gen(["import", *args, "--config", str(server.root / "registry.yaml")])


def _meta(root: Path, name: str) -> dict[str, Any]:
    return json.loads((root / "content" / name / "registry-meta.json").read_bytes())


def test_the_dependency_confusion_pair_is_refused_unless_an_admin_merges_it(server: RegistryProcess, capsys: pytest.CaptureFixture[str]) -> None:
    server.start()
    alice = add_user(server.base, "alice")
    published = http("PUT", f"{server.base}corp-utils", body=publish_body("corp-utils", "1.0.0", tarball("corp-utils", "1.0.0")), token=alice)
    assert published.status == 201, published.body
    with hostile_upstream() as up:
        up.publish("corp-utils", "99.0.0", time="2015-01-01T00:00:00.000Z")  # the attacker's, back-dated
        up.publish("public-lib", "1.0.0")
        capsys.readouterr()
        assert _import(server, "registry", "corp-utils", "--from", up.base) == 1
        err = capsys.readouterr().err
        assert "failed: corp-utils: corp-utils is a package of this registry" in err and "--merge-into corp-utils" in err
        assert sorted(p.name for p in (server.content / "corp-utils").iterdir()) == ["corp-utils-1.0.0.tgz", "registry-meta.json"]
        assert _meta(server.root, "corp-utils")["dist-tags"] == {"latest": "1.0.0"}
        assert list(server.packument("corp-utils")["versions"]) == ["1.0.0"]  # type: ignore[index]
        # What an earlier import of the same upstream created keeps following it, without a word.
        assert _import(server, "registry", "public-lib", "--from", up.base) == 0
        up.publish("public-lib", "1.1.0")
        assert _import(server, "registry", "public-lib", "--from", up.base) == 0
        assert (server.content / "public-lib" / "public-lib-1.1.0.tgz").is_file()
        # An administrator who means it says so for that package.
        assert _import(server, "registry", "corp-utils", "--from", up.base, "--merge-into", "corp-utils") == 0
    assert (server.content / "corp-utils" / "corp-utils-99.0.0.tgz").is_file()
    assert [m["name"] for m in _meta(server.root, "corp-utils")["maintainers"]] == ["alice"]  # the owner stays


def test_a_package_published_here_after_an_import_is_owned_here_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as up:
        up.publish("lib", "1.0.0")
        assert registry_gen(["import", "registry", "lib", "--from", up.base, "--config", str(config)]) == 0
        (root / "content" / "lib" / "lib-1.5.0.tgz").write_bytes(tarball("lib", "1.5.0"))  # dropped in by hand
        up.publish("lib", "2.0.0")
        capsys.readouterr()
        assert registry_gen(["import", "registry", "lib", "--from", up.base, "--config", str(config)]) == 1
        assert "lib has versions published here (lib/lib-1.5.0.tgz)" in capsys.readouterr().err
        with hostile_upstream() as other:
            other.publish("lib", "3.0.0")
            assert registry_gen(["import", "registry", "lib", "--from", other.base, "--config", str(config)]) == 1
            assert f"lib was imported from {up.base}, not from {other.base}" in capsys.readouterr().err
    assert sorted(p.name for p in (root / "content" / "lib").glob("*.tgz")) == ["lib-1.0.0.tgz", "lib-1.5.0.tgz"]


# ---------------------------------------------------------------- Verdaccio storage


def write_storage(root: Path, folder: str, versions: dict[str, bytes], doc_name: str | None = None,
                  entries: dict[str, dict[str, Any]] | None = None) -> Path:  # fmt: skip
    """A Verdaccio storage folder: storage/<folder>/{package.json, <bare>-<version>.tgz}."""
    bare = folder.rsplit("/", 1)[-1]
    place = root / "storage" / folder
    place.mkdir(parents=True, exist_ok=True)
    manifests = {}
    for version, data in versions.items():
        (place / f"{bare}-{version}.tgz").write_bytes(data)
        dist = {"integrity": sri_sha512(data), "shasum": hashlib.sha1(data).hexdigest(), "tarball": f"http://127.0.0.1:9/{folder}/-/{bare}-{version}.tgz"}
        manifests[version] = {"name": doc_name or folder, "version": version, "dist": dist, **(entries or {}).get(version, {})}
    times = {v: "2022-01-01T00:00:00.000Z" for v in versions} | {"created": "2022-01-01T00:00:00.000Z"}
    doc = {"name": doc_name or folder, "versions": manifests, "time": times, "dist-tags": {"latest": max(versions)}}
    (place / "package.json").write_text(json.dumps(doc))
    return root / "storage"


def test_a_verdaccio_storage_never_hands_an_existing_package_to_a_new_owner(server: RegistryProcess, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    (server.content / "handpkg").mkdir(parents=True)
    (server.content / "handpkg" / "handpkg-1.0.0.tgz").write_bytes(tarball("handpkg", "1.0.0"))  # added by hand: admins only
    source = tmp_path / "verdaccio"
    storage = write_storage(source, "handpkg", {"2.0.0": tarball("handpkg", "2.0.0")})
    (source / "config.yaml").write_text("packages:\n  handpkg:\n    access: $all\n    publish: mallory\n")
    (source / "htpasswd").write_text(f"{MALLORY[0]}:{bcrypt.hashpw(MALLORY[1].encode(), bcrypt.gensalt(4)).decode()}\n")
    server.start()
    args = ("verdaccio", str(storage), "--htpasswd", str(source / "htpasswd"))
    capsys.readouterr()
    assert _import(server, *args) == 1
    assert "failed: handpkg: handpkg is a package of this registry" in capsys.readouterr().err
    assert not (server.content / "handpkg" / "handpkg-2.0.0.tgz").exists()
    assert _import(server, *args, "--merge-into", "handpkg") == 0  # merged: versions, never owners
    assert (server.content / "handpkg" / "handpkg-2.0.0.tgz").is_file()
    assert "maintainers" not in _meta(server.root, "handpkg")
    login = http("PUT", f"{server.base}-/user/org.couchdb.user:mallory", body={"name": MALLORY[0], "password": MALLORY[1]}, basic=MALLORY)
    assert login.status == 201, login.body  # the account the storage's htpasswd brought works...
    attempt = publish_body("handpkg", "3.0.0", tarball("handpkg", "3.0.0"))
    refused = http("PUT", f"{server.base}handpkg", body=attempt, token=login.json["token"])
    assert refused.status == 403, refused.body  # ...and holds no rights over the package
    assert not (server.content / "handpkg" / "handpkg-3.0.0.tgz").exists()


@pytest.mark.parametrize("form", ["document", "entry", "tarball"])
def test_a_storage_entry_is_trusted_only_for_the_name_it_is_filed_under(tmp_path: Path, form: str, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    if form == "document":
        storage = write_storage(tmp_path, "innocent", {"6.6.6": tarball("alice-pkg", "6.6.6")}, doc_name="alice-pkg")
    elif form == "entry":
        storage = write_storage(tmp_path, "innocent", {"1.0.0": tarball("alice-pkg", "6.6.6")}, entries={"1.0.0": {"name": "alice-pkg"}})
    else:
        storage = write_storage(tmp_path, "innocent", {"1.0.0": tarball("alice-pkg", "6.6.6")})
    assert registry_gen(["import", "verdaccio", str(storage), "--config", str(config)]) == 1
    assert "'alice-pkg'" in capsys.readouterr().err
    assert not list((root / "content").rglob("*.tgz")) and served(root, "alice-pkg") is None
