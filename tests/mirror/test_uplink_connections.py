"""The mirror keeps its connections to an uplink open between requests (a cold install opened one
per document and tarball miss, bench/PROFILE.md), against a real HTTP/1.1 server on loopback that
counts the connections it accepts; a connection the server closed while idle costs no failure."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from registry_gen.importers.client import StatusProblem
from registry_gen.mirror.config import Uplink
from registry_gen.mirror.service import uplink_client
from tests.support import serving

DOCUMENT = json.dumps({"name": "kept", "versions": {}}).encode()
TARBALL = b"not really a tarball, only bytes to stream"


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    close_idle = False  # close each connection after one answer without saying so (an idle timeout)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/missing":
            body, status = b'{"error":"not found"}', 404
        elif self.path == "/fresh" and self.headers.get("If-None-Match") == '"v1"':
            self.send_response(304)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        else:
            body, status = (TARBALL if self.path.endswith(".tgz") else DOCUMENT), 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"v1"')
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = self.server.close_idle

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@contextmanager
def upstream(close_idle: bool = False) -> Iterator[Server]:
    server = Server(("127.0.0.1", 0), Handler)
    server.close_idle = close_idle
    with serving(server):
        yield server


def client_of(server: Server):  # type: ignore[no-untyped-def]
    return uplink_client(Uplink("up", f"http://127.0.0.1:{server.server_address[1]}/", timeout=5.0, retry=0))


def test_an_uplinks_documents_and_tarballs_share_one_connection(tmp_path: Path) -> None:
    with upstream() as server:
        client = client_of(server)
        for _ in range(5):
            assert client.document("kept")["name"] == "kept"
        client.download(f"http://127.0.0.1:{server.server_address[1]}/kept/-/kept-1.0.0.tgz", "kept@1.0.0", tmp_path / "t", 1 << 20)
        assert (tmp_path / "t").read_bytes() == TARBALL
        with pytest.raises(StatusProblem) as missing:
            client.document("missing")
        assert missing.value.status == 404
        assert client.document_if_changed("fresh", '"v1"').document is None  # a 304, as before
        connections = server.connections
    assert connections <= 3, f"{connections} connections for 8 requests"  # the error answers close theirs


def test_a_connection_the_uplink_closed_while_idle_is_replaced_without_a_failure() -> None:
    with upstream(close_idle=True) as server:
        client = client_of(server)  # retry=0: one attempt per request, so a stale connection must not count as one
        for _ in range(3):
            assert client.document("kept")["name"] == "kept"
        connections = server.connections
    assert connections == 3
