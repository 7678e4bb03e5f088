"""`registry-gen check` on real tarballs: nothing npm documents as valid is reported (issue 11, item 5)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import webtest

from registry_gen.archive import read_archive_bytes
from registry_gen.build import run_build
from registry_gen.check import check_content
from registry_gen.cli import main
from registry_gen.lint_commonjs import commonjs_problems
from registry_gen.settings import Settings
from tests.registry_api.helpers import publish_body
from tests.support import NPM

# The legacy shapes in the sample, each a note (info) about what npm normalises, nothing to fix.
EXPECTED_INFO = {
    ("lodash-4.17.21.tgz", "keywords-string"),
    ("jsonparse-1.3.1.tgz", "engines-array"),
    ("ansi-html-0.0.9.tgz", "engines-array"),
    ("dunder-proto-1.0.1.tgz", "main-type"),
    ("math-intrinsics-1.1.0.tgz", "main-type"),
    ("JSONStream-1.3.5.tgz", "name-legacy"),
}


def _settings(content: Path, **changes: object) -> Settings:
    return Settings(content_dir=content, out_dir=content.parent / "public", base_url="http://127.0.0.1:9/", **changes)


def _manifest(folder: Path, filename: str) -> dict:
    return read_archive_bytes((folder / filename).read_bytes()).manifest


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["check", *args])
    return code, capsys.readouterr().out


def test_npm_documented_values_give_no_warning(real_sample: Path) -> None:
    # The values the old check flagged are really there: darwin and arm64 are npm's spellings,
    # which the specification's profile reports and npm's must not.
    assert _manifest(real_sample, "fsevents-2.3.3.tgz")["os"] == ["darwin"]
    assert _manifest(real_sample, "esbuild-darwin-arm64-0.20.2.tgz")["cpu"] == ["arm64"]
    assert _manifest(real_sample, "rollup-rollup-linux-x64-musl-4.9.0.tgz")["libc"] == ["musl"]
    assert {p.rule for p in commonjs_problems(_manifest(real_sample, "fsevents-2.3.3.tgz"))} >= {"os-spelling"}
    report = check_content(_settings(real_sample))
    assert report.archives == 23
    assert [str(f) for f in report.findings if f.severity != "info"] == []
    assert {(f.path, f.rule) for f in report.findings} == EXPECTED_INFO


def test_the_summary_counts_each_rule_most_frequent_first(real_sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = _run([str(real_sample)], capsys)
    assert code == 0
    listed = Counter(re.findall(r"^\S+: info: \S+: .* \[([a-z-]+)\]$", output, re.MULTILINE))
    summary = re.findall(r"^\s+(\d+)  (error|warning|info)\s+([a-z-]+)$", output.split("by rule:\n", 1)[1], re.MULTILINE)
    assert [(rule, int(n)) for n, _, rule in summary] == sorted(listed.items(), key=lambda item: (-item[1], item[0]))
    assert summary == [("2", "info", "engines-array"), ("2", "info", "main-type"), ("1", "info", "keywords-string"), ("1", "info", "name-legacy")]
    assert output.rstrip().endswith("checked 23 archives (profile npm): 0 errors, 0 warnings, 6 info")
    assert main(["check", str(real_sample), "--strict"]) == 0  # npm's profile has nothing to fail on


def test_ignore_drops_a_rule_from_the_option_and_from_the_config(
    real_sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, output = _run([str(real_sample), "--ignore", "engines-array", "--ignore", "main-type"], capsys)
    assert code == 0
    assert "[engines-array]" not in output and "[main-type]" not in output and "[keywords-string]" in output
    assert output.rstrip().endswith("0 errors, 0 warnings, 2 info; 4 ignored")
    assert main(["check", str(real_sample), "--ignore", "engines-arrays"]) == 0
    assert "note: ignored rule 'engines-arrays' matched no finding" in capsys.readouterr().err
    config = tmp_path / "registry.yaml"
    config.write_text(f"content_dir: {real_sample}\ncheck_ignore: [keywords-string]\n")
    code, output = _run(["--config", str(config), "--format", "json"], capsys)
    document = json.loads(output)
    assert document["ignored"] == {"keywords-string": 1}
    assert "keywords-string" not in {f["rule"] for f in document["findings"]}


def test_json_output_carries_findings_counts_and_the_summary(real_sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = _run([str(real_sample), "--format", "json"], capsys)
    document = json.loads(output)
    assert code == 0
    assert document["archives"] == 23 and document["profile"] == "npm"
    assert document["counts"] == {"error": 0, "warning": 0, "info": 6}
    assert {(f["path"], f["rule"]) for f in document["findings"]} == EXPECTED_INFO
    assert document["rules"][0] == {"rule": "engines-array", "severity": "info", "count": 2}


def test_the_commonjs_profile_reports_the_specification_rules(
    real_sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(_run([str(real_sample), "--profile", "commonjs", "--format", "json"], capsys)[1])
    found = {(f["path"], f["rule"]) for f in document["findings"] if f["severity"] == "warning"}
    assert ("fsevents-2.3.3.tgz", "os-spelling") in found  # darwin is npm's spelling of macos
    assert ("esbuild-darwin-arm64-0.20.2.tgz", "cpu-value") in found  # arm64 is not in the spec's list
    assert ("JSONStream-1.3.5.tgz", "name-characters") in found
    assert ("sharp-0.33.5.tgz", "contributors-object") in found  # people as "Name <email>" strings
    assert main(["check", str(real_sample), "--profile", "commonjs", "--strict"]) == 1
    config = tmp_path / "registry.yaml"
    config.write_text(f"content_dir: {real_sample}\ncheck_profile: commonjs\n")
    assert json.loads(_run(["--config", str(config), "--format", "json"], capsys)[1])["profile"] == "commonjs"


def test_archives_the_build_refuses_are_errors(real_sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = tmp_path / "content"
    shutil.copytree(real_sample, content)
    data = (content / "lodash-4.17.21.tgz").read_bytes()
    (content / "torn.tgz").write_bytes(data[: len(data) // 2])
    code, output = _run([str(content)], capsys)
    assert code == 1
    assert re.search(r"^torn\.tgz: error: \(archive\): .* \[corrupt-archive\]$", output, re.MULTILINE)
    assert "1 error," in output


def test_a_package_published_through_the_api_has_no_finding(tmp_path: Path) -> None:
    from user_api.credentials import PasswordHasher
    from user_api.server import create_server_app
    from user_api.store import open_user_store

    project = tmp_path / "project"
    project.mkdir()
    env_home = {"HOME": str(tmp_path / "home"), "PATH": os.environ["PATH"]}
    subprocess.run([NPM, "init", "-y"], cwd=project, env=env_home, check=True, capture_output=True, timeout=120)
    (project / "index.js").write_text("module.exports = 1;\n")
    packed = subprocess.run([NPM, "pack", "--json"], cwd=project, env=env_home, check=True, capture_output=True, text=True, timeout=120)
    tarball = (project / json.loads(packed.stdout)[0]["filename"]).read_bytes()
    settings = _settings(tmp_path / "content", data_dir=tmp_path / "data", signup="open")  # npm adduser signs up
    settings.content_dir.mkdir()
    store = open_user_store(settings, hasher=PasswordHasher(time_cost=1, memory_kib=8, parallelism=1))
    try:
        run_build(settings)
        app = webtest.TestApp(create_server_app(settings, store))
        token = app.put_json("/-/user/org.couchdb.user:alice", {"name": "alice", "password": "password-123", "email": "alice@example.com"}, status=201).json["token"]
        app.put_json("/project", publish_body("project", "1.0.0", tarball), headers={"Authorization": f"Bearer {token}"}, status=201)
    finally:
        store.close()
    report = check_content(settings)
    assert report.archives == 1
    assert report.findings == []
