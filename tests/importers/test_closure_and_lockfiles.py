"""Issue 26: `import registry --with-dependencies` imports what npm installs, and says when an
import is not closed; `import lockfile` takes lockfiles without `resolved` (npm's
omit-lockfile-registry-resolved) and fails whenever a registry package is left out. Against a real
loopback upstream serving a small dependency graph, real npm 11 and a real `registry-gen serve`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry_gen.cli import main as registry_gen
from registry_gen.importers.integrity import sri_sha512
from tests.importers.upstream_server import Upstream, hostile_upstream, make_root
from tests.registry_api.helpers import RegistryProcess
from tests.support import Npm

pytestmark = pytest.mark.slow
# Each version: {dependency field: {name: spec}}. What npm 11 installs for app@1.0.0 is below.
GRAPH = {
    "app": {"1.0.0": {
        "dependencies": {"lib-a": "^1.0.0", "lib-b": "~2.1.0"},
        "optionalDependencies": {"opt-y": "1.x"},
        "peerDependencies": {"peer-x": "^3.0.0", "peer-opt": "*"},
        "peerDependenciesMeta": {"peer-opt": {"optional": True}},
    }},
    "lib-a": {"1.0.0": {}, "1.2.0": {"dependencies": {"deep-c": "^1.0.0"}}, "1.3.0-beta.1": {}, "2.0.0": {}},
    "lib-b": {"2.1.0": {}, "2.1.5": {}, "2.1.9": {}, "2.2.0": {}},
    "deep-c": {"1.0.0": {}, "1.4.0": {"dependencies": {"lib-a": "^1.0.0"}}},  # a cycle back to lib-a
    "opt-y": {"1.0.0": {}, "1.1.0": {}},
    "peer-x": {"3.0.0": {}, "3.1.0": {}, "4.0.0": {}},
    "peer-opt": {"1.0.0": {}},
}
# `latest` where it is not the highest version: npm takes it when it satisfies the range.
LATEST = {"lib-a": "2.0.0", "lib-b": "2.1.5", "peer-x": "4.0.0"}
CLOSURE = {("app", "1.0.0"), ("lib-a", "1.2.0"), ("lib-b", "2.1.5"), ("deep-c", "1.4.0"), ("opt-y", "1.1.0"), ("peer-x", "3.1.0")}


def serve_graph(up: Upstream) -> None:
    for name, versions in GRAPH.items():
        for version, fields in versions.items():
            up.publish(name, version, tag=None, **fields)
        up.documents[name]["dist-tags"] = {"latest": LATEST.get(name, list(versions)[-1]), "next": "1.3.0-beta.1"} if name == "lib-a" else {
            "latest": LATEST.get(name, list(versions)[-1])}  # fmt: skip


def imported(root: Path) -> set[tuple[str, str]]:
    return {(p.parent.name, p.name[len(p.parent.name) + 1 : -len(".tgz")]) for p in (root / "content").rglob("*.tgz")}


def npm_lock(up: Upstream, folder: Path, dependencies: dict[str, str], *args: str, workspaces: bool = False) -> dict:
    """What real npm 11 resolves against the upstream (`--package-lock-only`: no install)."""
    folder.mkdir(parents=True)
    package = {"name": "consumer", "version": "1.0.0", "private": True, "dependencies": dependencies}
    if workspaces:
        package["workspaces"] = ["packages/*"]
        (folder / "packages" / "local").mkdir(parents=True)
        (folder / "packages" / "local" / "package.json").write_text(json.dumps({"name": "local-ws", "version": "0.1.0"}))
    (folder / "package.json").write_text(json.dumps(package))
    Npm(folder.parent / f"{folder.name}-npm", up.base).run("install", "--package-lock-only", *args, cwd=folder)
    return json.loads((folder / "package-lock.json").read_text())


def test_with_dependencies_imports_what_npm_installs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as up:
        serve_graph(up)
        lock = npm_lock(up, tmp_path / "npm", {"app": "1.0.0"})
        assert registry_gen(["import", "registry", "app@1.0.0", "--with-dependencies", "--from", up.base, "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    npm_installs = {(key.rsplit("node_modules/", 1)[1], entry["version"]) for key, entry in lock["packages"].items() if key}
    assert npm_installs <= imported(root) == CLOSURE  # each version npm would pick, nothing it would not
    assert "not closed" not in out + err and out.strip() == "imported 6, already present 0, skipped 0"
    assert registry_gen(["verify", str(root / "public")]) == 0


def test_an_import_that_is_not_closed_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as up:
        serve_graph(up)
        assert registry_gen(["import", "registry", "app@1.0.0", "--from", up.base, "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert imported(root) == {("app", "1.0.0")}
    assert out.strip() == "imported 1, already present 0, skipped 0; not closed: 3 dependencies missing"
    for missing in ("lib-a@^1.0.0 (dependencies)", "lib-b@~2.1.0 (dependencies)", "peer-x@^3.0.0 (peerDependencies)"):
        assert f"not closed: app/index.html: app@1.0.0 -> {missing}: not in this tree [dependency-missing]" in err


def test_a_lockfile_without_resolved_is_imported_and_installs_from_here(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    project = tmp_path / "project"
    with hostile_upstream() as up:
        serve_graph(up)
        lock = npm_lock(up, project, {"lib-b": "~2.1.0", "deep-c": "^1.0.0"}, "--omit-lockfile-registry-resolved", workspaces=True)
        assert all("resolved" not in lock["packages"][f"node_modules/{n}"] for n in ("lib-b", "deep-c", "lib-a"))
        assert registry_gen(["import", "lockfile", str(project / "package-lock.json"), "--from", up.base, "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert imported(root) == {("lib-b", "2.1.5"), ("deep-c", "1.4.0"), ("lib-a", "1.2.0")}
    assert out.strip() == "imported 3, already present 0, skipped 0, not applicable 1"
    assert "not applicable: local-ws: comes from a folder or file (packages/local), not from a registry" in err
    server = RegistryProcess(root).start()
    try:
        npm = Npm(tmp_path / "npm-ci", server.base)
        npm.env |= {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}
        npm.run("ci", cwd=project)  # npm fetches each entry without `resolved` from its configured registry: this one
    finally:
        server.stop()
    assert json.loads((project / "node_modules" / "lib-a" / "package.json").read_text())["version"] == "1.2.0"


def test_a_lockfile_import_fails_whenever_a_registry_package_is_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as up:
        data = up.publish("lib-b", "2.1.5")
        lock = {"name": "app", "lockfileVersion": 3, "packages": {
            "": {"name": "app"},
            "node_modules/lib-b": {"version": "2.1.5", "integrity": sri_sha512(data)},
            "node_modules/gone": {"version": "1.0.0", "integrity": sri_sha512(b"gone")},
            "node_modules/odd": {"version": "not-a-version"},
            "node_modules/from-git": {"version": "1.0.0", "resolved": "git+ssh://git@example.invalid/x.git#abc"},
            "node_modules/from-file": {"resolved": "../vendor/from-file", "link": True},
            "node_modules/from-url": {"version": "1.0.0", "resolved": "https://example.invalid/from-url.tgz"},
        }}  # fmt: skip
        (tmp_path / "package-lock.json").write_text(json.dumps(lock))
        assert registry_gen(["import", "lockfile", str(tmp_path / "package-lock.json"), "--from", up.base, "--config", str(config)]) == 1
    out, err = capsys.readouterr()
    assert imported(root) == {("lib-b", "2.1.5")}
    assert out.strip() == "imported 1, already present 0, skipped 0, not applicable 3, failed 2"
    assert "failed: gone:" in err and "answered 404" in err and "failed: odd@not-a-version: not a registry name and version" in err
    assert [line.split(":")[1].strip() for line in err.splitlines() if line.startswith("not applicable")] == ["from-git@1.0.0", "from-file", "from-url@1.0.0"]
