"""Issue 29, acceptance 2 and 3, with a real Verdaccio 6.8.0 as the upstream and the real npm 11.

The upstream's storage is written by `registry-gen export verdaccio` from a tree whose publish times
are set relative to now (Verdaccio serves a storage as it finds it), so it holds versions published
today, days ago and years ago:
- `min_release_age: 30d` over packages published today: npm finds no version to install;
- `3d` over older and younger versions: npm resolves to the newest allowed one, `latest` included;
- a blocked version is never served, by name or by tarball URL;
- a package published here under a name the upstream also has is served from its local versions
  only, before and after the mirror refreshes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_gen.meta import PackageMeta, dump_meta
from registry_gen.mirror.policy import iso
from registry_gen.settings import Settings
from tests.importers.verdaccio import verdaccio_server
from tests.mirror.helpers import document, mirror_serve, registry_gen, write_config
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball
from tests.support import Npm, make_tarball, poll

pytestmark = pytest.mark.slow
DAY = 86400.0
PACKAGES = (
    "  'fresh-*': {proxy: up, min_release_age: 30d}\n"
    "  '**': {proxy: up, min_release_age: 3d, block: ['aged@1.0.0']}\n"
)


@dataclass(frozen=True)
class Mirror:
    root: Path
    server: RegistryProcess
    npm: Npm


def _upstream_storage(work: Path) -> Path:
    """A Verdaccio storage holding versions published at chosen times (via `export verdaccio`)."""
    now = time.time()
    published = {
        "aged": {"1.0.0": now - 400 * DAY, "1.1.0": now - 5 * DAY, "1.2.0": now - 3600},
        "fresh-a": {"1.0.0": now - 3600},
        "fresh-b": {"1.0.0": now - 7200, "1.1.0": now - 60},
        "shared": {"1.0.0": now - 900 * DAY, "2.0.0": now - 800 * DAY},
    }
    content = work / "content"
    for name, versions in published.items():
        for version in versions:
            make_tarball(content / name, name, version)
        meta = PackageMeta(name, maintainers=[{"name": "upstream-author"}], time={v: iso(t) for v, t in versions.items()})
        (content / name / "registry-meta.json").write_bytes(dump_meta(meta))
    settings = Settings(content_dir=content, out_dir=work / "public", data_dir=work / "data", base_url="http://127.0.0.1:9/")
    assert registry_gen(work, "export", "verdaccio", str(work / "storage"), "--content", str(content), "--out",
                        str(settings.out_dir)).returncode == 0  # fmt: skip
    return work / "storage"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    work = tmp_path_factory.mktemp("policy-upstream")
    storage = _upstream_storage(work / "upstream")
    with verdaccio_server(work / "verdaccio", storage=storage) as url:
        root = work / "mirror"
        write_config(root, url, PACKAGES)
        with mirror_serve(root) as server:
            # Published here before any read of it: `shared` is this registry's own.
            token = add_user(server.base, "alice")
            local = http("PUT", server.base + "shared", body=publish_body("shared", "0.5.0", tarball("shared", "0.5.0")), token=token)
            assert local.status in (200, 201), local.body
            yield Mirror(root, server, Npm(work / "npm", server.base))


def _install(mirror: Mirror, project: Path, spec: str, check: bool = True) -> tuple[int, str, dict[str, str]]:
    project.mkdir(parents=True)
    (project / "package.json").write_text(json.dumps({"name": "consumer", "version": "1.0.0", "private": True}))
    proc = mirror.npm.run("install", spec, cwd=project, check=check)
    installed = {}
    for folder in (project / "node_modules").glob("*") if (project / "node_modules").is_dir() else []:
        if (folder / "package.json").is_file():
            installed[folder.name] = json.loads((folder / "package.json").read_text())["version"]
    return proc.returncode, proc.stdout + proc.stderr, installed


def test_packages_published_today_are_not_served_under_a_thirty_day_minimum(mirror: Mirror, tmp_path: Path) -> None:
    for name in ("fresh-a", "fresh-b"):
        code, output, _ = _install(mirror, tmp_path / name, name, check=False)
        # Every version held back: the document lists none, and npm says so (ENOVERSIONS).
        assert code != 0 and f"No versions available for {name}" in output, output
        assert document(mirror.server.base, name)["versions"] == {}
    code, output, _ = _install(mirror, tmp_path / "pinned", "fresh-b@1.1.0", check=False)
    assert code != 0 and "fresh-b" in output and "No " in output, output
    reply = http("GET", mirror.server.base + "fresh-b/-/fresh-b-1.1.0.tgz")
    assert reply.status == 404 and "too young: published upstream" in reply.json["error"]


def test_npm_resolves_to_the_newest_version_old_enough_and_never_a_blocked_one(mirror: Mirror, tmp_path: Path) -> None:
    _, _, installed = _install(mirror, tmp_path / "latest", "aged")
    assert installed == {"aged": "1.1.0"}  # 1.2.0 is an hour old, 1.0.0 blocked
    _, _, ranged = _install(mirror, tmp_path / "range", "aged@^1.0.0")
    assert ranged == {"aged": "1.1.0"}
    code, output, _ = _install(mirror, tmp_path / "blocked", "aged@1.0.0", check=False)
    assert code != 0 and "No matching version found for aged@1.0.0" in output, output
    blocked = http("GET", mirror.server.base + "aged/-/aged-1.0.0.tgz")
    assert blocked.status == 404 and "blocked by the block entry 'aged@1.0.0'" in blocked.json["error"]
    served = document(mirror.server.base, "aged")
    assert sorted(served["versions"]) == ["1.1.0"] and sorted(served["time"]) == ["1.1.0", "created", "modified"]
    view = mirror.npm.run("view", "aged", "versions", "--json", cwd=tmp_path).stdout
    assert json.loads(view) in (["1.1.0"], "1.1.0")  # npm view says nothing of the versions held back
    page_file = mirror.root / "public/-/web/package/aged/index.html"
    poll(page_file.is_file, "the page of aged, written by the build that follows a landing (at most 60 s later)", timeout=90)
    page = page_file.read_text()
    assert "blocked by the block entry" in page and "too young: published upstream" in page
    why = registry_gen(mirror.root, "mirror", "why", "aged@1.2.0").stdout
    assert "aged@1.2.0 is held back: too young: published upstream" in why and "min_release_age 3d" in why


def test_a_local_package_named_like_an_upstream_one_is_served_from_its_local_versions_only(mirror: Mirror, tmp_path: Path) -> None:
    assert sorted(document(mirror.server.base, "shared")["versions"]) == ["0.5.0"]
    _, _, installed = _install(mirror, tmp_path / "before", "shared")
    assert installed == {"shared": "0.5.0"}
    refreshed = registry_gen(mirror.root, "mirror", "refresh")
    assert refreshed.returncode == 0, refreshed.stderr
    assert sorted(document(mirror.server.base, "shared")["versions"]) == ["0.5.0"]
    _, _, after = _install(mirror, tmp_path / "after", "shared@*")
    assert after == {"shared": "0.5.0"}
    why = registry_gen(mirror.root, "mirror", "why", "shared").stdout
    assert "shared is never proxied: shared is a package of this registry" in why and "a local name always wins" in why
    assert "mirror" not in json.loads((mirror.root / "content/shared/registry-meta.json").read_text())
