"""The real npm against the demo registry, built once and served by the stdlib's plain http.server.

Issue 2 acceptance 2 (installs, scripts, global installs, local sources, uninstall, init, stored
registry, index.js fallback), 3 (digests match the served bytes; a tampered tarball is refused)
and the npm half of 5 (broken archives do not stop the other packages from installing).

One tree and one npm cache serve the whole module; only the tamper test needs a cache of its own
(npm trusts a cached tarball whose integrity matches and would never see the tampered bytes).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from registry_gen.build import BuildResult, run_build
from registry_gen.settings import Settings
from tests.demo_packages import LIFECYCLE_LOG, copy_committed_demo, demo_nomain_tarball, npm_tarball
from tests.support import Npm, static_server

pytestmark = pytest.mark.slow

CONTENT = Path(__file__).resolve().parents[2] / "content"
# Nothing listens here: a test that passes `--registry` proves the option, not the environment, was used.
DEAD_REGISTRY = "http://127.0.0.1:9/"


@dataclass(frozen=True)
class Registry:
    url: str
    out: Path
    build: BuildResult


@contextlib.contextmanager
def _build_and_serve(root: Path, content: Path) -> Iterator[Registry]:
    out = root / "public"
    out.mkdir(parents=True)
    # Serve first: the tarball URLs in the documents must carry the server's ephemeral port.
    with static_server(out) as url:
        result = run_build(Settings(content_dir=content, out_dir=out, base_url=url, data_dir=root / "data"))
        yield Registry(url, out, result)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    root = tmp_path_factory.mktemp("demo-registry")
    with _build_and_serve(root, copy_committed_demo(CONTENT, root / "content")) as served:
        assert served.build.errors == []
        yield served


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("npm-cache")


@pytest.fixture
def npm(tmp_path: Path, registry: Registry, shared_cache: Path) -> Npm:
    """A real npm with its own HOME and userconfig, the module's shared cache, the demo registry."""
    client = Npm(tmp_path / "home", registry.url)
    client.env["npm_config_cache"] = str(shared_cache)
    return client


def _project(tmp_path: Path, name: str = "project") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


def _lock(project: Path) -> dict[str, Any]:
    return json.loads((project / "package-lock.json").read_text())


def _assert_resolved_from(project: Path, url: str, expected: set[str]) -> None:
    """Every registry package in the lockfile came from our server (and not, say, the public registry)."""
    packages = _lock(project)["packages"]
    resolved = {path.removeprefix("node_modules/"): meta.get("resolved", "") for path, meta in packages.items() if path}
    assert expected <= set(resolved)
    for name in expected:
        assert resolved[name].startswith(url), f"{name} resolved from {resolved[name]}"


