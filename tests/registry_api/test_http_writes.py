"""The write API over raw HTTP against a real `registry-gen serve` (one server for the module)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from registry_gen.settings import Settings
from registry_gen.state import open_state
from tests.registry_api.helpers import (
    RegistryProcess,
    add_user,
    gzip_json,
    http,
    publish_body,
    snapshot,
    tarball,
    write_package,
)
from tests.support import poll

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def owner(server: RegistryProcess) -> str:
    return add_user(server.base, "owner", "owner-password-1")


@pytest.fixture(scope="module")
def stranger(server: RegistryProcess) -> str:
    return add_user(server.base, "stranger", "stranger-password-1")


def test_spec_legacy_sequence_gets_the_listed_statuses_and_installs(server: RegistryProcess, tmp_path: Path) -> None:
    base, name, version = server.base, "legacy-seq", "1.0.0"
    add_user(base, "oldtimer", "oldtimer-password")
    basic = ("oldtimer", "oldtimer-password")  # npm 1.x sends Basic auth on every request
    data = tarball(name, version)
    manifest = {"name": name, "version": version, "description": "old", "main": "index.js", "_id": f"{name}@{version}",
                "dist": {"tarball": f"{base}{name}/-/{name}-{version}.tgz"}}

    created = http("PUT", base + name, basic=basic, body={
        "_id": name, "name": name, "description": "old", "dist-tags": {}, "versions": {}, "readme": "# old",
        "maintainers": [{"name": "oldtimer", "email": "oldtimer@example.com"}],
    })
    first_read = http("GET", base + name, headers={"Accept": "application/json"})
    tagged = http("PUT", f"{base}{name}/{version}/-tag/latest", basic=basic, body=manifest)
    second_read = http("GET", base + name, headers={"Accept": "application/json"})
    staged = server.packument(name)
    rev = second_read.json["_rev"]
    uploaded = http("PUT", f"{base}{name}/-/{name}-{version}.tgz/-rev/{rev}", basic=basic, raw=data)

    assert [created.status, first_read.status, tagged.status, second_read.status, uploaded.status] == [201, 200, 201, 200, 201]
    for reply in (created, tagged, uploaded):
        assert isinstance(reply.json, dict)  # old clients JSON.parse every body
    assert first_read.json["versions"] == {}
    for revision in (first_read.json["_rev"], rev):
        assert revision.split("-")[0].isdigit() and len(revision.split("-")[1]) >= 8
    # Tagged but not uploaded: invisible to installers.
    assert staged is not None and staged["versions"] == {}
    final = server.packument(name)
    assert final is not None and list(final["versions"]) == [version] and final["dist-tags"] == {"latest": version}
    assert (server.out / name / "-" / f"{name}-{version}.tgz").read_bytes() == data
    assert (server.content / name / f"{name}-{version}.tgz").read_bytes() == data

    project = tmp_path / "project"
    write_package(project, "consumer", "1.0.0")
    server.npm("installer").run("install", name, cwd=project)
    installed = json.loads((project / "node_modules" / name / "package.json").read_text())
    assert installed["version"] == version


def test_refused_writes_change_nothing(server: RegistryProcess, owner: str, stranger: str, tmp_path: Path) -> None:
    base, name = server.base, "guarded"
    assert http("PUT", base + name, token=owner, body=publish_body(name, "1.0.0", tarball(name, "1.0.0"))).status == 201
    rev = http("GET", base + name).json["_rev"]
    assert http("PUT", f"{base}{name}/-rev/{rev}", token=owner, body={"_id": name, "versions": {}}).status == 200  # unpublish all
    assert http("PUT", base + name, token=owner, body=publish_body(name, "1.0.1", tarball(name, "1.0.1"))).status == 201
    # The accepted writes left -/all and -/search.json to the server's debounced refresh, which
    # rewrites them on its own clock: the snapshot is taken once it has run.
    state = open_state(Settings(content_dir=server.content, out_dir=server.out))
    poll(lambda: not state.whole_documents_stale(), "the index refresh")
    before = snapshot(server.content, server.out)

    good = tarball(name, "1.0.1")
    cases = {
        "republish": (owner, publish_body(name, "1.0.1", good), 403, "previously published"),
        "unpublished number": (owner, publish_body(name, "1.0.0", tarball(name, "1.0.0")), 403, "can never be used again"),
        "stranger": (stranger, publish_body(name, "2.0.0", tarball(name, "2.0.0")), 403, "not a maintainer"),
        "no token": (None, publish_body(name, "2.0.0", tarball(name, "2.0.0")), 401, "log in"),
        "corrupt attachment": (owner, publish_body(name, "2.0.0", tarball(name, "2.0.0"), b64="%%%not-base64"), 400, "base64"),
        "size mismatch": (owner, publish_body(name, "2.0.0", tarball(name, "2.0.0"), length=12), 400, "length says 12"),
        "bad manifest": (owner, publish_body(name, "2.0.0", tarball(name, "two")), 400, "not a semantic version"),
        "name mismatch": (owner, publish_body(name, "2.0.0", tarball("other-name", "2.0.0")), 400, "names 'other-name'"),
        "not a tarball": (owner, publish_body(name, "2.0.0", b"plain text"), 400, "gzip"),
        "unknown access": (owner, publish_body(name, "2.0.0", tarball(name, "2.0.0"), access="private"), 400, "access must be"),
    }
    for label, (token, body, status, words) in cases.items():
        reply = http("PUT", base + name, token=token, body=body)
        assert (label, reply.status) == (label, status), reply.body
        assert words in reply.json["error"], (label, reply.json)
    assert http("PUT", base + name, token="not-a-token", body=publish_body(name, "2.0.0", good)).status == 401
    assert snapshot(server.content, server.out) == before

    # What npm prints for two of them: the registry's error text, after npm's own summary.
    folder = write_package(tmp_path / "pkg", name, "1.0.1")
    forced = server.npm("owner", owner).run("publish", "--force", cwd=folder, check=False)
    assert forced.returncode != 0 and "E403" in forced.stderr and "previously published" in forced.stderr
    write_package(folder, name, "3.0.0")
    refused = server.npm("stranger", stranger).run("publish", cwd=folder, check=False)
    assert refused.returncode != 0 and "E403" in refused.stderr and "not a maintainer of guarded" in refused.stderr
    assert snapshot(server.content, server.out) == before


def test_concurrent_publishes_of_different_versions_all_land(server: RegistryProcess, owner: str) -> None:
    name = "busy"
    assert http("PUT", server.base + name, token=owner, body=publish_body(name, "0.0.1", tarball(name, "0.0.1"))).status == 201
    versions = [f"1.0.{i}" for i in range(20)]

    def publish(version: str) -> int:
        return http("PUT", server.base + name, token=owner, body=publish_body(name, version, tarball(name, version))).status

    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(publish, versions))
    assert statuses == [201] * 20
    packument = server.packument(name)
    assert packument is not None and set(versions) <= set(packument["versions"])
    assert all((server.out / name / "-" / f"{name}-{v}.tgz").is_file() for v in versions)


def test_concurrent_publishes_of_one_version_exactly_one_wins(server: RegistryProcess, owner: str) -> None:
    name = "racy"
    bodies = [publish_body(name, "1.0.0", tarball(name, "1.0.0", description=f"attempt {i}")) for i in range(10)]

    def publish(body: dict[str, object]) -> tuple[int, dict[str, object]]:
        reply = http("PUT", server.base + name, token=owner, body=body)
        return reply.status, reply.json

    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(publish, bodies))
    statuses = sorted(status for status, _ in results)
    assert statuses == [201] + [403] * 9
    assert all("previously published" in str(body.get("error")) for status, body in results if status == 403)
    assert [p.name for p in (server.content / name).glob("*.tgz")] == ["racy-1.0.0.tgz"]


def test_dist_tags_owners_and_tokens_rules(server: RegistryProcess, owner: str, stranger: str) -> None:
    base, name = server.base, "tagged"
    for version in ("1.0.0", "2.0.0-rc.1"):
        tag = "latest" if version == "1.0.0" else "next"
        assert http("PUT", base + name, token=owner, body=publish_body(name, version, tarball(name, version), tag=tag)).status == 201
    tags_url = f"{base}-/package/{name}/dist-tags"
    assert http("GET", tags_url).json == {"latest": "1.0.0", "next": "2.0.0-rc.1"}
    assert http("PUT", tags_url + "/beta", token=owner, body="2.0.0-rc.1").status == 201
    assert http("GET", tags_url).json["beta"] == "2.0.0-rc.1"
    assert http("PUT", tags_url + "/gamma", token=owner, body="9.9.9").status == 404
    assert http("PUT", tags_url + "/1.2.3", token=owner, body="1.0.0").status == 400
    assert http("DELETE", tags_url + "/latest", token=owner).status == 400
    assert http("DELETE", tags_url + "/beta", token=stranger).status == 403
    assert http("DELETE", tags_url + "/beta", token=owner).status == 200
    assert "beta" not in http("GET", tags_url).json

    rev_url = f"{base}{name}/-rev/{http('GET', base + name).json['_rev']}"  # npm owner sends the rev it read
    unknown = http("PUT", rev_url, token=owner, body={"_id": name, "maintainers": [{"name": "nobody-here"}]})
    assert unknown.status == 404 and "nobody-here" in unknown.json["error"]
    assert http("PUT", rev_url, token=owner, body={"_id": name, "maintainers": []}).status == 400
    # Emails are shown to logged-in callers only.
    assert "email" not in http("GET", f"{base}-/user/org.couchdb.user:owner").json
    assert http("GET", f"{base}-/user/org.couchdb.user:owner", token=stranger).json["email"] == "owner@example.com"
    assert http("GET", f"{base}-/user/org.couchdb.user:ghost").status == 404

    # A read-only token reads but cannot write.
    created = http("POST", f"{base}-/npm/v1/tokens", token=owner, body={"password": "owner-password-1", "readonly": True})
    assert created.status == 201 and created.json["readonly"] is True
    readonly = created.json["token"]
    assert http("GET", f"{base}-/whoami", token=readonly).json == {"username": "owner"}
    refused = http("PUT", tags_url + "/beta", token=readonly, body="1.0.0")
    assert refused.status == 403 and "read-only" in refused.json["error"]
    listed = http("GET", f"{base}-/npm/v1/tokens", token=owner).json
    assert created.json["key"] in [t["key"] for t in listed["objects"]]
    assert all(readonly != t["token"] for t in listed["objects"])  # only prefixes are listed
    assert http("DELETE", f"{base}-/npm/v1/tokens/token/{created.json['key']}", token=owner).status == 200
    assert http("GET", f"{base}-/whoami", token=readonly).status == 401


def test_service_endpoints_and_static_headers(server: RegistryProcess, owner: str) -> None:
    base, name = server.base, "served-pkg"
    assert http("PUT", base + name, token=owner, body=publish_body(name, "1.0.0", tarball(name, "1.0.0", keywords=["findme"]))).status == 201
    found = http("GET", f"{base}-/v1/search?text=keywords:findme&size=5").json
    assert [o["package"]["name"] for o in found["objects"]] == [name] and found["total"] == 1
    assert http("GET", f"{base}-/v1/search?text=zzz-no-such-thing").json["total"] == 0
    assert http("GET", f"{base}-/ping").json == {}
    audit = http("POST", f"{base}-/npm/v1/security/advisories/bulk", raw=gzip_json({name: ["1.0.0"]}),
                 headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert audit.status == 404 and "no advisory source" in audit.json["error"]  # no source: no clean bill

    full = http("GET", base + name, headers={"Accept": "application/json"})
    assert full.headers["content-type"] == "application/json" and "readme" in full.json
    assert full.headers["cache-control"] == "public, max-age=0, must-revalidate" and "Accept" in full.headers["vary"]
    corgi = http("GET", base + name, headers={"Accept": "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"})
    assert corgi.headers["content-type"] == "application/vnd.npm.install-v1+json" and "readme" not in corgi.json
    again = http("GET", base + name, headers={"Accept": "application/json", "If-None-Match": full.headers["etag"]})
    assert again.status == 304 and again.body == b""
    tgz = http("GET", f"{base}{name}/-/{name}-1.0.0.tgz")
    assert tgz.headers["content-type"] == "application/octet-stream" and "immutable" in tgz.headers["cache-control"]
    missing = http("GET", base + "no-such-package")
    assert missing.status == 404 and missing.json == {"error": "not found"}
    page = http("GET", f"{base}-/web/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    # The build's private state sits beside the served folder, and the old in-tree place is empty.
    assert (server.root / "public.state" / "state.sqlite3").is_file()
    assert not (server.out / ".registry-gen").exists()
    assert http("GET", f"{base}.registry-gen/state.sqlite3").status == 404
    assert http("GET", f"{base}.registry-gen/").status == 404
