"""Limits applied by waitress itself, before the app sees a request or any of its body.

waitress buffers a whole request body before it hands the request to the app, so a cap checked
in a route comes too late: the bytes are already on disk. `GuardedRequestParser` checks, as soon
as the request line and headers are parsed:

- a request that carries both `Content-Length` and `Transfer-Encoding` is refused with 400 and the
  connection is closed (the request-smuggling shape behind a proxy, RFC 9112 §6.1);
- the body's declared length, and for a chunked body the bytes received so far, against the cap
  of its route (`body_cap`). Only a write whose bearer token is valid and read-write gets the
  publish cap; everything else is capped at a few KiB to 1 MiB.

When the accounts' database cannot be reached (PostgreSQL down), the token cannot be checked:
the request gets the API's 503 with Retry-After at once, as a write past the parser would, never
a connection closed without an answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.utilities import Error, RequestEntityTooLarge

from user_api.errors import StoreUnavailable

# Who calls what: user documents, logins and web-login bodies are small JSON or XML objects.
SMALL_BODY: Final = 64 * 1024
# Every other registry body that is not a publish (dist-tags, deprecations, owners, audit).
JSON_BODY: Final = 1024 * 1024
SMALL_BODY_PREFIXES: Final = ("/user/", "/-/user-api/", "/-/user/", "/-/v1/login", "/-/v1/done/", "/-/npm/v1/tokens")

TokenCheck = Callable[[str], bool]


def is_publish_shape(method: str, path: str) -> bool:
    """A request that may carry a tarball: a PUT of a package document or of a legacy attachment."""
    return method == "PUT" and path != "/user" and not path.startswith(("/-/", "/user/"))


def body_cap(method: str, path: str, may_write: bool, publish_cap: int) -> int:
    """The most bytes the body of `method path` may hold (pure; see the module docstring)."""
    if method in ("GET", "HEAD", "DELETE", "OPTIONS") or path == "/user" or path.startswith(SMALL_BODY_PREFIXES):
        return SMALL_BODY
    if is_publish_shape(method, path) and may_write:
        return publish_cap
    return JSON_BODY


def bearer_token(authorization: str) -> str | None:
    scheme, _, value = authorization.strip().partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def store_token_check(get_store: Callable[[], Any]) -> TokenCheck:
    """A valid read-write bearer token (one indexed lookup of its digest; no password hashing)."""

    def may_write(authorization: str) -> bool:
        token = bearer_token(authorization)
        store = get_store()
        if token is None or store is None:
            return False
        found = store.authenticate_token(token)
        return found is not None and not found[1].readonly

    return may_write


def has_both_lengths(header_plus: bytes) -> bool:
    names = {line.split(b":", 1)[0].strip().lower() for line in header_plus.split(b"\n")[1:] if b":" in line}
    return b"content-length" in names and b"transfer-encoding" in names


class Unavailable(Error):
    """waitress's error answer for a request the guard cannot decide on: the API's JSON 503."""

    code = 503
    reason = "Service Unavailable"
    retry_after = "5"

    def to_response(self, ident: str | None = None) -> tuple[str, list[tuple[str, str]], bytes]:
        body = json.dumps({"error": str(self.body)}).encode("utf-8")
        headers = [("Content-Type", "application/json"), ("Cache-Control", "no-store"), ("Retry-After", self.retry_after)]
        return f"{self.code} {self.reason}", headers, body


class GuardedRequestParser(HTTPRequestParser):
    """waitress's parser with the two checks above (configured by `guarded_channel`)."""

    publish_cap: int = JSON_BODY
    token_check: TokenCheck = staticmethod(lambda authorization: False)  # type: ignore[assignment]
    cap: int | None = None

    def parse_header(self, header_plus: bytes) -> None:
        if has_both_lengths(header_plus):
            raise ParsingError("a request must not carry both Content-Length and Transfer-Encoding")
        super().parse_header(header_plus)

    def _cap(self) -> int:
        if self.cap is None:
            method, path = str(self.command or ""), str(self.path or "")
            authorization = str(self.headers.get("AUTHORIZATION", ""))
            writes = is_publish_shape(method, path) and bool(authorization) and type(self).token_check(authorization)
            self.cap = body_cap(method, path, writes, type(self).publish_cap)
        return self.cap

    def received(self, data: bytes) -> int:
        consumed = int(super().received(data))
        if self.error is None and self.headers_finished and not self.empty:
            try:
                cap = self._cap()
            except StoreUnavailable as exc:
                self.error, self.completed = Unavailable(exc.detail), True
                return consumed
            if self.content_length > cap or self.body_bytes_received > cap:
                self.error = RequestEntityTooLarge(f"this request's body may hold at most {cap} bytes")
                self.completed = True
        return consumed


def guarded_channel(publish_cap: int, token_check: TokenCheck) -> type[HTTPChannel]:
    """An HTTPChannel class whose parser applies the caps; set it as the server's channel_class."""
    parser = type("ConfiguredParser", (GuardedRequestParser,), {"publish_cap": publish_cap, "token_check": staticmethod(token_check)})
    return type("GuardedChannel", (HTTPChannel,), {"parser_class": parser})


def waitress_options(connection_limit: int, idle_timeout: int) -> dict[str, Any]:
    """Connection limits: idle sockets are cheap (no thread each), and are dropped after `idle_timeout`."""
    return {
        "connection_limit": connection_limit,
        "channel_timeout": idle_timeout,
        "cleanup_interval": max(1, min(idle_timeout // 2, 30)),
        "backlog": 2048,
    }
