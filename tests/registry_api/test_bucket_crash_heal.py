"""A write's build committed and its tree upload not done, with the tree in a bucket (issue 28,
acceptance 3): the instance that built the write is killed before the bucket holds what it
rendered, or the bucket refuses the upload (the client gets a 503); either way the write stays
pending, and the leading instance renders the package again from the content bucket and uploads
it, within seconds of the writer being gone and the bucket answering. Real PostgreSQL, a real moto
server, two real `registry-gen api` processes, nginx in front of the tree bucket; the refusal is a
proxy in front of the S3 server answering the tree's PUTs with S3's 503 SlowDown."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import postgres_state_url
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import change_feed, postgres  # noqa: F401 - postgres: a fixture
from tests.registry_api.test_api_object_store import TREE, assert_tarballs_in_bucket, bucket_site, poll, served_versions
from tests.storage.s3servers import forward, relay
from tests.support import serving

pytestmark = pytest.mark.slow


def _changes(site: Any, name: str) -> list[list[str]]:
    """The journal feed's publish entries of `name` (asked of the last instance: B, the live one), as versions."""
    return [entry["versions"] for entry in change_feed(site.apis[-1].base) if entry["name"] == name and entry["kind"] == "package:publish"]


@pytest.mark.parametrize("point", ["after-write", "after-upload"])
def test_an_instance_killed_before_its_tree_upload_is_healed_by_the_other(point: str, postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    envs = ({"REGISTRY_GEN_FAILPOINT": f"{point}:kill"}, {})
    with bucket_site("moto", postgres_state_url(postgres), tmp_path, envs=envs) as site:
        a, b = site.apis
        token = add_user(b.base, "alice", "alice-password-1")
        first = publish_body("healed-pkg", "1.0.0", tarball("healed-pkg", "1.0.0"))
        assert http("PUT", b.base + "healed-pkg", token=token, body=first).status == 201
        second = publish_body("healed-pkg", "1.1.0", tarball("healed-pkg", "1.1.0"))
        try:
            http("PUT", a.base + "healed-pkg", token=token, body=second, timeout=60)
        except OSError:
            pass  # A died with the request: the connection went with it
        assert a.process is not None and a.process.wait(timeout=30) == -9
        killed = time.monotonic()

        def healed() -> bool:
            return "1.1.0" in served_versions(site, "healed-pkg") and len(_changes(site, "healed-pkg")) == 2

        assert poll(healed, 60), f"the bucket's tree never served 1.1.0 (served: {sorted(served_versions(site, 'healed-pkg'))})"
        assert time.monotonic() - killed < 30
        assert_tarballs_in_bucket(site, "healed-pkg")
        assert _changes(site, "healed-pkg") == [["1.0.0"], ["1.1.0"]]  # journalled done, once
        assert json.loads(site.read("healed-pkg/abbreviated.json")[0])["dist-tags"]["latest"] == "1.1.0"


SLOW_DOWN = b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"


class TreeRefusingProxy(BaseHTTPRequestHandler):
    """Forwards to the S3 server; while `refusing[0]`, answers every PUT under the tree's prefix
    with S3's 503 SlowDown (the content's PUTs still go through)."""

    protocol_version = "HTTP/1.1"  # answers botocore's Expect: 100-continue at once
    upstream: list[str]
    refusing: list[bool]
    refused: list[str]

    def handle_any(self) -> None:
        if self.command == "PUT" and f"/{TREE}" in self.path and self.refusing[0]:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.refused.append(self.path)
            relay(self, 503, [("Content-Type", "application/xml"), ("Content-Length", str(len(SLOW_DOWN)))], SLOW_DOWN)
            return
        status, headers, body = forward(self, self.upstream[0])
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"] + [("Content-Length", str(len(body)))]
        relay(self, status, headers, body if self.command != "HEAD" else b"")

    do_PUT = do_GET = do_HEAD = do_DELETE = do_POST = handle_any  # noqa: N815 - stdlib naming

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


def test_a_tree_upload_the_bucket_refused_is_healed_by_the_leader_once_it_answers(postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    """The instances' tree uploads go through a proxy that refuses them for a while (nginx reads
    the bucket directly). B's publish answers 503 and its write stays pending; once the bucket
    takes uploads again, the leader renders and uploads it with no other write (before: the write
    was journalled done and the upload owed in B's memory only, until B's next write)."""
    refusing, refused, upstream = [False], [], [""]
    handler = type("Handler", (TreeRefusingProxy,), {"upstream": upstream, "refusing": refusing, "refused": refused})
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as proxy_port:

        def endpoint_of(_: int, endpoint: str) -> str:
            upstream[0] = endpoint.removeprefix("http://")
            return f"http://127.0.0.1:{proxy_port}"  # every instance: the tree bucket refuses them all

        with bucket_site("moto", postgres_state_url(postgres), tmp_path, endpoint_of=endpoint_of) as site:
            a, b = site.apis
            token = add_user(a.base, "alice", "alice-password-1")
            first = publish_body("refused-pkg", "1.0.0", tarball("refused-pkg", "1.0.0"))
            assert http("PUT", b.base + "refused-pkg", token=token, body=first).status == 201
            refusing[0] = True
            second = publish_body("refused-pkg", "1.1.0", tarball("refused-pkg", "1.1.0"))
            reply = http("PUT", b.base + "refused-pkg", token=token, body=second, timeout=120)
            assert reply.status == 503 and refused, (reply.status, reply.body)
            assert sorted(served_versions(site, "refused-pkg")) == ["1.0.0"]  # nothing half-written is served
            assert _changes(site, "refused-pkg") == [["1.0.0"]]  # not journalled done while not served
            refusing[0] = False

            def healed() -> bool:
                return "1.1.0" in served_versions(site, "refused-pkg") and len(_changes(site, "refused-pkg")) == 2

            assert poll(healed, 60), "the leader never uploaded the write the bucket had refused"
            assert_tarballs_in_bucket(site, "refused-pkg")
            assert _changes(site, "refused-pkg") == [["1.0.0"], ["1.1.0"]]


def test_a_lone_instance_restarted_after_a_refused_upload_uploads_the_write_from_its_intact_work_folder(
    postgres: Any, tmp_path: Path  # noqa: F811
) -> None:
    """One instance: its publish's tree upload is refused (503, the write pending), then it dies and
    comes back on the same work folder once the bucket answers. Its start resolves the write as
    landed and renders the package again; the work folder already holds that render, so before,
    nothing of it counted as written and the bucket kept serving 1.0.0 until the package's next
    write (the journal said done). Now every file of a re-rendered package is uploaded."""
    refusing, refused, upstream = [False], [], [""]
    handler = type("Handler", (TreeRefusingProxy,), {"upstream": upstream, "refusing": refusing, "refused": refused})
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as proxy_port:

        def endpoint_of(_: int, endpoint: str) -> str:
            upstream[0] = endpoint.removeprefix("http://")
            return f"http://127.0.0.1:{proxy_port}"

        with bucket_site("moto", postgres_state_url(postgres), tmp_path, hosts=("a",), endpoint_of=endpoint_of) as site:
            (a,) = site.apis
            token = add_user(a.base, "alice", "alice-password-1")
            assert http("PUT", a.base + "lone-pkg", token=token, body=publish_body("lone-pkg", "1.0.0", tarball("lone-pkg", "1.0.0"))).status == 201
            refusing[0] = True
            reply = http("PUT", a.base + "lone-pkg", token=token, body=publish_body("lone-pkg", "1.1.0", tarball("lone-pkg", "1.1.0")), timeout=120)
            assert reply.status == 503 and refused, (reply.status, reply.body)
            a.kill()
            assert sorted(served_versions(site, "lone-pkg")) == ["1.0.0"]
            refusing[0] = False
            a.start()  # the same work folder, the bucket answering

            def healed() -> bool:
                return "1.1.0" in served_versions(site, "lone-pkg")

            assert poll(healed, 30), f"the bucket still serves {sorted(served_versions(site, 'lone-pkg'))} after the restart"
            assert_tarballs_in_bucket(site, "lone-pkg")
            assert _changes(site, "lone-pkg") == [["1.0.0"], ["1.1.0"]]
