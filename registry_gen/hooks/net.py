"""One delivery attempt over the network, with the address rule applied to the address actually
connected to: the host is resolved here, each address checked (rules.address_allowed), and the
connection made to that address itself, with the Host header (and, for https, the SNI and the
certificate check) of the name; so a name that resolves elsewhere on a second lookup (DNS
rebinding) never reaches a refused address. Redirects are not followed (a 3xx is a failure); at
most rules.EXCERPT_BYTES of the answer are read; one timer bounds the whole attempt, however
slowly the endpoint trickles its answer."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from registry_gen.hooks.rules import EXCERPT_BYTES, address_allowed, excerpt

Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    status: int | None
    error: str | None
    latency_ms: int
    excerpt: str | None = None


class AddressRefused(Exception):
    """Every address the endpoint's host resolves to is one hooks may not reach."""


def allowed_address(host: str, port: int, allow_networks: Sequence[str], resolve: Resolver = system_resolver) -> str:
    """The first address of `host` a hook may connect to; AddressRefused naming them otherwise."""
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise AddressRefused(f"{host} does not resolve ({exc})") from None
    for address in addresses:
        if address_allowed(address, allow_networks):
            return address
    shown = ", ".join(addresses) or "nothing"
    raise AddressRefused(
        f"{host} resolves to {shown}: loopback, private, link-local and other non-public addresses are refused "
        "(an operator may allow a range with hooks: {allow_networks: [...]} in registry.yaml)"
    )


class _PinnedConnection(http.client.HTTPConnection):
    """Connects to one checked address, whatever the name resolves to now."""

    def __init__(self, host: str, port: int, address: str, timeout: float, tls: ssl.SSLContext | None):
        super().__init__(host, port, timeout=timeout)
        self.address = address
        self.tls = tls
        self.opened: socket.socket | None = None

    def connect(self) -> None:
        raw = socket.create_connection((self.address, self.port), timeout=self.timeout)
        self.sock = self.tls.wrap_socket(raw, server_hostname=self.host) if self.tls is not None else raw
        self.opened = self.sock  # kept: http.client forgets `sock` once an answer says it closes


def post(
    endpoint: str, body: bytes, headers: Mapping[str, str], *, timeout: float, allow_networks: Sequence[str],
    resolve: Resolver = system_resolver,
) -> Outcome:
    """POSTs `body` to `endpoint` once; ok when it answers 2xx within `timeout` seconds in all."""
    started = time.monotonic()
    parts = urlsplit(endpoint)
    host, port = str(parts.hostname), parts.port or (443 if parts.scheme == "https" else 80)
    try:
        address = allowed_address(host, port, allow_networks, resolve)
    except AddressRefused as exc:
        return Outcome(False, None, str(exc), 0)
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    connection = _PinnedConnection(host, port, address, timeout, tls)
    timer = threading.Timer(timeout, _cut, (connection,))
    timer.start()
    try:
        status, answer = _exchange(connection, parts, body, headers)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        elapsed = time.monotonic() - started
        reason = f"no answer within {timeout:g} s" if elapsed >= timeout else f"{type(exc).__name__}: {exc}"
        return Outcome(False, None, reason, int(elapsed * 1000))
    finally:
        timer.cancel()
        connection.close()
    latency = int((time.monotonic() - started) * 1000)
    error = None if 200 <= status < 300 else f"answered {status}" + (" (redirects are not followed)" if 300 <= status < 400 else "")
    return Outcome(error is None, status, error, latency, excerpt(answer))


def _exchange(connection: _PinnedConnection, parts: Any, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection.request("POST", path, body=body, headers={**headers, "Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, response.read(EXCERPT_BYTES)


def _cut(connection: _PinnedConnection) -> None:
    """The attempt's time is up: shut its socket, so a read in progress fails at once (the socket
    it opened: http.client forgets its `sock` once it read the head of an answer that closes)."""
    sock = connection.opened
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
