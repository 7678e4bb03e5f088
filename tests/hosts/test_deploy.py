"""`registry-gen deploy s3://…` against moto's S3 in server mode (real HTTP, real boto3)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from registry_gen.cli import main as registry_gen
from registry_gen.deploy import DeployError, deploy_tree, make_client, parse_s3_url
from registry_gen.errors import ConfigError
from tests.hosts.conftest import build_tree
from tests.hosts.servers import aws_test_credentials, moto_server
from tests.support import make_tarball

pytestmark = pytest.mark.slow
DOCUMENT_CACHE = "public, max-age=0, must-revalidate"


@dataclass
class Store:
    endpoint: str
    client: Any


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with aws_test_credentials(), moto_server() as endpoint:
        yield Store(endpoint, make_client(endpoint_url=endpoint, region="us-east-1"))


def _bucket(store: Store, name: str) -> str:
    store.client.create_bucket(Bucket=name)
    return name


def _tree(tmp_path: Path, base_url: str) -> Path:
    content = tmp_path / "content"
    make_tarball(content, "plain-dep", "1.0.0")
    make_tarball(content, "@acme/widget", "1.2.0", dependencies={"plain-dep": "^1.0.0"})
    build_tree(content, tmp_path / "public", base_url)
    return tmp_path / "public"


def _keys(store: Store, bucket: str) -> dict[str, str]:
    pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {item["Key"]: item["ETag"] for page in pages for item in page.get("Contents", [])}


def _get(store: Store, path: str) -> tuple[int, dict[str, str], bytes]:
    """An anonymous GET, as a client of the bucket makes it (the path exactly as written)."""
    host = store.endpoint.removeprefix("http://")
    connection = http.client.HTTPConnection(host, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_deploy_sets_types_caching_website_and_public_read(store: Store, tmp_path: Path) -> None:
    bucket = _bucket(store, "types")
    tree = _tree(tmp_path, f"{store.endpoint}/{bucket}/")
    code = registry_gen(["deploy", f"s3://{bucket}", "--endpoint-url", store.endpoint, "--region", "us-east-1",
                         "--tree", str(tree), "--public-read"])  # fmt: skip
    assert code == 0
    keys = _keys(store, bucket)
    assert not [k for k in keys if k.startswith(".") or "/." in k or k.endswith(".gz")], "private files or .gz siblings uploaded"
    expected = {
        "@acme/widget": ("application/json", DOCUMENT_CACHE),  # the alias a REST endpoint answers /<name> with
        "@acme/widget/index.html": ("application/json", DOCUMENT_CACHE),
        "@acme/widget/abbreviated.json": ("application/vnd.npm.install-v1+json", DOCUMENT_CACHE),
        "@acme/widget/-/widget-1.2.0.tgz": ("application/octet-stream", "public, max-age=31536000, immutable"),
        "plain-dep": ("application/json", DOCUMENT_CACHE),
        "-/package/@acme/widget/dist-tags": ("application/json", DOCUMENT_CACHE),
        "-/ping": ("application/json", DOCUMENT_CACHE),
        "-/404.json": ("application/json", DOCUMENT_CACHE),
        "-/web/index.html": ("text/html; charset=utf-8", DOCUMENT_CACHE),
        "-/web/": ("text/html; charset=utf-8", DOCUMENT_CACHE),
    }
    for key, (content_type, cache) in expected.items():
        head = store.client.head_object(Bucket=bucket, Key=key)
        assert (head["ContentType"], head["CacheControl"]) == (content_type, cache), key
    website = store.client.get_bucket_website(Bucket=bucket)
    assert website["IndexDocument"] == {"Suffix": "index.html"}
    assert website["ErrorDocument"] == {"Key": "-/404.json"}
    policy = json.loads(store.client.get_bucket_policy(Bucket=bucket)["Policy"])
    assert policy["Statement"][0]["Action"] == "s3:GetObject"
    assert policy["Statement"][0]["Resource"] == f"arn:aws:s3:::{bucket}/*"
    document = (tree / "@acme/widget/index.html").read_bytes()
    for spelling in ("@acme%2fwidget", "@acme%2Fwidget", "@acme/widget"):
        status, headers, body = _get(store, f"/{bucket}/{spelling}")
        assert (status, headers["content-type"], body) == (200, "application/json", document), spelling
    status, headers, body = _get(store, f"/{bucket}/@acme%2fwidget/-/widget-1.2.0.tgz")  # yarn berry's spelling
    assert status == 200 and body == (tree / "@acme/widget/-/widget-1.2.0.tgz").read_bytes()


def test_redeploy_uploads_only_changes_tarballs_first_and_deletes_on_request(store: Store, tmp_path: Path) -> None:
    bucket = _bucket(store, "incremental")
    tree = _tree(tmp_path, f"{store.endpoint}/{bucket}/")
    target = parse_s3_url(f"s3://{bucket}")
    first = deploy_tree(tree, target, store.client)
    assert first.uploaded and first.unchanged == 0 and first.website
    again = deploy_tree(tree, target, store.client)
    assert again.uploaded == [] and again.unchanged == len(first.uploaded)

    make_tarball(tmp_path / "content", "plain-dep", "1.1.0")
    build_tree(tmp_path / "content", tree, f"{store.endpoint}/{bucket}/")
    update = deploy_tree(tree, target, store.client, website=False)
    assert "plain-dep/-/plain-dep-1.1.0.tgz" in update.uploaded and "plain-dep" in update.uploaded
    assert update.uploaded.index("plain-dep/-/plain-dep-1.1.0.tgz") < update.uploaded.index("plain-dep")
    assert "@acme/widget/-/widget-1.2.0.tgz" not in update.uploaded
    alias = store.client.get_object(Bucket=bucket, Key="plain-dep")["Body"].read()
    assert json.loads(alias)["dist-tags"]["latest"] == "1.1.0"

    (tmp_path / "content" / "acme-widget-1.2.0.tgz").unlink()
    build_tree(tmp_path / "content", tree, f"{store.endpoint}/{bucket}/")
    kept = deploy_tree(tree, target, store.client, website=False)
    assert kept.deleted == [] and "@acme/widget" in _keys(store, bucket)
    pruned = deploy_tree(tree, target, store.client, website=False, delete=True)
    assert "@acme/widget" in pruned.deleted and "@acme/widget/-/widget-1.2.0.tgz" in pruned.deleted
    assert not [k for k in _keys(store, bucket) if k.startswith("@acme/")]
    assert "plain-dep" in _keys(store, bucket)


def test_prefix_and_errors(store: Store, tmp_path: Path) -> None:
    bucket = _bucket(store, "prefixed")
    tree = _tree(tmp_path, f"{store.endpoint}/{bucket}/npm/")
    result = deploy_tree(tree, parse_s3_url(f"s3://{bucket}/npm/"), store.client)
    keys = _keys(store, bucket)
    assert keys and all(k.startswith("npm/") for k in keys) and "npm/@acme/widget" in keys
    assert store.client.get_bucket_website(Bucket=bucket)["ErrorDocument"] == {"Key": "npm/-/404.json"}
    assert result.uploaded

    with pytest.raises(DeployError, match="no-such-bucket"):
        deploy_tree(tree, parse_s3_url("s3://no-such-bucket"), store.client)
    code = registry_gen(["deploy", "s3://no-such-bucket", "--endpoint-url", store.endpoint, "--tree", str(tree)])
    assert code == 1
    for bad in ("https://bucket/x", "s3://", "s3:///key", "s3://bucket?x=1"):
        with pytest.raises(ConfigError, match="s3://"):
            parse_s3_url(bad)
    with pytest.raises(ConfigError, match="registry-gen build"):
        deploy_tree(tmp_path / "missing", parse_s3_url(f"s3://{bucket}"), store.client)