def _node(code: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NODE_PATH"}
    proc = subprocess.run(["node", "-e", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# ---------------------------------------------------------------- acceptance 2


def test_install_dependency_chain_scoped_and_zip_packages(tmp_path: Path, npm: Npm, registry: Registry) -> None:
    npm.env["npm_config_registry"] = DEAD_REGISTRY
    project = _project(tmp_path)
    wanted = ("demo-greeter", "@demo/strings", "demo-zipped", "demo-imperfect-js")
    npm.run("install", *wanted, "--registry", registry.url, cwd=project)
    modules = project / "node_modules"
    core = json.loads((modules / "demo-core" / "package.json").read_text())
    assert core["version"] == "1.2.0"  # ^1.1.0 picks the highest stable version, not 2.0.0-beta.1
    assert (modules / "@demo" / "strings" / "package.json").is_file()
    _assert_resolved_from(project, registry.url, {*wanted, "demo-core"})
    tree = json.loads(npm.run("ls", "--all", "--json", cwd=project).stdout)["dependencies"]
    assert set(tree) == set(wanted)
    assert tree["demo-greeter"]["dependencies"]["demo-core"]["version"] == "1.2.0"
    assert "@demo/strings" in tree["demo-greeter"]["dependencies"]
    printed = npm.run("ls", "--all", cwd=project).stdout
    for line in ("demo-greeter@1.0.0", "demo-core@1.2.0", "@demo/strings@1.0.0", "demo-zipped@1.0.0"):
        assert line in printed
    assert _node("console.log(require('demo-greeter').greet('ada'))", project) == "Hello, Ada (demo-core 1.2.0)"
    assert _node("console.log(require('demo-zipped'))", project) == "demo-zipped from a zip"
    # The imperfect descriptor's spec spellings (macos, x86_64) reach npm as darwin and x64, and
    # its os/cpu lists include this machine (linux, x64 or arm64), so npm's platform check passes.
    assert _node("console.log(require('demo-imperfect-js'))", project) == "imperfect but installable"


def test_lifecycle_scripts_npm_test_and_uninstall(tmp_path: Path, npm: Npm) -> None:
    project = _project(tmp_path)
    npm.run("install", "demo-lifecycle", "demo-greeter", cwd=project)
    log = project / LIFECYCLE_LOG
    # The specification's order for `install <package>`: preinstall, then install (npm adds postinstall).
    assert log.read_text().splitlines() == ["preinstall", "install", "postinstall"]

    package = project / "node_modules" / "demo-lifecycle"
    tested = npm.run("test", cwd=package)
    assert "demo-lifecycle: test script ran" in tested.stdout
    assert (package / LIFECYCLE_LOG).read_text() == "test\n"  # INIT_CWD is where `npm test` ran
    greeter = npm.run("test", cwd=project / "node_modules" / "demo-greeter")
    assert "demo-greeter tests passed" in greeter.stdout

    npm.run("uninstall", "demo-lifecycle", cwd=project)
    assert not package.exists()
    assert "demo-lifecycle" not in json.loads((project / "package.json").read_text())["dependencies"]
    assert (project / "node_modules" / "demo-greeter").is_dir()
    # npm 7 and later no longer run a package's `uninstall` script (npm 11 included): the
    # specification's uninstall hook is not observable with today's npm.
    assert log.read_text().splitlines() == ["preinstall", "install", "postinstall"]


def test_global_install_links_bin_without_making_the_package_importable(tmp_path: Path, npm: Npm) -> None:
    prefix = tmp_path / "global"
    npm.run("install", "-g", "--prefix", str(prefix), "demo-greeter", cwd=_project(tmp_path))
    command = prefix / "bin" / "demo-greet"
    assert command.is_symlink()
    assert command.resolve() == (prefix / "lib" / "node_modules" / "demo-greeter" / "bin" / "demo-greet.js").resolve()
    ran = subprocess.run([str(command), "grace"], capture_output=True, text=True, timeout=60, check=True)
    assert ran.stdout.strip() == "Hello, Grace (demo-core 1.2.0)"
    elsewhere = _project(tmp_path, "elsewhere")
    env = {k: v for k, v in os.environ.items() if k != "NODE_PATH"}
    proc = subprocess.run(
        ["node", "-e", "require('demo-greeter')"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "Cannot find module 'demo-greeter'" in proc.stderr


def test_local_sources_tarball_url_file_and_folder(tmp_path: Path, npm: Npm, registry: Registry) -> None:
    project = _project(tmp_path)
    shutil.copy(CONTENT / "demo-nomain" / "demo-nomain-1.0.0.tgz", project / "file.tgz")
    folder = project / "folderpkg"
    folder.mkdir()
    (folder / "package.json").write_text(
        json.dumps({"name": "folderpkg", "version": "1.0.0", "dependencies": {"demo-core": "~1.1.0"}})
    )
    (folder / "index.js").write_text("module.exports = require('demo-core').version;\n")
    tarball_url = registry.url + "demo-zipped/-/demo-zipped-1.0.0.tgz"
    npm.run("install", tarball_url, "./file.tgz", "./folderpkg", cwd=project)
    declared = json.loads((project / "package.json").read_text())["dependencies"]
    assert declared == {"demo-zipped": tarball_url, "demo-nomain": "file:file.tgz", "folderpkg": "file:folderpkg"}
    assert (project / "node_modules" / "folderpkg").is_symlink()
    assert _node("console.log(require('folderpkg'))", project) == "1.1.0"  # its dependency came from the registry
    assert _node("console.log(require('demo-nomain'), require('demo-zipped'))", project) == (
        "demo-nomain 1.0.0 via index.js demo-zipped from a zip"
    )
    _assert_resolved_from(project, registry.url, {"demo-core", "demo-zipped"})


def test_init_and_a_registry_stored_with_npm_config(tmp_path: Path, npm: Npm, registry: Registry) -> None:
    del npm.env["npm_config_registry"]  # only the userconfig may name the registry here
    project = _project(tmp_path, "my-app")
    npm.run("config", "set", "registry", registry.url, cwd=project)
    assert f"registry={registry.url}" in npm.userconfig.read_text()
    assert npm.run("config", "get", "registry", cwd=project).stdout.strip() == registry.url
    npm.run("init", "-y", cwd=project)
    assert json.loads((project / "package.json").read_text())["name"] == "my-app"
    npm.run("install", "demo-nomain", cwd=project)
    assert json.loads((project / "package.json").read_text())["dependencies"] == {"demo-nomain": "^1.0.0"}
    _assert_resolved_from(project, registry.url, {"demo-nomain"})
    installed = json.loads((project / "node_modules" / "demo-nomain" / "package.json").read_text())
    assert "main" not in installed
    assert _node("console.log(require('demo-nomain'))", project) == "demo-nomain 1.0.0 via index.js"


# ---------------------------------------------------------------- acceptance 3


def _packuments(out: Path) -> Iterator[dict[str, Any]]:
    for document in sorted(out.rglob("index.html")):
        relative = document.relative_to(out).as_posix()
        if relative.startswith(("-/", ".registry-gen/")) or "/-/" in relative:
            continue
        if (document.parent.parent / "index.html").is_file():
            continue  # <name>/<tag>/index.html: a dist-tag's version document (GET /<name>/<tag>)
        yield json.loads(document.read_bytes())


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - our own local server
        return response.read()


def test_every_dist_digest_matches_the_served_bytes(registry: Registry) -> None:
    checked = 0
    for packument in _packuments(registry.out):
        abbreviated = json.loads(_get(registry.url + packument["name"] + "/abbreviated.json"))
        for version, doc in packument["versions"].items():
            dist = doc["dist"]
            assert dist["tarball"].startswith(registry.url)
            served = _get(dist["tarball"])
            assert dist["shasum"] == hashlib.sha1(served).hexdigest()
            assert dist["integrity"] == "sha512-" + base64.b64encode(hashlib.sha512(served).digest()).decode()
            assert abbreviated["versions"][version]["dist"] == dist
            checked += 1
    assert checked == 10


def test_scoped_documents_answer_every_client_spelling(registry: Registry) -> None:
    bodies = {
        json.loads(_get(registry.url + path))["name"]
        for path in ("@demo%2fstrings", "@demo%2Fstrings", "@demo/strings")
    }
    assert bodies == {"@demo/strings"}


# ---------------------------------------------------------------- a damaged copy (acceptance 3 and 5)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """The demo plus a truncated archive and a second demo-nomain@1.0.0 with other bytes; after the
    build, the served demo-zipped tarball is swapped for other bytes (a tampering mirror)."""
    root = tmp_path_factory.mktemp("damaged-registry")
    content = root / "content"
    copy_committed_demo(CONTENT, content)
    (content / "broken").mkdir()
    (content / "broken" / "half.tgz").write_bytes(demo_nomain_tarball("1.0.0")[:200])
    (content / "broken" / "demo-nomain-twin.tgz").write_bytes(
        npm_tarball({"name": "demo-nomain", "version": "1.0.0"}, {"index.js": "module.exports = 'twin';\n"})
    )
    with _build_and_serve(root, content) as served:
        assert {issue.path for issue in served.build.errors} == {
            "broken/half.tgz",
            "broken/demo-nomain-twin.tgz",
            "demo-nomain/demo-nomain-1.0.0.tgz",
        }
        tampered = npm_tarball(
            {"name": "demo-zipped", "version": "1.0.0", "main": "main.js"}, {"main.js": "module.exports = 'evil';\n"}
        )
        (served.out / "demo-zipped" / "-" / "demo-zipped-1.0.0.tgz").write_bytes(tampered)
        yield served


def test_broken_archives_do_not_stop_the_other_packages(tmp_path: Path, damaged: Registry, shared_cache: Path) -> None:
    npm = Npm(tmp_path / "home", damaged.url)
    npm.env["npm_config_cache"] = str(shared_cache)
    project = _project(tmp_path)
    npm.run("install", "demo-greeter", "demo-lifecycle", cwd=project)
    _assert_resolved_from(project, damaged.url, {"demo-greeter", "demo-core", "@demo/strings", "demo-lifecycle"})
    missing = npm.run("view", "demo-nomain", "version", cwd=project, check=False)
    assert missing.returncode != 0
    assert "E404" in missing.stderr


def test_a_tampered_tarball_is_refused_with_eintegrity(tmp_path: Path, damaged: Registry) -> None:
    npm = Npm(tmp_path / "home", damaged.url)  # a fresh cache: a cached good copy would hide the tampering
    npm.env["npm_config_fetch_retries"] = "0"  # npm retries a bad download with back-off; once proves it
    project = _project(tmp_path)
    refused = npm.run("install", "demo-zipped", cwd=project, check=False)
    assert refused.returncode != 0
    assert "EINTEGRITY" in refused.stdout + refused.stderr
    assert not (project / "node_modules" / "demo-zipped").exists()


def test_a_conflicting_archive_never_replaces_a_live_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`registry-gen build` itself: the live version still installs with its original integrity."""
    from registry_gen.cli import main

    content, out = tmp_path / "content", tmp_path / "public"
    content.mkdir()
    out.mkdir()
    original = npm_tarball({"name": "kept", "version": "1.0.0"}, {"index.js": "exports.v = 'original'"})
    (content / "kept-1.0.0.tgz").write_bytes(original)
    with static_server(out) as url:
        args = ["build", str(content), "--out", str(out), "--base-url", url]
        assert main(args) == 0
        integrity = json.loads((out / "kept" / "index.html").read_bytes())["versions"]["1.0.0"]["dist"]["integrity"]
        (content / "copied-by-hand.tgz").write_bytes(
            npm_tarball({"name": "kept", "version": "1.0.0"}, {"index.js": "exports.v = 'impostor'"})
        )
        capsys.readouterr()
        assert main(args) == 1
        captured = capsys.readouterr()
        assert "error: copied-by-hand.tgz: kept@1.0.0 is already published" in captured.err
        assert "1 archives refused" in captured.out
        project = _project(tmp_path)
        Npm(tmp_path / "npm-home", url).run("install", "kept@1.0.0", cwd=project)
    assert _lock(project)["packages"]["node_modules/kept"]["integrity"] == integrity
    assert "original" in (project / "node_modules/kept/index.js").read_text()
