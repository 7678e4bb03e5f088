"""Issue 26: every writer's change is in the served tree when its command or request returns.

One registry set up as a user sets one up (`registry.yaml` with relative `content` and `public`,
a port and a base_url), served by a real `registry-gen serve` started with no options, in its
folder. Each row of WRITES performs one write (an HTTP request to that server, or the CLI as a
subprocess in the same folder while the server runs) and then reads, through the server's HTTP
(what clients see), that the change is served: at once, with no wait and no manual build. Each row
first checks that the change is not served yet, so the check can fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from registry_gen.importers.integrity import sri_sha512
from registry_gen.storage import archive_key
from tests.hosts.servers import free_port
from tests.importers.test_orchestration import verdaccio_storage
from tests.registry_api.helpers import RegistryProcess, add_user, gzip_json, http, publish_body, tarball

pytestmark = pytest.mark.slow

ADMIN = ("boss", "boss-password-1")
# Packages already in content/ when the server starts, each naming a maintainer without an account.
UNBOUND = {"claim-by-cli": "claimer-cli", "claim-by-api": "claimer-api"}


@dataclass
class World:
    """The registry under test (`served`), the upstream imports read from, and who is who."""

    root: Path
    served: RegistryProcess
    upstream: RegistryProcess
    tokens: dict[str, str] = field(default_factory=dict)

    def cli(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        """`registry-gen ARGS` in the registry's folder, as its operator types it (./registry.yaml)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        done = subprocess.run([sys.executable, "-m", "registry_gen", *args], cwd=self.root, env=env,
                              input=stdin, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def get(self, path: str) -> Any:
        """GET through the server, anonymously; the JSON body, or None when it is not served (404)."""
        reply = http("GET", self.served.base + path, headers={"Accept": "application/json"})
        assert reply.status in (200, 404), (path, reply.status, reply.body[:300])
        return reply.json if reply.status == 200 else None

    def text(self, path: str) -> str:
        reply = http("GET", self.served.base + path)
        return reply.body.decode("utf-8", "replace") if reply.status == 200 else ""

    def publish(self, user: str, name: str, version: str) -> None:
        reply = http("PUT", self.served.base + quote(name, safe="@"), token=self.tokens[user],
                     body=publish_body(name, version, tarball(name, version)))  # fmt: skip
        assert reply.status == 201, reply.body

    def write(self, method: str, path: str, user: str, body: Any) -> None:
        reply = http(method, self.served.base + path, token=self.tokens[user], body=body)
        assert reply.status in (200, 201), (method, path, reply.status, reply.body)


def _seed_unbound_packages(content: Path) -> None:
    for name, maintainer in UNBOUND.items():
        (content / name).mkdir(parents=True)
        (content / archive_key(name, "1.0.0")).write_bytes(tarball(name, "1.0.0"))
        (content / name / "registry-meta.json").write_text(json.dumps({"name": name, "maintainers": [{"name": maintainer}]}))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    upstream = RegistryProcess(tmp_path_factory.mktemp("upstream"))
    for name in ("imported-by-registry", "imported-by-lockfile"):
        (upstream.content / name).mkdir(parents=True)
        (upstream.content / archive_key(name, "1.0.0")).write_bytes(tarball(name, "1.0.0"))
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    (root / "registry.yaml").write_text(
        f"content_dir: content\nout_dir: public\ndata_dir: data\nport: {port}\nbase_url: http://127.0.0.1:{port}/\nsignup: open\n"
    )
    served = RegistryProcess(root, config_only=True)
    _seed_unbound_packages(served.content)
    found = World(root, served, upstream)
    found.cli("user", "add", ADMIN[0], "--admin", "--password-stdin", stdin=ADMIN[1] + "\n")
    upstream.start()
    served.start()
    try:
        found.tokens["boss"] = str(http("POST", served.base + "-/user-api/tokens",
                                        body={"username": ADMIN[0], "password": ADMIN[1]}).json["token"])  # fmt: skip
        for user in ("alice", "bob", "leaver-api", "leaver-cli", *UNBOUND.values()):
            found.tokens[user] = add_user(served.base, user, f"{user}-password-1", f"{user}@people.example")
        yield found
    finally:
        served.stop()
        upstream.stop()


# ---------------------------------------------------------------- what "visible" means, per write


def _serves_version(name: str, version: str) -> Callable[[World], bool]:
    """The document lists the version, its tarball downloads with the document's integrity, and
    the package's HTML page exists."""

    def check(world: World) -> bool:
        document = world.get(quote(name, safe="@"))
        entry = (document or {}).get("versions", {}).get(version)
        if entry is None:
            return False
        reply = http("GET", entry["dist"]["tarball"])
        page = http("GET", f"{world.served.base}-/web/package/{name}/")
        return reply.status == 200 and sri_sha512(reply.body) == entry["dist"]["integrity"] and page.status == 200

    return check


