"""npm audit must not lie (issue 13): recorded advisories are reported, no source is no claim."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen.advisories import InvalidAdvisory, bulk_report, parse_advisory
from registry_gen.settings import Settings
from tests.registry_api.helpers import RegistryProcess, http, tarball

pytestmark = pytest.mark.slow

OSV = {
    "id": "GHSA-test-0001-aaaa", "summary": "Prototype pollution in audit-target",
    "affected": [{"package": {"ecosystem": "npm", "name": "audit-target"},
                  "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "1.1.0"}]}]}],
    "database_specific": {"severity": "HIGH", "cwe_ids": ["CWE-1321"]},
    "references": [{"type": "ADVISORY", "url": "https://example.invalid/GHSA-test-0001-aaaa"}],
}
GITHUB = {
    "ghsa_id": "GHSA-test-0002-bbbb", "summary": "ReDoS", "severity": "medium", "html_url": "https://example.invalid/2",
    "vulnerabilities": [{"package": {"ecosystem": "npm", "name": "other"}, "vulnerable_version_range": ">= 2.0.0, < 2.3.1",
                         "first_patched_version": "2.3.1"}],
    "cvss": {"score": 5.3, "vector_string": "CVSS:3.1/AV:N"},
}


def test_osv_and_github_advisories_become_npm_bulk_entries() -> None:
    osv = parse_advisory(json.dumps(OSV).encode(), "osv.json")
    github = parse_advisory(json.dumps(GITHUB).encode(), "gh.json")
    assert (osv[0].name, osv[0].vulnerable_versions, osv[0].severity) == ("audit-target", "<1.1.0", "high")
    assert (github[0].vulnerable_versions, github[0].severity) == (">= 2.0.0 < 2.3.1", "moderate")
    report = bulk_report(osv + github, {"audit-target": ["1.0.0"]})
    assert list(report) == ["audit-target"] and report["audit-target"][0]["url"].endswith("0001-aaaa")


@pytest.mark.parametrize("document", [{}, {"affected": [{"package": {"ecosystem": "PyPI", "name": "x"}}], "id": "X"},
                                      {**GITHUB, "severity": "apocalyptic"}, {**OSV, "affected": [{"package": {"ecosystem": "npm", "name": "a"}, "ranges": [{"type": "SEMVER", "events": [{"introduced": "not a version"}]}]}]}])
def test_unusable_advisories_are_refused_with_the_file_named(document: dict[str, object]) -> None:
    with pytest.raises(InvalidAdvisory, match="bad.json"):
        parse_advisory(json.dumps(document).encode(), "bad.json")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    root = tmp_path_factory.mktemp("audit")
    (root / "content").mkdir()
    for version in ("1.0.0", "1.1.0"):
        (root / "content" / f"audit-target-{version}.tgz").write_bytes(tarball("audit-target", version))
    process = RegistryProcess(root).start()
    try:
        yield process
    finally:
        process.stop()


def _project(registry: RegistryProcess, name: str) -> tuple[Path, object]:
    npm = registry.npm(name)
    npm.env["npm_config_audit"] = "true"
    project = registry.root / name
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": name, "version": "1.0.0", "dependencies": {"audit-target": "1.0.0"}}))
    npm.run("install", "--no-audit", cwd=project)
    return project, npm


def test_without_advisories_npm_audit_does_not_claim_zero_vulnerabilities(registry: RegistryProcess) -> None:
    assert not (registry.content / "advisories").exists()
    project, npm = _project(registry, "no-source")
    result = npm.run("audit", cwd=project, check=False)  # type: ignore[attr-defined]
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "found 0 vulnerabilities" not in output
    assert "no advisory source" in output
    bulk = http("POST", registry.base + "-/npm/v1/security/advisories/bulk", raw=gzip.compress(b'{"audit-target":["1.0.0"]}'),
                headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert bulk.status == 404


def test_a_recorded_advisory_is_reported_by_npm_audit_with_severity_and_fix(registry: RegistryProcess) -> None:
    advisory = registry.root / "osv.json"
    advisory.write_text(json.dumps(OSV))
    added = subprocess.run([sys.executable, "-m", "registry_gen", "advisory", "add", str(advisory), "--config", str(registry.root / "registry.yaml")],
                           capture_output=True, text=True, cwd=registry.root)
    assert added.returncode == 0, added.stderr
    project, npm = _project(registry, "with-source")
    result = npm.run("audit", "--json", cwd=project, check=False)  # type: ignore[attr-defined]
    report = json.loads(result.stdout)
    found = report["vulnerabilities"]["audit-target"]
    assert found["severity"] == "high" and found["range"] == "1.0.0"  # npm narrows the range to known versions
    assert found["via"][0]["range"] == "<1.1.0" and found["via"][0]["severity"] == "high"
    assert found["fixAvailable"] == {"name": "audit-target", "version": "1.1.0", "isSemVerMajor": False}
    assert found["via"][0]["url"] == OSV["references"][0]["url"]  # type: ignore[index]
    assert report["metadata"]["vulnerabilities"]["high"] == 1


def test_an_admin_records_an_advisory_over_the_api(tmp_path: Path) -> None:
    root = tmp_path
    (root / "content").mkdir()
    (root / "registry.yaml").write_text("signup: admin\n")
    added = subprocess.run([sys.executable, "-m", "registry_gen", "user", "add", "boss", "--admin", "--password-stdin",
                            "--config", str(root / "registry.yaml")], input="boss-password-1\n", capture_output=True, text=True, cwd=root)
    assert added.returncode == 0, added.stderr
    process = RegistryProcess(root).start()
    try:
        token = http("POST", process.base + "-/user-api/tokens", body={"username": "boss", "password": "boss-password-1"}).json["token"]
        assert http("POST", process.base + "-/user-api/advisories", token=token, body={"id": "nothing"}).status == 400
        recorded = http("POST", process.base + "-/user-api/advisories", token=token, body=GITHUB)
        assert recorded.status == 201 and recorded.json["advisories"][0]["package"] == "other"
        bulk = http("POST", process.base + "-/npm/v1/security/advisories/bulk", raw=gzip.compress(b'{"other":["2.1.0"]}'),
                    headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
        assert bulk.status == 200 and bulk.json["other"][0]["severity"] == "moderate"
    finally:
        process.stop()
