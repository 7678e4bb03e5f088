"""Connection, body and framing limits against a real `registry-gen serve` (issue 13, Medium/Low)."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from urllib.parse import urlsplit

import pytest

from registry_gen.archive import build_npm_tarball
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball

pytestmark = pytest.mark.slow
IDLE_SOCKETS = 300


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    root = tmp_path_factory.mktemp("limits")
    (root / "content").mkdir()
    (root / "content" / "limits-demo-1.0.0.tgz").write_bytes(tarball("limits-demo", "1.0.0"))
    process = RegistryProcess(root).start()
    try:
        yield process
    finally:
        process.stop()


def _address(base: str) -> tuple[str, int]:
    parts = urlsplit(base)
    return str(parts.hostname), int(parts.port or 80)


def _raw(base: str, request: bytes, timeout: float = 10) -> tuple[bytes, bool]:
    """Sends `request` on a fresh socket; (everything answered, whether the server closed the connection)."""
    with socket.create_connection(_address(base), timeout=timeout) as sock:
        sock.sendall(request)
        received = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return received, False
            if not chunk:
                return received, True
            received += chunk
        return received, False


def test_a_read_answers_within_a_second_while_hundreds_of_sockets_sit_idle(server: RegistryProcess) -> None:
    with ExitStack() as stack:
        for _ in range(IDLE_SOCKETS):
            stack.enter_context(socket.create_connection(_address(server.base), timeout=5))
        started = time.monotonic()
        reply = http("GET", server.base + "limits-demo", timeout=1)
        assert reply.status == 200 and time.monotonic() - started < 1


def test_content_length_with_chunked_is_refused_and_the_connection_closed(server: RegistryProcess) -> None:
    smuggled = (b"POST /-/v1/search HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"0\r\n\r\nGET /-/ping HTTP/1.1\r\nHost: x\r\n\r\n")
    answer, closed = _raw(server.base, smuggled)
    assert answer.split(b"\r\n")[0].endswith(b" 400 Bad Request") and answer.count(b"HTTP/1.") == 1
    assert closed


@pytest.mark.parametrize("request_line", [b"POST /-/user-api/tokens", b"PUT /-/user/org.couchdb.user:someone", b"PUT /some-new-package"])
def test_a_large_anonymous_body_is_refused_before_it_is_sent(server: RegistryProcess, request_line: bytes) -> None:
    head = request_line + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 209715200\r\n\r\n"
    answer, _ = _raw(server.base, head + b"{")  # 200 MiB announced, one byte sent
    assert answer.startswith(b"HTTP/1.1 413")


def test_a_login_body_over_64_kib_is_refused(server: RegistryProcess) -> None:
    reply = http("POST", server.base + "-/user-api/tokens", raw=b" " * (64 * 1024 + 1), headers={"Content-Type": "application/json"})
    assert reply.status == 413


def test_an_authenticated_publish_still_gets_the_large_cap(server: RegistryProcess) -> None:
    token = add_user(server.base, "big-publisher", "big-publisher-pass-1")
    manifest = json.dumps({"name": "big-limits-pkg", "version": "1.0.0"}).encode()
    blob = os.urandom(2 * 1024 * 1024)  # the body is over the 1 MiB cap of every non-publish route
    data = build_npm_tarball([("package.json", 0o644, manifest), ("blob.bin", 0o644, blob)])
    reply = http("PUT", server.base + "big-limits-pkg", token=token, body=publish_body("big-limits-pkg", "1.0.0", data))
    assert reply.status in (200, 201), reply.body
    size = len(json.dumps(publish_body("big-limits-pkg2", "1.0.0", data)))
    for authorization in (b"", b"Authorization: Bearer not-a-token\r\n"):  # anonymous, or a made-up token
        head = b"PUT /big-limits-pkg2 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + authorization
        answer, _ = _raw(server.base, head + f"Content-Length: {size}\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.0 413") or answer.startswith(b"HTTP/1.1 413"), answer[:80]