def _email_gone(name: str, email: str) -> Callable[[World], bool]:
    """No document, index, search answer or page the server gives out holds the email."""

    def check(world: World) -> bool:
        seen = [json.dumps(world.get(name)), json.dumps(world.get("-/all")), world.text("-/search.json"),
                world.text(f"-/web/package/{name}/"), json.dumps(world.get(f"-/v1/search?text={name}"))]  # fmt: skip
        return all(email not in text for text in seen)

    return check


def _bound_maintainer(name: str, user: str) -> Callable[[World], bool]:
    def check(world: World) -> bool:
        return {"name": user, "email": f"{user}@people.example"} in (world.get(name) or {}).get("maintainers", [])

    return check


def _audited(name: str, advisory_id: str) -> Callable[[World], bool]:
    def check(world: World) -> bool:
        reply = http("POST", world.served.base + "-/npm/v1/security/advisories/bulk", raw=gzip_json({name: ["1.0.0"]}),
                     headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})  # fmt: skip
        return reply.status == 200 and advisory_id in json.dumps(reply.json.get(name, []))

    return check


def _document_says(name: str, test: Callable[[dict[str, Any]], bool]) -> Callable[[World], bool]:
    def check(world: World) -> bool:
        document = world.get(name)
        return document is not None and test(document)

    return check


def _version_gone(name: str, version: str) -> Callable[[World], bool]:
    def check(world: World) -> bool:
        document = world.get(name) or {}
        tarball_status = http("GET", f"{world.served.base}{name}/-/{name}-{version}.tgz").status
        return version not in document.get("versions", {}) and tarball_status == 404

    return check


# ---------------------------------------------------------------- the writes


