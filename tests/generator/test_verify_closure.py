"""`registry-gen verify` checks the dependency closure of every `latest` version (issue 11, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry_gen.cli import main
from tests.support import make_tarball

BASE = "http://127.0.0.1:9/"


def _build(content: Path, out: Path) -> None:
    assert main(["build", str(content), "--out", str(out), "--base-url", BASE]) == 0


def _verify(out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", str(out), *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def app_content(tmp_path: Path) -> Path:
    """An app that needs a library (a range, an alias and a tag), and the library it needs."""
    content = tmp_path / "content"
    make_tarball(content, "app", "1.0.0", dependencies={"lib": "^1.2.0", "lib-alias": "npm:lib@~1.3", "helper": "beta"})
    make_tarball(content, "app", "2.0.0", dependencies={"lib": "^1.2.0 || ^2.0.0", "helper": "beta"})
    for version in ("1.2.0", "1.3.5"):
        make_tarball(content, "lib", version)
    make_tarball(content, "helper", "1.0.0")
    make_tarball(content, "helper", "1.1.0-beta.1", filename="helper-beta.tgz")
    (content / "registry-meta.json").write_text('{"name": "helper", "dist-tags": {"beta": "1.1.0-beta.1"}}')
    return content


def test_a_complete_tree_passes(app_content: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _build(app_content, tmp_path / "public")
    code, output = _verify(tmp_path / "public", capsys)
    assert code == 0, output
    assert "0 problems" in output and "dependency-missing" not in output


def test_a_tree_built_without_a_dependency_reports_it(app_content: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (app_content / "lib-1.2.0.tgz").unlink()
    (app_content / "lib-1.3.5.tgz").unlink()
    _build(app_content, tmp_path / "public")
    code, output = _verify(tmp_path / "public", capsys)
    assert code == 1
    assert "app/index.html: app@2.0.0 -> lib@^1.2.0 || ^2.0.0 (dependencies): not in this tree [dependency-missing]" in output
    assert "1 problems" in output  # only `latest` (2.0.0) is checked; 1.0.0's alias is not


def test_a_version_outside_the_range_is_missing_even_with_allow_external(
    app_content: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tarball(app_content, "app", "3.0.0", dependencies={"lib": "^3.0.0"})
    _build(app_content, tmp_path / "public")
    for extra in ((), ("--allow-external",)):
        code, output = _verify(tmp_path / "public", capsys, *extra)
        assert code == 1
        assert "app@3.0.0 -> lib@^3.0.0 (dependencies): no version in this tree satisfies it [dependency-missing]" in output


def test_allow_external_lists_absent_packages_and_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = tmp_path / "content"
    make_tarball(content, "app", "1.0.0", dependencies={"left-pad": "^1.3.0"}, peerDependencies={"react": ">=17"})
    _build(content, tmp_path / "public")
    code, output = _verify(tmp_path / "public", capsys)
    assert code == 1 and output.count("[dependency-missing]") == 2
    code, output = _verify(tmp_path / "public", capsys, "--allow-external")
    assert code == 0, output
    assert "external: app/index.html: app@1.0.0 -> left-pad@^1.3.0 (dependencies): not in this tree" in output
    assert "external: app/index.html: app@1.0.0 -> react@>=17 (peerDependencies): not in this tree" in output
    assert "0 problems, 0 notes, 2 external dependencies" in output


def test_optional_misses_are_notes_and_non_registry_specs_are_external(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = tmp_path / "content"
    make_tarball(
        content, "native", "1.0.0",
        optionalDependencies={"native-linux-x64": "1.0.0"},
        peerDependencies={"bufferutil": "^4.0.1"},
        peerDependenciesMeta={"bufferutil": {"optional": True}},
        dependencies={"fork": "github:someone/fork#v2", "local": "file:../local", "tool": "https://example.org/tool.tgz"},
    )
    _build(content, tmp_path / "public")
    code, output = _verify(tmp_path / "public", capsys)
    assert code == 0, output
    assert "note: native/index.html: native@1.0.0 -> native-linux-x64@1.0.0 (optionalDependencies)" in output
    assert "note: native/index.html: native@1.0.0 -> bufferutil@^4.0.1 (peerDependencies)" in output
    assert "external: native/index.html: native@1.0.0 -> fork@github:someone/fork#v2 (dependencies; not checked) [dependency-git]" in output
    assert "[dependency-file]" in output and "[dependency-url]" in output
    assert "0 problems, 2 notes, 3 external dependencies" in output


def test_bundled_dependencies_ship_inside_the_tarball(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = tmp_path / "content"
    files = {"index.js": "module.exports = require('inner');\n", "node_modules/inner/package.json": '{"name":"inner","version":"1.0.0"}'}
    make_tarball(content, "bundler", "1.0.0", files=files, dependencies={"inner": "^1.0.0"}, bundleDependencies=["inner"])
    make_tarball(content, "all-bundled", "1.0.0", dependencies={"inner": "^1.0.0", "other": "2"}, bundleDependencies=True)
    make_tarball(content, "half-bundled", "1.0.0", dependencies={"inner": "^1.0.0", "other": "2"}, bundledDependencies=["inner"])
    _build(content, tmp_path / "public")
    code, output = _verify(tmp_path / "public", capsys)
    assert code == 1
    assert "half-bundled@1.0.0 -> other@2 (dependencies): not in this tree [dependency-missing]" in output
    assert "inner@" not in output and "1 problems" in output


def test_a_spec_npm_cannot_read_is_a_problem_even_with_allow_external(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = tmp_path / "content"
    make_tarball(content, "odd", "1.0.0", dependencies={"lib": "one point oh"}, optionalDependencies={"extra": "??? maybe"})
    _build(content, tmp_path / "public")
    code, output = _verify(tmp_path / "public", capsys, "--allow-external")
    assert code == 1
    assert "odd@1.0.0 -> lib@one point oh (dependencies): not a range, tag, alias, git, URL or file spec npm can read [dependency-missing]" in output
    assert "note: odd/index.html: odd@1.0.0 -> extra@??? maybe (optionalDependencies)" in output
    assert "1 problems, 1 notes, 0 external" in output


def test_a_dist_tag_that_is_no_string_is_reported_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = tmp_path / "content"
    make_tarball(content, "app", "1.0.0", dependencies={"lib": "latest"})
    make_tarball(content, "lib", "1.0.0")
    _build(content, tmp_path / "public")
    document_path = tmp_path / "public" / "lib" / "index.html"
    document = json.loads(document_path.read_text())
    document["dist-tags"]["latest"] = ["1.0.0"]
    document_path.write_text(json.dumps(document))
    code, output = _verify(tmp_path / "public", capsys)
    assert code == 1
    assert "[latest-dangling]" in output
    assert "app@1.0.0 -> lib@latest (dependencies): no version in this tree satisfies it [dependency-missing]" in output
