"""The built tree's upload to a bucket (registry_gen.objectstore.BucketTree) on real S3 servers:
exactly the paths a build wrote, with the readers' headers, a package document also under its
folder's key; what a dead store could not take is owed and goes first on the next publish; a
removal takes the alias too."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from registry_gen.build import BuildResult
from registry_gen.errors import StorageUnavailable
from registry_gen.objectstore import BucketTree
from registry_gen.storage import S3Location, S3Storage, Timeouts
from tests.storage.conftest import BUCKET, Servers, s3_store
from tests.storage.s3servers import client, distinct_free_ports, s3_credentials

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
