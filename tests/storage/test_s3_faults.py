"""S3Storage when the store misbehaves: killed, hung, missing bucket, refused credentials, an answer
lost on the way. Each S3 server is a real process on loopback (tests/storage/s3servers.py); the
lost answer comes from a small proxy the test starts in front of it."""

from __future__ import annotations

import contextlib
import http.server
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from registry_gen.errors import StorageError, StorageUnavailable, VersionConflict
from registry_gen.objectstore import ContentMirror
from registry_gen.storage import S3Location, S3Storage, Timeouts, archive_key
from tests.storage.conftest import BUCKET, S3_KINDS, Servers, s3_store
from tests.storage.s3servers import client, forward, make_bucket, relay, s3_server
from tests.support import serving

pytestmark = pytest.mark.slow

KEY = archive_key("@acme/widget", "1.0.0")


def operations(store: S3Storage, tmp_path: Path) -> dict[str, Callable[[], object]]:
    return {
        "exists": lambda: store.exists(KEY),
        "read": lambda: store.read(KEY),
        "open": lambda: store.open(KEY),
        "spool": lambda: store.spool(KEY, tmp_path / "spooled.tgz"),
        "list": lambda: list(store.list()),
        "create": lambda: store.create(archive_key("other", "1.0.0"), b"new"),
        "replace": lambda: store.replace(KEY, b"replaced"),
        "remove": lambda: store.remove(KEY),
    }


@pytest.mark.parametrize("kind", S3_KINDS)
def test_a_hung_then_killed_store_fails_every_call_quickly_with_storage_unavailable(kind: str, tmp_path: Path) -> None:
    """Hung (SIGSTOP: the kernel accepts connections, nothing answers): the read timeout bounds each
    call, and the store is used again once it answers. Killed: with the default timeouts and
    retries a refused connection costs at most the retries' backoff (~3 s), never a hang."""
    with s3_server(kind, tmp_path) as server:
        make_bucket(server.endpoint, BUCKET)
        impatient = s3_store(server.endpoint, S3Location(BUCKET, "content"), timeouts=Timeouts(connect=1, read=1, attempts=2))
        store = s3_store(server.endpoint, S3Location(BUCKET, "content"))
        store.create(KEY, b"published")
        assert store.atomic_create is impatient.atomic_create is server.conditional_writes  # probed while up
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            hung = operations(impatient, tmp_path)
            assert_all_unavailable_within(8, {name: hung[name] for name in ("exists", "read", "list", "create")})
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        assert impatient.read(KEY) == b"published"
        server.process.kill()
        server.process.wait(timeout=30)
        for message in assert_all_unavailable_within(8, operations(store, tmp_path)).values():
            assert "\n" not in message and "s3://content/content" in message and "retry shortly" in message, message
    assert not (tmp_path / "spooled.tgz").exists()


def assert_all_unavailable_within(seconds: float, calls: dict[str, Callable[[], object]]) -> dict[str, str]:
    """Makes the calls at once, one thread each (the bound holds per call, and the test waits for
    the slowest call rather than the sum of their timeouts and backoffs): each must fail with
    StorageUnavailable within `seconds` of its own start. Returns each call's message."""
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="s3-fault") as pool:
        outcomes = {name: pool.submit(unavailable_within, seconds, name, call) for name, call in calls.items()}
        return {name: outcome.result() for name, outcome in outcomes.items()}


def unavailable_within(seconds: float, name: str, call: Callable[[], object]) -> str:
    began = time.monotonic()
    with pytest.raises(StorageUnavailable) as caught:
        call()
    took = time.monotonic() - began
    assert took < seconds, (name, took)
    return str(caught.value)


@pytest.mark.parametrize("kind", S3_KINDS)
def test_a_missing_bucket_is_a_storage_error_naming_it(kind: str, s3_servers: Servers) -> None:
    server = s3_servers.get(kind)
    store = s3_store(server.endpoint, S3Location("no-such-bucket", "content"), conditional_writes=True)
    with pytest.raises(StorageError) as caught:
        store.create(KEY, b"x")
    assert not isinstance(caught.value, StorageUnavailable)
    assert "no-such-bucket" in str(caught.value) and "\n" not in str(caught.value)


