"""The built tree's upload to a bucket (registry_gen.objectstore.BucketTree) on real S3 servers:
exactly the paths a build wrote, with the readers' headers, a package document also under its
folder's key; what a dead store could not take is owed and goes first on the next publish; a
removal takes the alias too."""

from __future__ import annotations

import http.server
import secrets
import threading
from pathlib import Path
from typing import Any

import pytest

from registry_gen.build import BuildResult
from registry_gen.errors import StorageUnavailable
from registry_gen.objectstore import BucketTree
from registry_gen.storage import S3Location, S3Storage, Timeouts
from tests.storage.conftest import BUCKET, Servers, s3_store
from tests.storage.s3servers import client, distinct_free_ports, forward, relay, s3_credentials
from tests.support import serving

pytestmark = pytest.mark.slow

FILES = {
    "pkg/-/pkg-1.0.0.tgz": b"tarball",
    "pkg/index.html": b'{"name":"pkg"}',
    "-/web/index.html": b"<!doctype html>",
    "-/all/index.html": b"{}",
}


@pytest.mark.parametrize("kind", ["moto", "seaweedfs"])
def test_what_a_dead_store_did_not_take_is_owed_and_published_first_next_time(kind: str, s3_servers: Servers, tmp_path: Path) -> None:
    server = s3_servers.get(kind)
    out = tmp_path / "public"
    for relative, data in FILES.items():
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        (out / relative).write_bytes(data)
    location = S3Location(BUCKET, f"s{secrets.token_hex(6)}/tree")
    (port,) = distinct_free_ports(1)  # nothing listens there: the store is down
    with s3_credentials():
        dead = S3Storage(location, endpoint_url=f"http://127.0.0.1:{port}", conditional_writes=True, timeouts=Timeouts(0.5, 1.0, 1))
    tree = BucketTree(dead, out)
    with pytest.raises(StorageUnavailable):
        tree.publish(BuildResult(written=["pkg/-/pkg-1.0.0.tgz", "pkg/index.html"]))
    assert tree.owed.written == {"pkg/-/pkg-1.0.0.tgz", "pkg/index.html"}

    tree.bucket = s3_store(server.endpoint, location)  # the store is back
    tree.publish(BuildResult(written=["-/web/index.html"]))
    s3 = client(server.endpoint)
    keys = {item["Key"].removeprefix(location.prefix + "/") for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=location.prefix + "/")["Contents"]}
    assert keys == {"pkg/-/pkg-1.0.0.tgz", "pkg/index.html", "pkg", "-/web/index.html"}  # not -/all: no build wrote it
    document = s3.get_object(Bucket=BUCKET, Key=f"{location.prefix}/pkg")
    assert document["Body"].read() == FILES["pkg/index.html"] and document["ContentType"] == "application/json"
    assert document["CacheControl"] == "public, max-age=0, must-revalidate"
    tarball = s3.head_object(Bucket=BUCKET, Key=f"{location.prefix}/pkg/-/pkg-1.0.0.tgz")
    assert tarball["CacheControl"] == "public, max-age=31536000, immutable"
    assert s3.head_object(Bucket=BUCKET, Key=f"{location.prefix}/-/web/index.html")["ContentType"].startswith("text/html")
    assert not tree.owed.written and not tree.owed.removed

    (out / "pkg/index.html").unlink()
    tree.publish(BuildResult(removed=["pkg/index.html"]))
    keys = {item["Key"].removeprefix(location.prefix + "/") for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=location.prefix + "/")["Contents"]}
    assert keys == {"pkg/-/pkg-1.0.0.tgz", "-/web/index.html"}


