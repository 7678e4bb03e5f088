"""`_rev` on whole-document writes (CouchDB's optimistic concurrency) against a real
`registry-gen serve`: a write naming a stale `_rev` gets 409 and changes nothing; npm 11's
read-modify-write commands, which send the fresh one, go through."""

from __future__ import annotations

import copy
import re
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.registry_api.helpers import RegistryProcess, Reply, add_user, http, publish_body, tarball, write_package

pytestmark = pytest.mark.slow

REV = re.compile(r"^\d+-[0-9a-f]{40}$")


def publish(server: RegistryProcess, token: str, name: str, version: str) -> None:
    reply = http("PUT", server.base + name, body=publish_body(name, version, tarball(name, version)), token=token)
    assert reply.status == 201, reply.body


def document(server: RegistryProcess, name: str) -> dict[str, Any]:
    """What npm's read-modify-write commands read first: `GET /<name>?write=true`."""
    reply = http("GET", f"{server.base}{name}?write=true")
    assert reply.status == 200, reply.body
    return dict(reply.json)


def without_version(doc: dict[str, Any], version: str) -> dict[str, Any]:
    """npm unpublish's body for one version: the document less it (libnpmpublish unpublish.js)."""
    body = copy.deepcopy(doc)
    del body["versions"][version]
    body["dist-tags"] = {tag: v for tag, v in body["dist-tags"].items() if v != version}
    return body


def assert_conflict(reply: Reply) -> None:
    assert reply.status == 409, (reply.status, reply.body)
    assert reply.headers["content-type"].startswith("application/json")
    error = reply.json["error"]
    assert error.startswith("conflict:") and "changed since" in error and "\n" not in error


def test_a_stale_rev_gets_409_and_the_version_published_meanwhile_stays(server: RegistryProcess) -> None:
    name = "rev-race"
    alice = add_user(server.base, "rev-alice")
    publish(server, alice, name, "1.0.0")
    publish(server, alice, name, "1.1.0")
    stale = document(server, name)
    assert REV.match(stale["_rev"])
    publish(server, alice, name, "1.2.0")  # another client, between the GET and the PUT

    unpublish = http("PUT", f"{server.base}{name}/-rev/{stale['_rev']}", body=without_version(stale, "1.1.0"), token=alice)
    assert_conflict(unpublish)
    deprecated = copy.deepcopy(stale)
    deprecated["versions"]["1.0.0"]["deprecated"] = "use 1.1"
    assert_conflict(http("PUT", server.base + name, body=deprecated, token=alice))  # npm deprecate: _rev in the body
    owners = {"_id": name, "_rev": stale["_rev"], "maintainers": [{"name": "rev-alice", "email": "rev-alice@example.com"}]}
    assert_conflict(http("PUT", f"{server.base}{name}/-rev/{urllib.parse.quote(stale['_rev'])}", body=owners, token=alice))
    assert_conflict(http("DELETE", f"{server.base}{name}/-rev/{stale['_rev']}", token=alice))
    assert_conflict(http("DELETE", f"{server.base}{name}/-/{name}-1.1.0.tgz/-rev/{stale['_rev']}", token=alice))

    now = document(server, name)
    assert sorted(now["versions"]) == ["1.0.0", "1.1.0", "1.2.0"] and "deprecated" not in now["versions"]["1.0.0"]
    assert now["dist-tags"]["latest"] == "1.2.0" and now["_rev"] != stale["_rev"]
    assert http("GET", f"{server.base}{name}/-/{name}-1.1.0.tgz").status == 200

    # Read again, write again: it goes through, and the reply names the rev the document now has.
    done = http("PUT", f"{server.base}{name}/-rev/{now['_rev']}", body=without_version(now, "1.1.0"), token=alice)
    assert done.status == 200, done.body
    after = document(server, name)
    assert sorted(after["versions"]) == ["1.0.0", "1.2.0"] and done.json["rev"] == after["_rev"] != now["_rev"]
    tarball_gone = http("DELETE", f"{server.base}{name}/-/{name}-1.1.0.tgz/-rev/{after['_rev']}", token=alice)
    assert tarball_gone.status == 200, tarball_gone.body


