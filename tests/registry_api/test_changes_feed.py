"""The change feed, `GET /-/changes` (issue 28), against a real `registry-gen serve`: writes appear
in the order they were accepted, each once, paged by since/limit; a private package's entries go
only to callers who may read it; a bad parameter is a 400 naming it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from registry_gen.cli import main as registry_gen
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball

pytestmark = pytest.mark.slow

RULES = "content_dir: content\nout_dir: public\ndata_dir: data\nsignup: open\npackages:\n  'secret-*': {read: [insiders]}\n  '**': {read: all}\n"


class Written(NamedTuple):
    server: RegistryProcess
    alice: str  # the writer's token


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    """A server whose feed was empty, after `_writes` (each test may add writes of its own)."""
    root = tmp_path_factory.mktemp("changes")
    (root / "registry.yaml").write_text(RULES)
    process = RegistryProcess(root).start()
    try:
        assert _feed(process) == {"results": [], "last_seq": 0}
        alice = add_user(process.base, "alice", "alice-password-1")
        _writes(process, alice)
        yield Written(process, alice)
    finally:
        process.stop()


def _publish(server: RegistryProcess, token: str, name: str, version: str) -> None:
    reply = http("PUT", server.base + name, token=token, body=publish_body(name, version, tarball(name, version)))
    assert reply.status == 201, (reply.status, reply.body)


def _feed(server: RegistryProcess, query: str = "", token: str | None = None) -> Any:
    reply = http("GET", f"{server.base}-/changes{query}", token=token)
    assert reply.status == 200, (reply.status, reply.body)
    assert reply.headers["cache-control"] == "no-store"
    return reply.json


def _seen(page: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    return [(entry["kind"], entry["name"], entry["versions"]) for entry in page["results"]]


def _writes(server: RegistryProcess, alice: str) -> None:
    """publish, a private publish, a dist-tag, a whole-package unpublish."""
    _publish(server, alice, "feed-pub", "1.0.0")
    _publish(server, alice, "secret-feed", "1.0.0")
    _publish(server, alice, "feed-pub", "1.1.0")
    assert http("PUT", f"{server.base}-/package/feed-pub/dist-tags/stable", token=alice, body="1.0.0").status == 201
    _publish(server, alice, "feed-gone", "2.0.0")
    rev = http("GET", server.base + "feed-gone").json["_rev"]
    assert http("DELETE", f"{server.base}feed-gone/-rev/{rev}", token=alice).status == 200


PUBLIC_WRITES = [
    ("package:publish", "feed-pub", ["1.0.0"]),
    ("package:publish", "feed-pub", ["1.1.0"]),
    ("package:dist-tag", "feed-pub", ["1.0.0"]),
    ("package:publish", "feed-gone", ["2.0.0"]),
    ("package:unpublish", "feed-gone", ["2.0.0"]),
]
PRIVATE_WRITE = ("package:publish", "secret-feed", ["1.0.0"])


def test_feed_lists_writes_in_order_and_hides_private_packages(written: Written) -> None:
    server, alice = written
    bob = add_user(server.base, "bob", "bob-password-1")
    anonymous = _feed(server)
    assert _seen(anonymous) == PUBLIC_WRITES
    outsider = _feed(server, token=bob)  # logged in, not in the group the rule names
    assert _seen(outsider) == PUBLIC_WRITES and outsider["last_seq"] == anonymous["last_seq"]
    insider_token = _insider(server)
    insider = _feed(server, token=insider_token)
    assert _seen(insider) == PUBLIC_WRITES[:1] + [PRIVATE_WRITE] + PUBLIC_WRITES[1:]
    seqs = [entry["seq"] for entry in insider["results"]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and insider["last_seq"] == seqs[-1] == anonymous["last_seq"]

    first = insider["results"][0]
    assert set(first) == {"seq", "time", "kind", "name", "versions", "detail"}
    assert first["time"].endswith("Z") and first["detail"]["dist-tags"]["after"] == {"latest": "1.0.0"}
    assert "alice" not in http("GET", f"{server.base}-/changes").body.decode()  # no actor, no email
    tag = next(entry for entry in insider["results"] if entry["kind"] == "package:dist-tag")
    assert tag["detail"] == {"tag": "stable", "before": None}

    _publish(server, alice, "secret-feed", "1.1.0")  # skipped entries at the end still move last_seq
    hidden = _feed(server, f"?since={anonymous['last_seq']}")
    assert hidden["results"] == [] and hidden["last_seq"] > anonymous["last_seq"]
    assert _seen(_feed(server, f"?since={anonymous['last_seq']}", token=insider_token)) == [("package:publish", "secret-feed", ["1.1.0"])]


def _insider(server: RegistryProcess) -> str:
    """carol, in the group the rule names (set with the CLI on the server's data)."""
    token = add_user(server.base, "carol", "carol-password-1")
    assert registry_gen(["groups", "carol", "--add", "insiders", "--config", str(server.root / "registry.yaml")]) == 0
    return token


def test_feed_pages_by_since_and_limit(written: Written) -> None:
    server = written.server
    everything = _feed(server, "?limit=1000")
    assert len(everything["results"]) >= 2
    paged, since = [], 0
    for _ in range(len(everything["results"]) + 2):  # bounded: one page per entry at most
        page = _feed(server, f"?since={since}&limit=2")
        assert len(page["results"]) <= 2
        paged += page["results"]
        if page["last_seq"] == since:
            break
        since = page["last_seq"]
    assert paged == everything["results"]
    tail = _feed(server, f"?since={everything['results'][0]['seq']}")
    assert tail["results"] == everything["results"][1:]
    assert _feed(server, f"?since={everything['last_seq']}") == {"results": [], "last_seq": everything["last_seq"]}


@pytest.mark.parametrize("query", ["?since=abc", "?since=-1", "?since=1.5", "?limit=0", "?limit=x", "?since=%EF%BC%91"])
def test_bad_paging_is_a_400_naming_the_parameter(written: Written, query: str) -> None:
    reply = http("GET", f"{written.server.base}-/changes{query}")
    assert reply.status == 400, (reply.status, reply.body)
    assert reply.json["error"].startswith(query[1:].split("=")[0] + " must be")
