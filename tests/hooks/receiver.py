"""A hook receiver on 127.0.0.1 that checks each delivery's signature, as a receiver should, and
records it; it can be taken down and brought back on the same port, or made hostile."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.hosts.servers import free_port


@dataclass
class Received:
    delivery: str
    event: str
    body: dict[str, Any]
    signed: bool


@dataclass
class Receiver:
    secret: str
    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list)
    answer: Callable[[http.server.BaseHTTPRequestHandler], None] | None = None  # hostile behaviour
    _server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> Receiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - stdlib naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                expected = "sha256=" + hmac.new(receiver.secret.encode(), body, hashlib.sha256).hexdigest()
                signed = hmac.compare_digest(expected, self.headers.get("x-npm-signature", ""))
                parsed = json.loads(body)
                receiver.received.append(Received(self.headers.get("x-registry-delivery", ""), parsed["event"], parsed, signed))
                if receiver.answer is not None:
                    receiver.answer(self)
                    return
                self.send_response(200 if signed else 401)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def wait_for(self, count: int, deadline: float = 30.0) -> list[Received]:
        """The deliveries once `count` arrived (distinct delivery ids); fails at the deadline."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if len({r.delivery for r in self.received}) >= count:
                return list(self.received)
            time.sleep(0.05)
        raise AssertionError(f"{count} deliveries expected, got {[(r.event, r.delivery) for r in self.received]}")
