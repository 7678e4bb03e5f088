"""The npm profile's rules, one edge case each (synthetic descriptors), and the check config keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry_gen.cli import main
from registry_gen.lint import lint_manifest
from registry_gen.lint_npm import RULES, is_spdx_expression
from registry_gen.ranges import parse_spec

BASE = {"name": "pkg", "version": "1.0.0"}

# Values npm's package.json documentation defines as valid: no finding at all.
VALID: list[dict[str, Any]] = [
    {"license": "MIT"},
    {"license": "(MIT OR Apache-2.0)"},
    {"license": "GPL-2.0-or-later WITH Classpath-exception-2.0"},
    {"license": "Apache-2.0 AND (BSD-3-Clause OR GPL-2.0+)"},
    {"license": "LicenseRef-Proprietary"},
    {"license": "SEE LICENSE IN LICENSE.txt"},
    {"license": "UNLICENSED"},
    {"author": "Barney Rubble <b@rubble.com> (http://barnyrubble.tumblr.com/)"},
    {"author": {"name": "Barney Rubble", "email": "b@rubble.com", "url": "http://barnyrubble.tumblr.com/"}},
    {"author": ""},  # what npm init writes
    {"contributors": ["A <a@example.org>", {"name": "B"}]},
    {"funding": [{"type": "individual", "url": "http://example.com/donate"}, "http://example.com/more"]},
    {"bugs": "https://github.com/owner/project/issues"},
    {"bugs": "bugs@example.org"},
    {"bugs": {"url": "https://example.org/issues", "email": "bugs@example.org"}},
    {"repository": "github:user/repo"},
    {"repository": "npm/npm"},
    {"repository": {"type": "git", "url": "git+https://github.com/npm/cli.git", "directory": "workspaces/x"}},
    {"bin": "./cli.js"},
    {"bin": {"my-program": "./path/to/program"}},
    {"man": ["./man/doc.1"]},
    {"browser": {"./server.js": "./browser.js", "fs": False}},
    {"dependencies": {
        "foo": "1.0.0 - 2.9999.9999", "bar": ">=1.0.2 <2.1.2", "baz": ">1.0.2 <=2.3.4", "boo": "2.0.1",
        "qux": "<1.0.0 || >=2.3.1 <2.4.5 || >=2.5.2 <3.0.0", "asd": "http://asdf.com/asdf.tar.gz", "til": "~1.2",
        "elf": "~1.2.3", "two": "2.x", "thr": "3.3.x", "lat": "latest", "dyl": "file:../dyl", "kpg": "npm:pkg@1.0.0",
        "gh": "expressjs/express", "git": "git+ssh://git@github.com:npm/cli.git#v1.0.27", "ws": "workspace:*",
    }},
    {"peerDependencies": {"tea": "2.x"}, "peerDependenciesMeta": {"tea": {"optional": True}}},
    {"bundleDependencies": ["renderized"], "dependencies": {"renderized": "^1"}},
    {"bundleDependencies": True},
    {"overrides": {"foo": {".": "1.0.0", "bar": "1.0.0"}}},
    {"engines": {"node": ">=0.10.3 <15", "npm": "~1.0.20"}},
    {"os": ["darwin", "linux"], "cpu": ["x64", "ia32", "arm64", "!mips"], "libc": ["glibc"]},
    {"os": ["!win32"], "cpu": ["loong64", "riscv64", "s390x", "ppc64"]},
    {"devEngines": {"runtime": {"name": "node", "onFail": "error"}}},
    {"private": True, "publishConfig": {"access": "public"}, "workspaces": ["./packages/*"]},
    {"workspaces": {"packages": ["a/*"]}},
    {"type": "module", "exports": {".": {"import": "./index.mjs", "require": "./index.cjs"}}, "imports": {"#dep": "dep"}},
    {"types": "./index.d.ts", "typings": "./index.d.ts", "main": "./index.js", "files": ["lib/"]},
    {"keywords": ["a", "b"], "homepage": "https://github.com/owner/project#readme", "description": "A package"},
    {"scripts": {"test": "node test.js"}, "config": {"port": "8080"}, "directories": {"lib": "lib"}},
]


@pytest.mark.parametrize("fields", VALID, ids=lambda f: ",".join(f))
def test_npm_valid_values_have_no_finding(fields: dict[str, Any]) -> None:
    assert lint_manifest({**BASE, **fields}) == []


# (fields, rule, severity)
FINDINGS: list[tuple[dict[str, Any], str, str]] = [
    ({"keywords": "a, b"}, "keywords-string", "info"),
    ({"keywords": [1, 2]}, "keywords-type", "warning"),
    ({"engines": ["node >= 0.2.0"]}, "engines-array", "info"),
    ({"engines": "node"}, "engines-type", "warning"),
    ({"main": False}, "main-type", "info"),
    ({"dependencies": ["a@1", "b"]}, "dependencies-legacy", "info"),
    ({"dependencies": {"a": 1}}, "dependency-spec-type", "warning"),
    ({"dependencies": {"a": "not a range at all"}}, "dependency-spec-invalid", "warning"),
    ({"dependencies": 5}, "dependencies-type", "warning"),
    ({"license": "MIT License"}, "license-spdx", "warning"),
    ({"license": {"type": "MIT", "url": "https://opensource.org/licenses/MIT"}}, "license-legacy", "info"),
    ({"licenses": [{"type": "MIT"}]}, "license-legacy", "info"),
    ({"bugs": "please tell someone"}, "bugs-invalid", "warning"),
    ({"author": {"email": "a@example.org"}}, "person-invalid", "warning"),
    ({"contributors": "A <a@example.org>"}, "people-not-array", "info"),
    ({"os": "linux"}, "os-string", "info"),
    ({"os": ["beos"]}, "os-unknown", "warning"),
    ({"os": ["macos"]}, "os-renamed", "info"),
    ({"cpu": ["x86_64"]}, "cpu-renamed", "info"),
    ({"cpu": ["sparc"]}, "cpu-unknown", "warning"),
    ({"libc": ["uclibc"]}, "libc-unknown", "warning"),
    ({"bin": ["cli.js"]}, "bin-type", "warning"),
    ({"type": "esm"}, "type-value", "warning"),
    ({"private": "true"}, "private-type", "info"),
    ({"repository": {"type": "git"}}, "repository-type", "warning"),
    ({"repositories": [{"type": "git", "url": "x"}]}, "repositories-plural", "info"),
    ({"name": "JSONStream"}, "name-legacy", "info"),
    ({"version": "v1.0.0"}, "version-cleaned", "info"),
    ({"name": "Bad Name"}, "name-valid", "error"),
    ({"version": "one"}, "version-semver", "error"),
]


@pytest.mark.parametrize(("fields", "rule", "severity"), FINDINGS, ids=[f[1] for f in FINDINGS])
def test_each_npm_rule_and_its_severity(fields: dict[str, Any], rule: str, severity: str) -> None:
    found = {(lint.rule, lint.severity) for lint in lint_manifest({**BASE, **fields})}
    assert found == {(rule, severity)}


def test_not_an_object_is_an_error_in_every_profile() -> None:
    for profile in ("npm", "commonjs"):
        assert [(lint.rule, lint.severity) for lint in lint_manifest(["x"], profile)] == [("manifest-object", "error")]


@pytest.mark.parametrize("text", ["MIT OR", "(MIT", "MIT Apache-2.0", "AND MIT", "MIT WITH", "", "BSD & MIT"])
def test_malformed_spdx_expressions(text: str) -> None:
    assert not is_spdx_expression(text)


def test_config_keys_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "content").mkdir()
    config = tmp_path / "registry.yaml"
    config.write_text("check_profile: strictest\n")
    assert main(["check", "--config", str(config)]) == 1
    assert "check_profile must be one of npm, commonjs" in capsys.readouterr().err
    config.write_text("check_ignore: engines-array\n")
    assert main(["check", "--config", str(config)]) == 1
    assert "check_ignore must be a list of rule ids" in capsys.readouterr().err


def test_a_missing_content_folder_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "contnet")]) == 1
    assert "contnet: no such content folder" in capsys.readouterr().err


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(sorted({*RULES, "name", "version", "engine", "builtin", "implements", "repositories", "licenses"}))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(FIELDS, JSON_VALUES, max_size=6), st.sampled_from(["npm", "commonjs"]))
def test_any_json_descriptor_gives_findings_never_an_exception(raw: dict[str, Any], profile: str) -> None:
    for lint in lint_manifest(raw, profile):
        assert lint.severity in ("error", "warning", "info") and lint.rule


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_spec_text_is_classified(spec: str) -> None:
    assert parse_spec("pkg", spec).kind