@pytest.mark.parametrize("kind", ["moto", "seaweedfs"])
def test_with_a_purged_cache_in_front_each_object_carries_the_folder_servers_caching_headers(kind: str, s3_servers: Servers, tmp_path: Path) -> None:
    """`purge:` with a key header: the folder's server (StaticTree, as `serve` and the nginx config)
    sends s-maxage and a surrogate key; the bucket's objects carry the same Cache-Control, and the
    key as `x-amz-meta-<header>`, so a CDN in front of the bucket can keep them and purge by key."""
    from registry_gen.hosting import document_cache
    from registry_gen.purge import SharedCache
    from user_api.server import StaticTree

    server = s3_servers.get(kind)
    out = tmp_path / "public"
    for relative, data in FILES.items():
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        (out / relative).write_bytes(data)
    shared = SharedCache(600, "xkey")
    location = S3Location(BUCKET, f"s{secrets.token_hex(6)}/tree")
    BucketTree(s3_store(server.endpoint, location), out, shared).publish(BuildResult(written=list(FILES)))
    folder = StaticTree(out, document_cache=document_cache(0, shared), cache_key_header="xkey")
    s3 = client(server.endpoint)
    for key, path in {"pkg/-/pkg-1.0.0.tgz": "/pkg/-/pkg-1.0.0.tgz", "pkg": "/pkg", "pkg/index.html": "/pkg", "-/web/index.html": "/-/web/index.html", "-/all/index.html": "/-/all"}.items():
        served = served_headers(folder, path)
        stored = s3.head_object(Bucket=BUCKET, Key=f"{location.prefix}/{key}")
        assert (stored["CacheControl"], stored["Metadata"].get("xkey")) == (served["cache-control"], served["xkey"]), key
    assert "s-maxage=600" in served_headers(folder, "/pkg")["cache-control"]  # what the bucket must match is the shared lifetime


def served_headers(app: Any, path: str) -> dict[str, str]:
    answered: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *rest: Any) -> None:
        answered.update(status=status, headers={name.lower(): value for name, value in headers})

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "x", "SERVER_PORT": "80", "wsgi.url_scheme": "http"}
    body = app(environ, start_response)
    if hasattr(body, "close"):
        body.close()
    assert answered["status"].startswith("200"), (path, answered)
    return answered["headers"]


