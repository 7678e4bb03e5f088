"""Connections kept open to an upstream between requests (I/O; thread-safe).

urllib sends `Connection: close` and opens a connection per request: a cold install through the
mirror opened one to its uplink for each of its ~530 document and tarball misses (bench/PROFILE.md,
"fourth pass"). `KeptConnections` keeps the idle ones by origin; a request takes one (or opens one),
and gives it back only once its answer was read to the end within its deadline. A kept connection
the server closed meanwhile fails at once on reuse, and the request goes again on a new one.

Only plain requests take this path: a redirect, or a proxy configured for the scheme, goes through
urllib as before (`RegistryClient._attempt`), with its rules for both."""

from __future__ import annotations

import http.client
import ssl
import threading
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit

Origin = tuple[str, str, int]
# What a kept connection the server already closed raises when it is used again.
STALE = (http.client.RemoteDisconnected, http.client.BadStatusLine, ConnectionResetError, BrokenPipeError)


class KeptConnections:
    def __init__(self, tls: Callable[[], ssl.SSLContext], most_idle: int = 16):
        self.tls = tls
        self.most_idle = most_idle  # per origin: the idle ones beyond it are closed
        self.lock = threading.Lock()
        self.idle: dict[Origin, list[http.client.HTTPConnection]] = {}

    def usable_for(self, url: str) -> Origin | None:
        """The origin of `url` when a kept connection may carry it (no proxy for its scheme)."""
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname or ""
        if scheme not in ("http", "https") or not host:
            return None
        if scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(host):
            return None
        return scheme, host, parts.port or (443 if scheme == "https" else 80)

    def take(self, origin: Origin, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection to `origin` (True: reused), else a new one, not yet connected."""
        with self.lock:
            kept = self.idle.get(origin)
            connection = kept.pop() if kept else None
        if connection is not None:
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
            return connection, True
        scheme, host, port = origin
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=self.tls()), False
        return http.client.HTTPConnection(host, port, timeout=timeout), False

    def give(self, origin: Origin, connection: http.client.HTTPConnection) -> None:
        """Keeps a connection whose answer was read whole; closes it when enough are idle."""
        with self.lock:
            kept = self.idle.setdefault(origin, [])
            if len(kept) < self.most_idle:
                kept.append(connection)
                return
        connection.close()