def test_credentials_the_store_refuses_are_a_storage_error(s3_servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    """s3rver checks signatures (moto and SeaweedFS without IAM take any key)."""
    server = s3_servers.get("s3rver")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "WRONG")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "WRONG")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = S3Storage(S3Location(BUCKET, "content"), endpoint_url=server.endpoint, conditional_writes=False)
    with pytest.raises(StorageError) as caught:
        store.read(KEY)
    assert not isinstance(caught.value, StorageUnavailable) and "refused: 403" in str(caught.value)


def test_a_store_that_ignores_the_condition_is_found_and_said_once(s3_servers: Servers, caplog: pytest.LogCaptureFixture) -> None:
    server = s3_servers.get("s3rver")
    store = s3_store(server.endpoint, S3Location(BUCKET, "probed"))
    with caplog.at_level(logging.WARNING, logger="registry_gen.storage.s3"):
        store.create(KEY, b"first")
        with pytest.raises(VersionConflict):  # check-then-write still refuses what it sees
            store.create(KEY, b"second")
        store.create(archive_key("x", "1.0.0"), b"x")
    said = [r.getMessage() for r in caplog.records if "ignores If-None-Match" in r.getMessage()]
    assert len(said) == 1 and "UNIQUE(name, version)" in said[0]
    assert store.read(KEY) == b"first"


def test_configured_without_conditional_writes_it_checks_then_writes_and_sends_no_probe(s3_servers: Servers) -> None:
    server = s3_servers.get("moto")
    store = s3_store(server.endpoint, S3Location(BUCKET, "configured"), conditional_writes=False)
    store.create(KEY, b"first")
    with pytest.raises(VersionConflict):
        store.create(KEY, b"second")
    assert store.atomic_create is False and store.read(KEY) == b"first"