class GatedProxy(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the S3 server, recording each PUT's start and end; holds a PUT
    until another is in flight beside it, or a deadline passes (so uploads one at a time still
    finish, a second each)."""

    upstream: str
    events: list[tuple[str, str]]  # ("start" | "end", key), in the order they happened
    gate: threading.Condition
    flight: list[int]  # [in flight now, most in flight at once]

    def handle_put(self) -> None:
        key = self.path.split("?")[0]
        with self.gate:
            self.events.append(("start", key))
            self.flight[0] += 1
            self.flight[1] = max(self.flight)
            self.gate.notify_all()
            self.gate.wait_for(lambda: self.flight[0] > 1, timeout=1.0)  # a condition with a deadline
        answer = forward(self, self.upstream)
        with self.gate:
            self.flight[0] -= 1
            self.events.append(("end", key))
        relay(self, *answer)

    def handle_other(self) -> None:
        relay(self, *forward(self, self.upstream))

    do_PUT = handle_put  # noqa: N815 - stdlib naming
    do_GET = do_HEAD = do_DELETE = do_POST = handle_other  # noqa: N815 - stdlib naming

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


def test_each_phase_is_uploaded_together_and_after_the_one_before(s3_servers: Servers, tmp_path: Path) -> None:
    """A publish writes a dozen objects: a phase's PUTs are in flight at once (a serial upload
    paid each round trip in turn), and no document starts before every tarball is stored, nor the
    site before every document."""
    server = s3_servers.get("moto")
    out = tmp_path / "public"
    files = {"pkg/-/pkg-1.0.0.tgz": b"t1", "pkg/-/pkg-1.1.0.tgz": b"t2", "pkg/index.html": b"{}", "pkg/abbreviated.json": b"{}",
             "-/web/index.html": b"<p>", "-/web/pkg/index.html": b"<p>", "-/web/pkg/1.1.0/index.html": b"<p>"}  # fmt: skip
    for relative, data in files.items():
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        (out / relative).write_bytes(data)
    events: list[tuple[str, str]] = []
    flight = [0, 0]
    handler = type("Handler", (GatedProxy,), {"upstream": server.endpoint.removeprefix("http://"), "events": events,
                                              "gate": threading.Condition(), "flight": flight})  # fmt: skip
    location = S3Location(BUCKET, f"g{secrets.token_hex(6)}/tree")
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as port:
        BucketTree(s3_store(f"http://127.0.0.1:{port}", location), out).publish(BuildResult(written=sorted(files)))
    puts = [(what, key.removeprefix(f"/{BUCKET}/{location.prefix}/")) for what, key in events]
    assert {key for _, key in puts} == set(files) | {"pkg"}  # the document's alias too
    assert flight[1] >= 2, "the uploads went one at a time"
    phase = {key: 0 if key.endswith(".tgz") else 1 if key.startswith("pkg") else 2 for _, key in puts}
    for index, (what, key) in enumerate(puts):
        if what == "start":  # everything of an earlier phase has ended before this one starts
            earlier = {k for _, k in puts if phase[k] < phase[key]}
            assert earlier <= {k for w, k in puts[:index] if w == "end"}, (key, puts)


def put_in_parts(s3: Any, key: str, data: bytes, metadata: dict[str, str]) -> None:
    """`key` written as a copy tool writes a big file (`aws s3 cp`/`sync`, rclone): a multipart
    upload, whose ETag is no MD5, carrying `metadata`."""
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key, Metadata=metadata)
    part = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=data)
    parts = {"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]}
    s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload["UploadId"], MultipartUpload=parts)


@pytest.mark.parametrize("kind", ["moto", "seaweedfs"])
def test_a_key_whose_etag_is_no_md5_is_held_by_the_md5_its_writer_recorded(kind: str, s3_servers: Servers, tmp_path: Path) -> None:
    """`holds` (a start's check of `-/all` before it marks it for the leader): each tree object
    carries the MD5 its writer sent, so an object whose ETag is no MD5 (a multipart copy that kept
    the metadata, as `aws s3 sync` between buckets does; SSE-KMS's ETags take the same path) is
    still held: one HEAD, no GET. The same bytes without the writer's digest, or other bytes, are
    not; and a key whose ETag is the MD5 costs no HEAD."""
    server = s3_servers.get(kind)
    out = tmp_path / "public"
    for relative, data in FILES.items():
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        (out / relative).write_bytes(data)
    location = S3Location(BUCKET, f"h{secrets.token_hex(6)}/tree")
    # No folder key (`tree_readers: nginx`): SeaweedFS, a file system, completes no multipart upload
    # of `-/all` while `-/all/index.html` exists (InternalError).
    tree = BucketTree(s3_store(server.endpoint, location), out, folder_keys=False)
    tree.publish(BuildResult(written=["-/all/index.html", "pkg/index.html"]))
    asked: list[str] = []
    tree.bucket.watchers.append(lambda operation, key: asked.append(operation))
    assert tree.holds(["-/all/index.html"]) and "HeadObject" not in asked

    key, data = f"{location.prefix}/-/all/index.html", FILES["-/all/index.html"]
    with s3_credentials():
        s3 = client(server.endpoint)
        recorded = s3.head_object(Bucket=BUCKET, Key=key)["Metadata"]
        put_in_parts(s3, key, data, recorded)
        assert "-" in s3.head_object(Bucket=BUCKET, Key=key)["ETag"]
    asked.clear()
    assert tree.holds(["-/all/index.html"]) and asked.count("HeadObject") == 1 and "GetObject" not in asked

    with s3_credentials():
        put_in_parts(s3, key, data, {})  # no digest recorded: nothing to trust
        assert not tree.holds(["-/all/index.html"])
        put_in_parts(s3, key, data + b" ", recorded)  # a digest of other bytes (another size)
        assert not tree.holds(["-/all/index.html"])
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"[]")  # other bytes of the same size, by a plain PUT
        assert not tree.holds(["-/all/index.html"])
