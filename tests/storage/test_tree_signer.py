"""The read decision's presigned URLs for a private tree bucket (registry_gen.objectstore.TreeSigner,
issue 28) on real S3 servers: signed by obstore, no botocore on the way, the URL boto3 signed
(path-style, the same expiry), and each reads exactly its key, whatever characters the key holds."""

from __future__ import annotations

import logging
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from registry_gen.objectstore import PRESIGN_SECONDS, TreeSigner, open_tree_signer
from registry_gen.settings import Settings
from registry_gen.storage.s3 import Timeouts, s3_client
from tests.storage.conftest import BUCKET, Servers
from tests.storage.s3servers import S3Server, client, s3_credentials

pytestmark = pytest.mark.slow

# A tarball's served path with every character a tree key may hold beside letters and digits
# (hosting.TREE_KEY_CHARACTERS), each of which boto3 percent-encodes in the signed path.
ODD_TARBALL = "/@sc/n!a*m'e(x)/-/n+y,z=w:v~u_1.0.0.tgz"


def settings_for(endpoint: str, prefix: str, tmp_path: Path) -> Settings:
    return Settings(
        content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data", base_url="http://127.0.0.1:9/",
        storage=f"s3://{BUCKET}/{prefix}", storage_endpoint_url=endpoint,
    )  # fmt: skip


@pytest.fixture
def signer(request: pytest.FixtureRequest, s3_servers: Servers, tmp_path: Path) -> Iterator[tuple[TreeSigner, S3Server, str]]:
    """(the signer `registry-gen api` opens, the server, the tree's key prefix in BUCKET)."""
    server = s3_servers.get(request.param)
    prefix = f"s{secrets.token_hex(6)}"
    with s3_credentials():
        yield open_tree_signer(settings_for(server.endpoint, prefix, tmp_path)), server, f"{prefix}/_tree/"


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:  # noqa: S310 - 127.0.0.1
            return int(reply.status), reply.read()
    except urllib.error.HTTPError as error:
        return int(error.code), b""


@pytest.mark.parametrize("signer", ["moto", "seaweedfs"], indirect=True)
def test_each_signed_url_reads_its_key_of_the_private_bucket(signer: tuple[TreeSigner, S3Server, str]) -> None:
    """No bucket policy: an anonymous GET is refused, the signed one reads the object, for a
    scoped name and every odd character a key may hold. SeaweedFS checks signatures (moto does
    not): there a URL signed for one key reads no other."""
    tree, server, prefix = signer
    endpoint = server.endpoint
    objects = {ODD_TARBALL[1:]: b"odd tarball", "@sc/plain/index.html": b'{"name":"@sc/plain"}'}
    with s3_credentials():
        for key, data in objects.items():
            client(endpoint).put_object(Bucket=BUCKET, Key=prefix + key, Body=data)
    assert get(f"{endpoint}/{BUCKET}/{prefix}@sc/plain/index.html")[0] == 403

    tarball = tree.signed_reads(ODD_TARBALL, "index.html")
    document = tree.signed_reads("/@sc/plain", "abbreviated.json")
    assert tarball is not None and document is not None
    assert get(endpoint + tarball[2]) == (200, b"odd tarball")
    assert get(endpoint + document[1]) == (200, b'{"name":"@sc/plain"}')
    assert get(endpoint + document[0])[0] == 404  # signed, but no abbreviated document there
    assert parse_qs(urlsplit(tarball[2]).query)["X-Amz-Expires"] == [str(PRESIGN_SECONDS)]
    if server.kind == "seaweedfs":
        with s3_credentials():
            client(endpoint).put_object(Bucket=BUCKET, Key=prefix + "@sc/plain/other.html", Body=b"other")
        other = document[1].replace("/plain/index.html?", "/plain/other.html?")
        assert other != document[1] and get(endpoint + other)[0] == 403


@pytest.mark.parametrize("signer", ["moto"], indirect=True)
def test_the_read_decision_signs_without_botocore_the_url_boto3_signed(signer: tuple[TreeSigner, S3Server, str]) -> None:
    """Python calls into botocore and boto3 while the signer answers read decisions for 0.35 s: none
    (botocore's presign made ~1,000 a decision; and obstore asked boto3's chain for the credentials
    again after each 100 ms when they were given 5 minutes). Its URLs are byte for byte those boto3
    presigns for the same key in the same second, so nginx's config and every store still take them."""
    tree, server, prefix = signer
    endpoint = server.endpoint
    assert tree.signed_reads("/warm-up", "index.html") is not None  # the credentials, read once per 5 minutes
    decided, started = 0, time.monotonic()
    with counting_calls("botocore", "boto3") as calls:
        while decided < 20 or time.monotonic() - started < 0.35:  # several of object_store's 100 ms back-offs
            assert tree.signed_reads(f"/pkg-{decided}/", "index.html") is not None
            decided += 1
    assert calls == {}, (calls, decided)

    with s3_credentials():
        boto3 = s3_client(endpoint, Timeouts())
    for _ in range(5):  # a pair signed across a second's boundary differs in its date: sign again
        (ours,) = tree.signed_reads("/@sc/n!a*m'e(x)", "index.html")[2:]  # type: ignore[index]
        theirs = boto3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": prefix + "@sc/n!a*m'e(x)"}, ExpiresIn=PRESIGN_SECONDS)
        if parse_qs(urlsplit(ours).query)["X-Amz-Date"] == parse_qs(urlsplit(theirs).query)["X-Amz-Date"]:
            break
    assert endpoint + ours == theirs


class counting_calls:  # noqa: N801 - used as a context manager, named as one
    """The Python calls made in this thread into the named top-level packages, by package."""

    def __init__(self, *packages: str):
        self.packages = packages
        self.counts: dict[str, int] = {}

    def __enter__(self) -> dict[str, int]:
        sys.setprofile(self._seen)
        return self.counts

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(None)

    def _seen(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            package = str(frame.f_globals.get("__name__", "")).partition(".")[0]
            if package in self.packages:
                self.counts[package] = self.counts.get(package, 0) + 1


def test_a_decision_that_cannot_sign_is_a_500_and_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    """No credentials to sign with (none in boto3's chain): nginx gets a 500 (its client the same),
    the log says why, and no traceback goes anywhere."""
    from registry_gen.storage import S3Location, S3Storage
    from user_api.read_access import allow_all, signing

    with s3_credentials():
        bucket = S3Storage(S3Location(BUCKET, "tree"), endpoint_url="http://127.0.0.1:9")
    bucket.credentials = None  # as when the chain found none
    answered: list[str] = []
    question = {"HTTP_X_REGISTRY_GEN_PATH": "/pkg/", "HTTP_X_REGISTRY_GEN_DOCUMENT": "index.html", "REQUEST_METHOD": "GET"}
    with caplog.at_level(logging.ERROR, logger="user_api.read_access"):
        body = signing(allow_all, TreeSigner(bucket))(question, lambda status, headers, *rest: answered.append(status))
    assert answered == ["500 Internal Server Error"] and list(body) == []
    assert [record.getMessage() for record in caplog.records] == [
        f"cannot sign nginx's read of the private tree bucket: s3://{BUCKET}/tree: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a role"
    ]