class LosingProxy(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the S3 server; for the first conditional PUT it forwards the
    request, lets the server store it, then closes the connection without the answer."""

    upstream: str
    lost: list[str]

    def relay(self) -> None:
        answer = forward(self, self.upstream)
        if self.command == "PUT" and self.headers.get("If-None-Match") == "*" and self.path not in self.lost and "probe" not in self.path:
            self.lost.append(self.path)
            self.close_connection = True
            return  # stored upstream; the client hears nothing
        relay(self, *answer)

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = relay  # noqa: N815 - stdlib naming

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@contextlib.contextmanager
def losing_proxy(endpoint: str) -> Iterator[tuple[str, list[str]]]:
    lost: list[str] = []
    handler = type("Handler", (LosingProxy,), {"upstream": endpoint.removeprefix("http://"), "lost": lost})
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as port:
        yield f"http://127.0.0.1:{port}", lost


@pytest.mark.parametrize("kind", ["moto", "seaweedfs"])
def test_a_create_whose_answer_was_lost_succeeds_on_boto3s_retry(kind: str, s3_servers: Servers) -> None:
    """The retry meets 412 (the first PUT landed): the bytes there are ours, so the create
    succeeded; another writer's bytes would still be a VersionConflict."""
    server = s3_servers.get(kind)
    with losing_proxy(server.endpoint) as (endpoint, lost):
        store = s3_store(endpoint, S3Location(BUCKET, "lost-answers"))
        store.create(KEY, b"ours")
        assert lost and store.read(KEY) == b"ours"
        other = archive_key("@acme/widget", "2.0.0")
        s3_store(server.endpoint, S3Location(BUCKET, "lost-answers")).create(other, b"theirs")
        with pytest.raises(VersionConflict):
            store.create(other, b"ours")  # lost again, retried, and the bytes there are not ours
        assert len(lost) == 2 and store.read(other) == b"theirs"


def test_a_key_put_by_other_means_that_obstore_cannot_name_does_not_break_a_listing(s3_servers: Servers) -> None:
    """object_store refuses a listed key with an empty or `..` segment and fails the whole listing;
    such a key, put into the bucket by hand, must not stop every sync (the server's start lists the
    whole bucket): the folder is listed again through boto3, and the contract's key rule decides."""
    server = s3_servers.get("moto")
    location = S3Location(BUCKET, "odd-keys")
    raw = client(server.endpoint)
    for name in ("odd-keys/pkg/pkg-1.0.0.tgz", "odd-keys/pkg//double.tgz", "odd-keys/pkg/../dots.tgz", "odd-keys/pkg/pkg-1.0.1.tgz"):
        raw.put_object(Bucket=BUCKET, Key=name, Body=b"x")
    store = s3_store(server.endpoint, location)
    listed = sorted(item.key for item in store.list("pkg/"))
    assert {"pkg/pkg-1.0.0.tgz", "pkg/pkg-1.0.1.tgz"} <= set(listed) and "pkg/../dots.tgz" not in listed, listed
    assert len(listed) == len(set(listed))  # each once, though the first listing had begun
    assert sorted(item.key for item in store.list()) == listed


def test_a_key_obstore_cannot_name_is_said_once_a_process_not_at_every_listing(s3_servers: Servers, caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """A start's sync and every build of the folder list it again: one warning per such key, naming
    it. Neither is listed (`pkg//double.tgz` was, and the sync's read of it failed every start)."""
    server = s3_servers.get("moto")
    location = S3Location(BUCKET, f"odd-{os.urandom(4).hex()}")
    raw = client(server.endpoint)
    for name in ("pkg/pkg-1.0.0.tgz", "pkg//double.tgz", "pkg/../dots.tgz"):
        raw.put_object(Bucket=BUCKET, Key=f"{location.prefix}/{name}", Body=b"x")
    with caplog.at_level(logging.WARNING, logger="registry_gen.storage.s3"):
        for _ in range(3):
            assert "pkg/pkg-1.0.0.tgz" in {item.key for item in s3_store(server.endpoint, location).list("pkg/")}  # a store each time: as instances do
    said = [record.getMessage() for record in caplog.records if "cannot name" in record.getMessage()]
    mirror = ContentMirror(s3_store(server.endpoint, location), tmp_path)
    assert [item.key for item in mirror.bucket.list("pkg/")] == ["pkg/pkg-1.0.0.tgz"] and mirror.sync("pkg/") == 1
    assert len(said) == 2 and {f"{location.prefix}/pkg//double.tgz", f"{location.prefix}/pkg/../dots.tgz"} == {
        line.rsplit(": ", 1)[1].split(";")[0] for line in said}, said  # fmt: skip


# ---------------------------------------------------------------- a store behind a private CA

class Relaying(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the S3 server unchanged (TLS ends here)."""

    upstream: str

    def relay(self) -> None:
        relay(self, *forward(self, self.upstream))

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = relay  # noqa: N815 - stdlib naming

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


def private_ca(folder: Path) -> tuple[Path, Path, Path]:
    """A CA of its own and a certificate it signed for 127.0.0.1: (CA bundle, certificate, key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "registry-gen test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    bundle, certificate, key = folder / "ca.pem", folder / "leaf.pem", folder / "leaf.key"
    bundle.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    certificate.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return bundle, certificate, key


@contextlib.contextmanager
def tls_front(endpoint: str, certificate: Path, key: Path) -> Iterator[str]:
    import ssl

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Relaying,), {"upstream": endpoint.removeprefix("http://")}))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with serving(server) as port:
        yield f"https://127.0.0.1:{port}"


def test_a_store_behind_a_private_ca_is_trusted_through_ssl_cert_file_and_aws_ca_bundle_alone_is_said(
    s3_servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The client trusts the system's CAs or SSL_CERT_FILE's; boto3's AWS_CA_BUNDLE, which an
    operator moving from boto3 may have set, is not read: one warning line says what to do."""
    from registry_gen.storage import s3

    bundle, certificate, key = private_ca(tmp_path)
    with tls_front(s3_servers.get("moto").endpoint, certificate, key) as endpoint:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
        s3.warn_ca_bundle_unread.cache_clear()
        untrusted = s3_store(endpoint, S3Location(BUCKET, "private-ca"), timeouts=Timeouts(connect=2, read=5, attempts=1))
        with caplog.at_level(logging.WARNING), pytest.raises(StorageUnavailable):
            untrusted.create(KEY, b"refused")
        said = [r.getMessage() for r in caplog.records if "AWS_CA_BUNDLE" in r.getMessage()]
        assert len(said) == 1 and "SSL_CERT_FILE" in said[0] and "update-ca-certificates" in said[0]
        monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
        trusted = s3_store(endpoint, S3Location(BUCKET, "private-ca"), conditional_writes=True)
        trusted.create(KEY, b"over TLS")
        assert trusted.read(KEY) == b"over TLS"
