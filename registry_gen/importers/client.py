"""An HTTP client for npm-protocol registries: retries with backoff, clear errors naming the entry.

An upstream is not trusted (SECURITY.md, "Imports"), so every request is bounded:
- its body is streamed (to a file for tarballs) and refused past a size cap, announced or not;
- the whole request, redirects included, has a deadline: a timer (one thread for every request)
  shuts the socket when it passes, so a server trickling a byte at a time fails then, not never;
- redirects are followed to http and https only, and the token (`Authorization`) goes only to
  the origin it was given for: a redirect that leaves that origin drops it.

Concurrency lives in the orchestrator (a bounded thread pool calls these methods)."""

from __future__ import annotations

import functools
import heapq
import http.client
import io
import itertools
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin, urlsplit

from registry_gen.importers.keepalive import STALE, KeptConnections, Origin
from registry_gen.importers.model import DEFAULT_DEADLINE, ImportProblem
from registry_gen.importers.upstream import document_url, same_origin

USER_AGENT = "registry-gen-import (+npm-protocol)"
RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
REDIRECTS = frozenset({301, 302, 303, 307, 308})
FOLLOWED_SCHEMES = frozenset({"http", "https"})
CHUNK = 64 * 1024
PRUNE_AT = 4096  # deadlines kept before finished ones are dropped ahead of their time
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024  # a package document is parsed in memory: the largest public ones stay well below


class DownloadRefused(ImportProblem):
    """A request that retrying cannot mend: over the cap, past the deadline, a refused redirect."""


class StatusProblem(ImportProblem):
    """The registry answered with an HTTP error status (`status`: 404 says it has no such thing)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Answer:
    """A conditional document request's outcome: the document (None: not modified since the
    validators sent), and the validators to send next time."""

    document: dict[str, Any] | None
    etag: str | None = None
    last_modified: str | None = None


class Deadlines:
    """One daemon thread for every request's deadline: it wakes at the earliest one due and calls
    its `expire` (a thread started per request cost a cold install through the mirror one thread
    start per document and tarball, bench/PROFILE.md). Thread-safe; the thread starts on first use
    and ends when nothing is due for a minute."""

    def __init__(self) -> None:
        self.ready = threading.Condition()
        self.due: list[tuple[float, int, Transfer]] = []  # a heap by time; cancelled ones stay until due
        self.order = itertools.count()
        self.thread: threading.Thread | None = None

    def add(self, transfer: Transfer, seconds: float) -> None:
        with self.ready:
            if len(self.due) >= PRUNE_AT:  # finished requests with long deadlines: drop them now
                self.due = [entry for entry in self.due if not entry[2].finished]
                heapq.heapify(self.due)
            entry = (time.monotonic() + max(seconds, 0.0), next(self.order), transfer)
            heapq.heappush(self.due, entry)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="request-deadlines", daemon=True)
                self.thread.start()
            elif self.due[0] is entry:  # due before any other: the thread sleeps too long otherwise
                self.ready.notify()

    def _run(self) -> None:
        while True:
            with self.ready:
                while not self.due or self.due[0][0] > time.monotonic():
                    wait = self.due[0][0] - time.monotonic() if self.due else 60.0
                    if not self.ready.wait(wait) and not self.due:
                        self.thread = None  # idle: the next add starts another
                        return
                _, _, transfer = heapq.heappop(self.due)
            if not transfer.finished:
                transfer.expire()


DEADLINES = Deadlines()


class Transfer:
    """One request's deadline: at `seconds`, the socket in use is shut, which ends any read."""

    def __init__(self, seconds: float):
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.expired = False
        self.finished = False
        self.seconds = seconds

    def attach(self, sock: socket.socket) -> None:
        with self.lock:
            self.sock = sock
            if self.expired:
                _shut(sock)

    def expire(self) -> None:
        with self.lock:
            if self.finished:
                return
            self.expired = True
            if self.sock is not None:
                _shut(self.sock)

    def __enter__(self) -> Transfer:
        DEADLINES.add(self, self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.finished = True
            self.sock = None


def _shut(sock: socket.socket) -> None:
    try:
        # The plain socket's shutdown, also under TLS: it wakes a reader in another thread
        # without tearing the SSL object down beneath it.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


class Tracked:
    """A connection that hands its socket to its request's `Transfer` once connected."""

    def __init__(self, *args: Any, transfer: Transfer, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.transfer = transfer

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self.transfer.attach(self.sock)  # type: ignore[attr-defined]


class TrackedHTTPConnection(Tracked, http.client.HTTPConnection):
    pass


class TrackedHTTPSConnection(Tracked, http.client.HTTPSConnection):
    pass


class TrackedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, transfer: Transfer):
        super().__init__()
        self.transfer = transfer

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(TrackedHTTPConnection, transfer=self.transfer), req)


class TrackedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, transfer: Transfer):
        super().__init__()
        self.transfer = transfer

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(TrackedHTTPSConnection, transfer=self.transfer), req, context=tls_context())


@functools.cache
def tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


class OriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows http(s) redirects only; `Authorization` survives only while the origin stays the same."""

    def __init__(self, origin: str):
        self.origin = origin

    def http_error_302(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Any) -> Any:
        target = headers.get("location") or headers.get("uri")
        if target is not None:
            fp.close()  # the redirect's own body is never read: it could be of any size
            joined = urljoin(req.full_url, target)
            if urlsplit(joined).scheme.lower() not in FOLLOWED_SCHEMES:
                raise DownloadRefused(f"{req.full_url} redirects to {joined[:200]!r}: only http and https redirects are followed")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Any, newurl: str) -> Any:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and not same_origin(newurl, self.origin):
            new.remove_header("Authorization")
        return new


@dataclass(frozen=True)
class RegistryClient:
    registry: str
    token: str | None = None
    token_origin: str | None = None  # where the token may be sent (default: `registry`)
    attempts: int = 4
    backoff: float = 0.5  # seconds before the second attempt; doubles each time
    timeout: float = 60.0  # seconds one read may wait
    deadline: float = DEFAULT_DEADLINE  # seconds one whole request may take
    max_document_bytes: int = MAX_DOCUMENT_BYTES
    auth_scheme: str = "Bearer"
    headers: tuple[tuple[str, str], ...] = ()  # sent with every request (an uplink's `headers:`)
    # Connections kept open between requests (the mirror's uplinks); None: one per request.
    connections: KeptConnections | None = field(default=None, compare=False, repr=False)

    def document(self, name: str) -> dict[str, Any]:
        """The full package document (times included: the abbreviated form lacks them)."""
        answer = self.document_if_changed(name)
        assert answer.document is not None  # no validators sent: never "not modified"
        return answer.document

    def document_if_changed(self, name: str, etag: str | None = None, last_modified: str | None = None) -> Answer:
        """The full document unless it is unchanged since `etag`/`last_modified` (a 304)."""
        sink = io.BytesIO()
        conditions = {"If-None-Match": etag, "If-Modified-Since": last_modified}
        seen: dict[str, str] = {}
        try:
            self.fetch(document_url(self.registry, name), name, lambda: _rewound(sink), self.max_document_bytes,
                       "application/json", {k: v for k, v in conditions.items() if v}, seen)  # fmt: skip
        except StatusProblem as exc:
            if exc.status == 304:
                return Answer(None, etag, last_modified)
            raise
        return Answer(self._parsed(name, sink.getvalue()), seen.get("etag"), seen.get("last-modified"))

    def _parsed(self, name: str, body: bytes) -> dict[str, Any]:
        try:
            doc = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ImportProblem(f"{name}: the registry's answer is not JSON ({exc})") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("versions"), dict):
            raise ImportProblem(f"{name}: the registry's answer is not a package document")
        return doc

    def download(self, url: str, entry: str, target: Path, max_bytes: int) -> None:
        """Streams `url` into `target` (created or truncated), refusing more than `max_bytes`."""
        with open(target, "wb") as sink:
            self.fetch(url, entry, lambda: _rewound(sink), max_bytes)

    def fetch(
        self, url: str, entry: str, sink: Callable[[], IO[bytes]], cap: int, accept: str = "*/*",
        extra: dict[str, str] | None = None, seen: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        """Writes the body of `url` into a fresh `sink()` per attempt; retries what may mend.
        `extra`: more request headers; `seen` receives the answer's ETag and Last-Modified."""
        headers = {"User-Agent": USER_AGENT, "Accept": accept, **dict(self.headers), **(extra or {})}
        if self.token and same_origin(url, self.token_origin or self.registry):
            headers["Authorization"] = f"{self.auth_scheme} {self.token}"
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            try:
                return self._attempt(urllib.request.Request(url, headers=headers), entry, sink(), cap, seen)
            except urllib.error.HTTPError as error:
                if error.code not in RETRIED_STATUSES or attempt == self.attempts:
                    raise StatusProblem(f"{entry}: {url} answered {error.code}{_hint(error.code)}", error.code) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as error:
                if attempt == self.attempts:
                    reason = getattr(error, "reason", error)
                    raise ImportProblem(f"{entry}: cannot reach {url} ({reason}); check the URL and the network") from None
            time.sleep(delay)  # backoff between retries of a failed request, not synchronisation
            delay *= 2
        raise AssertionError("unreachable")

    def _attempt(self, request: urllib.request.Request, entry: str, sink: IO[bytes], cap: int, seen: dict[str, str] | None = None) -> None:
        kept: tuple[Origin, http.client.HTTPConnection, http.client.HTTPResponse] | None = None
        with Transfer(self.deadline) as transfer:
            try:
                kept = self._kept_open(request, transfer)
                reply = kept[2] if kept is not None else self._opener(transfer).open(request, timeout=self.timeout)
                with reply:
                    if seen is not None:
                        seen.update({k: reply.headers[k] for k in ("etag", "last-modified") if reply.headers.get(k)})
                    _stream(reply, sink, cap, f"{entry}: {reply.url}")
            except BaseException as error:
                if kept is not None:
                    kept[1].close()
                if transfer.expired and isinstance(error, Exception) and not isinstance(error, DownloadRefused):
                    raise self._late(entry, request.full_url) from None
                raise
            if transfer.expired:
                if kept is not None:
                    kept[1].close()
                raise self._late(entry, request.full_url)
        if kept is not None and self.connections is not None:
            self._give_back(*kept)

    def _opener(self, transfer: Transfer) -> urllib.request.OpenerDirector:
        return urllib.request.build_opener(
            TrackedHTTPHandler(transfer), TrackedHTTPSHandler(transfer), OriginRedirects(self.token_origin or self.registry)
        )

    def _kept_open(self, request: urllib.request.Request, transfer: Transfer) -> tuple[Origin, http.client.HTTPConnection, http.client.HTTPResponse] | None:
        """A 2xx answer on a kept connection (`connections`), or None: the request goes through
        urllib (no pool, a proxy for its scheme, a redirect). Error statuses raise HTTPError as
        urllib does; a kept connection the server closed meanwhile is replaced at once."""
        origin = self.connections.usable_for(request.full_url) if self.connections is not None else None
        if origin is None or self.connections is None:
            return None
        parts = urlsplit(request.full_url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        while True:
            connection, reused = self.connections.take(origin, self.timeout)
            try:
                if connection.sock is None:
                    connection.connect()
                transfer.attach(connection.sock)  # type: ignore[arg-type]
                connection.request("GET", target, headers=dict(request.header_items()))
                reply = connection.getresponse()
            except STALE:
                connection.close()
                if reused and not transfer.expired:
                    continue  # closed by the server while idle: not a failure of the upstream
                raise
            except BaseException:
                connection.close()
                raise
            break
        reply.url = request.full_url  # type: ignore[attr-defined] - as urllib's answers carry it
        if 200 <= reply.status < 300:
            return origin, connection, reply
        connection.close()
        if reply.status in REDIRECTS:
            return None  # urllib follows it, under OriginRedirects' rules
        raise urllib.error.HTTPError(request.full_url, reply.status, reply.reason, reply.headers, None)

    def _give_back(self, origin: Origin, connection: http.client.HTTPConnection, reply: http.client.HTTPResponse) -> None:
        """Keeps the connection of an answer read whole, unless the server said it closes it."""
        if reply.will_close or not reply.isclosed() or self.connections is None:
            connection.close()
        else:
            self.connections.give(origin, connection)

    def _late(self, entry: str, url: str) -> DownloadRefused:
        return DownloadRefused(f"{entry}: {url} did not finish within the {self.deadline:g} s download deadline (--download-deadline)")


def _rewound(sink: IO[bytes]) -> IO[bytes]:
    sink.seek(0)
    sink.truncate()
    return sink


def _stream(reply: http.client.HTTPResponse, sink: IO[bytes], cap: int, where: str) -> None:
    """Copies the body chunk by chunk; refuses it once it is over `cap`, or when announced so."""
    announced = reply.headers.get("Content-Length", "")
    if announced.isdigit() and int(announced) > cap:
        raise DownloadRefused(f"{where} announces {announced} bytes, more than the {cap}-byte cap; not downloaded")
    total = 0
    while chunk := reply.read1(CHUNK):
        total += len(chunk)
        if total > cap:
            raise DownloadRefused(f"{where} is larger than the {cap}-byte cap; download stopped there")
        sink.write(chunk)


def _hint(status: int) -> str:
    if status in (401, 403):
        return " (the registry wants a login: pass --token)"
    if status == 404:
        return " (no such package or file on that registry)"
    return ""