def _osv(advisory_id: str, name: str) -> dict[str, Any]:
    return {"id": advisory_id, "summary": f"{name} is vulnerable", "database_specific": {"severity": "HIGH"},
            "affected": [{"package": {"ecosystem": "npm", "name": name},
                          "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "2.0.0"}]}]}]}  # fmt: skip


def _import_lockfile(world: World) -> None:
    name = "imported-by-lockfile"
    url = f"{world.upstream.base}{name}/-/{name}-1.0.0.tgz"
    integrity = sri_sha512(http("GET", url).body)
    lock = {"name": "moving-in", "version": "1.0.0", "lockfileVersion": 3, "requires": True, "packages": {
        "": {"name": "moving-in", "version": "1.0.0", "dependencies": {name: "1.0.0"}},
        f"node_modules/{name}": {"version": "1.0.0", "resolved": url, "integrity": integrity}}}  # fmt: skip
    (world.root / "package-lock.json").write_text(json.dumps(lock))
    world.cli("import", "lockfile", "package-lock.json", "--from", world.upstream.base)


def _remove_by_api(world: World) -> None:
    found = http("GET", world.served.base + "user/search?keyword=leaver-api", token=world.tokens["boss"]).json["content"]
    (account,) = [a for a in found if a["username"] == "leaver-api"]
    assert http("DELETE", f"{world.served.base}user/{account['id']}", token=world.tokens["boss"]).status == 204


def _unpublish(world: World) -> None:
    """npm unpublish name@1.1.0: the document PUT back without it, then the tarball DELETE."""
    name = "unpublished"
    document = world.get(name)
    kept = {v: m for v, m in document["versions"].items() if v != "1.1.0"}
    world.write("PUT", f"{name}/-rev/{document['_rev']}", "alice", {**document, "versions": kept, "dist-tags": {"latest": "1.0.0"}})
    world.write("DELETE", f"{name}/-/{name}-1.1.0.tgz/-rev/{world.get(name)['_rev']}", "alice", None)


def _set_owners(world: World, name: str, owners: list[str]) -> None:
    """npm owner add/rm: the maintainers PUT back under the `_rev` of the document it read."""
    rev = world.get(name)["_rev"]
    world.write("PUT", f"{name}/-rev/{rev}", "alice", {"_id": name, "maintainers": [{"name": owner} for owner in owners]})


def _publish_two(name: str) -> Callable[[World], None]:
    def setup(world: World) -> None:
        world.publish("alice", name, "1.0.0")
        world.publish("alice", name, "1.1.0")

    return setup


def _nothing(world: World) -> None:
    pass


@dataclass(frozen=True)
class Write:
    label: str
    write: Callable[[World], None]
    visible: Callable[[World], bool]
    setup: Callable[[World], None] = _nothing


WRITES = [
    Write("publish (HTTP)", lambda w: w.publish("alice", "published", "1.0.0"), _serves_version("published", "1.0.0")),
    Write("import registry (CLI)",
          lambda w: w.cli("import", "registry", "imported-by-registry", "--from", w.upstream.base),
          _serves_version("imported-by-registry", "1.0.0")),
    Write("import lockfile (CLI)", _import_lockfile, _serves_version("imported-by-lockfile", "1.0.0")),
    Write("import verdaccio (CLI)", lambda w: w.cli("import", "verdaccio", str(verdaccio_storage(w.root))),
          _serves_version("@s/b", "1.1.0")),
    Write("user removal (HTTP DELETE /user/{id})", _remove_by_api, _email_gone("left-by-api", "leaver-api@people.example"),
          lambda w: w.publish("leaver-api", "left-by-api", "1.0.0")),
    Write("user removal (CLI)", lambda w: w.cli("user", "remove", "leaver-cli", "--yes"),
          _email_gone("left-by-cli", "leaver-cli@people.example"), lambda w: w.publish("leaver-cli", "left-by-cli", "1.0.0")),
    Write("owner claim (CLI)", lambda w: w.cli("owner", "claim", "claim-by-cli", "claimer-cli"),
          _bound_maintainer("claim-by-cli", "claimer-cli")),
    Write("owner claim (HTTP POST /-/user-api/owners)",
          lambda w: w.write("POST", "-/user-api/owners", "boss", {"package": "claim-by-api", "username": "claimer-api"}),
          _bound_maintainer("claim-by-api", "claimer-api")),
    Write("advisory add (CLI)", lambda w: w.cli("advisory", "add", str(_osv_file(w, "GHSA-cli0-0000-0000", "published"))),
          _audited("published", "GHSA-cli0-0000-0000")),
    Write("advisory add (HTTP POST /-/user-api/advisories)",
          lambda w: w.write("POST", "-/user-api/advisories", "boss", _osv("GHSA-api0-0000-0000", "published")),
          _audited("published", "GHSA-api0-0000-0000")),
    Write("unpublish (HTTP)", _unpublish, _version_gone("unpublished", "1.1.0"), _publish_two("unpublished")),
    Write("dist-tag add (HTTP)", lambda w: w.write("PUT", "-/package/tagged/dist-tags/beta", "alice", "1.0.0"),
          _document_says("tagged", lambda d: d["dist-tags"].get("beta") == "1.0.0"), _publish_two("tagged")),
    Write("deprecate (HTTP)",
          lambda w: w.write("PUT", "deprecated", "alice", {"_id": "deprecated", "name": "deprecated",
                                                            "versions": {"1.0.0": {"deprecated": "use 1.1.0"}}}),
          _document_says("deprecated", lambda d: d["versions"]["1.0.0"].get("deprecated") == "use 1.1.0"),
          _publish_two("deprecated")),
    Write("owner add (HTTP)",
          lambda w: _set_owners(w, "owned", ["alice", "bob"]),
          _document_says("owned", lambda d: "bob" in [m["name"] for m in d["maintainers"]]),
          lambda w: w.publish("alice", "owned", "1.0.0")),
    Write("owner rm (HTTP)",
          lambda w: _set_owners(w, "disowned", ["alice"]),
          _document_says("disowned", lambda d: "bob" not in [m["name"] for m in d["maintainers"]]),
          lambda w: (w.publish("alice", "disowned", "1.0.0"), _set_owners(w, "disowned", ["alice", "bob"]))),
]  # fmt: skip


def _osv_file(world: World, advisory_id: str, name: str) -> Path:
    path = world.root / f"{advisory_id}.json"
    path.write_text(json.dumps(_osv(advisory_id, name)))
    return path


@pytest.mark.parametrize("row", WRITES, ids=[row.label for row in WRITES])
def test_each_write_is_served_when_it_returns(world: World, row: Write) -> None:
    row.setup(world)
    assert not row.visible(world), f"{row.label}: already served before the write"
    row.write(world)
    assert row.visible(world), f"{row.label}: not served when the write returned"


def test_an_import_into_a_built_tree_builds_it_without_a_server(world: World, tmp_path: Path) -> None:
    """The newcomer's sequence from the issue, each step the CLI in the registry's folder:
    init; mkdir content; build; import registry NAME; the tree then serves NAME."""
    folder = World(tmp_path, world.served, world.upstream)
    folder.cli("init", "--base-url", "http://127.0.0.1:9/")
    (tmp_path / "content").mkdir(exist_ok=True)  # init makes it now; the step stays harmless
    folder.cli("build")
    assert "imported 1," in folder.cli("import", "registry", "imported-by-registry", "--from", world.upstream.base).stdout
    document = json.loads((tmp_path / "public" / "imported-by-registry" / "index.html").read_bytes())
    assert list(document["versions"]) == ["1.0.0"]
    assert (tmp_path / "public" / "imported-by-registry" / "-" / "imported-by-registry-1.0.0.tgz").is_file()