def test_a_write_without_a_rev_and_a_write_to_an_unknown_name_are_not_checked(server: RegistryProcess) -> None:
    """Clients that name no `_rev` keep working; an unknown name answers 404, as npm expects."""
    name = "rev-norev"
    alice = add_user(server.base, "rev-carol")
    publish(server, alice, name, "1.0.0")
    doc = document(server, name)
    del doc["_rev"]
    doc["versions"]["1.0.0"]["deprecated"] = "old"
    reply = http("PUT", server.base + name, body=doc, token=alice)
    assert reply.status == 201, reply.body
    assert document(server, name)["versions"]["1.0.0"]["deprecated"] == "old"
    assert http("DELETE", f"{server.base}rev-never-published/-rev/1-abc", token=alice).status == 404


ACCESS_REQUEST = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.[01]" (?P<status>\d{3}) ')


def requests_to(server: RegistryProcess, name: str) -> list[tuple[str, str, int]]:
    found = []
    for line in list(server.output):
        match = ACCESS_REQUEST.search(line)
        if match and urllib.parse.unquote(match["path"]).startswith(f"/{name}/"):
            found.append((match["method"], urllib.parse.unquote(match["path"]), int(match["status"])))
    return found


def rev_requests_once_logged(server: RegistryProcess, name: str, earlier: int, count: int) -> list[tuple[str, str, int]]:
    """The requests naming a rev after the first `earlier` ones, once `count` are in the log (it is
    read from the server's output by a thread: polled until a deadline)."""
    end = time.monotonic() + 20
    while True:
        sent = [request for request in requests_to(server, name)[earlier:] if "/-rev/" in request[1]]
        if len(sent) >= count or time.monotonic() > end:
            return sent
        time.sleep(0.05)


def log_mark(server: RegistryProcess, name: str) -> int:
    """How many requests to `name` were logged before now: a request only this call makes is sent
    and awaited in the log (read from the server's output by a thread, so a count taken at once
    can miss the last requests of the command before)."""
    marker = f"/{name}/-/log-mark-{uuid.uuid4().hex}.tgz"
    http("GET", server.base + marker.lstrip("/"))
    end = time.monotonic() + 20
    while time.monotonic() < end:
        paths = [request[1] for request in requests_to(server, name)]
        if marker in paths:
            return paths.index(marker) + 1
        time.sleep(0.05)
    raise AssertionError(f"the access log never showed {marker}")


def test_npm_11_deprecate_owner_and_unpublish_send_the_fresh_rev(server: RegistryProcess, tmp_path: Path) -> None:
    """npm unpublish pkg@v: PUT /<name>/-rev/<rev it read>, GET ?write=true, then
    DELETE /<name>/-/<file>/-rev/<rev after the PUT>: that second rev is the one the PUT produced."""
    name = "rev-npm"
    token = add_user(server.base, "rev-dave")
    alice = server.npm("rev-dave", token)
    add_user(server.base, "rev-erin")
    source = tmp_path / "src"
    for version in ("1.0.0", "1.1.0"):
        write_package(source, name, version)
        alice.run("publish", cwd=source)
    publish(server, token, name, "1.2.0")  # a write this npm did not see

    alice.run("deprecate", f"{name}@1.0.0", "use 1.1", cwd=tmp_path)
    assert "+ rev-erin" in alice.run("owner", "add", "rev-erin", name, cwd=tmp_path).stdout
    before = document(server, name)
    assert before["versions"]["1.0.0"]["deprecated"] == "use 1.1"
    assert [m["name"] for m in before["maintainers"]] == ["rev-dave", "rev-erin"]

    earlier = log_mark(server, name)
    assert f"- {name}@1.1.0" in alice.run("unpublish", f"{name}@1.1.0", cwd=tmp_path).stdout
    after = document(server, name)
    assert sorted(after["versions"]) == ["1.0.0", "1.2.0"]
    sent = rev_requests_once_logged(server, name, earlier, count=2)
    assert sent == [
        ("PUT", f"/{name}/-rev/{before['_rev']}", 200),
        ("DELETE", f"/{name}/-/{name}-1.1.0.tgz/-rev/{after['_rev']}", 200),
    ]

