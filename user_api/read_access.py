"""Read access at serving time: the `packages:` rules (registry_gen.access) for a request.

`registry-gen serve` checks every static read in-process (`ReadGuard.protect`), on the decoded
path its tree serves; behind nginx, the emitted config asks `READ_CHECK_PATH` with `auth_request`
(the path nginx serves in SERVED_PATH_HEADER, the URI as sent in X-Original-URI, the client's
Authorization header as it came) and caches the answer briefly.
Answers: 200 may read; 401 no valid token; 403 a token without access (nginx turns it into the
same 404 as a missing package, so names do not leak).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs

from registry_gen.access import (
    ALL,
    ANONYMOUS,
    Caller,
    decoded_path,
    has_dot_segment,
    is_plain_request_path,
    name_status,
    package_of_served_path,
)
from registry_gen.errors import StorageError
from registry_gen.nginx_access import (
    READ_CHECK_PATH,
    SERVED_PATH_HEADER,
    SIGN_DOCUMENT_HEADER,
    SIGNED_VARIABLES,
)
from registry_gen.search import search_registry
from registry_gen.settings import Settings
from registry_gen.state import open_state
from user_api import policy
from user_api.web import note_user
from user_api.models import User
from user_api.store import UserStore

if TYPE_CHECKING:  # obstore loads only with a bucket configured
    from registry_gen.objectstore import TreeSigner

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_REPLIES: Final = {
    401: ("401 Unauthorized", {"error": "log in to read this package (npm login), then send the token"}),
    404: ("404 Not Found", {"error": "not found"}),
}
log = logging.getLogger(__name__)
_SERVED_PATH_KEY: Final = "HTTP_" + SERVED_PATH_HEADER.upper().replace("-", "_")
_SIGN_DOCUMENT_KEY: Final = "HTTP_" + SIGN_DOCUMENT_HEADER.upper().replace("-", "_")


class ReadGuard:
    def __init__(self, settings: Settings, store: UserStore):
        self.rules = settings.packages
        self.store = store  # accounts, tokens and groups: one database for every API process
        self.out_dir = settings.out_dir
        self.state = open_state(settings)
        self.warned_old_config = False

    def account(self, environ: dict[str, Any]) -> User | None:
        """The active account behind the request's Bearer token; None when there is none, it is
        not valid, or it may not be used from the client's address (the client then gets 401).
        Reads take tokens only: a password here would be a guessing oracle without the write
        API's throttle."""
        scheme, _, value = str(environ.get("HTTP_AUTHORIZATION") or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return None
        found = self.store.authenticate_token(value.strip())
        if found is None:
            return None
        user, info = found
        # REMOTE_ADDR: behind nginx, waitress's trusted_proxy has put the client's address there.
        if user.status != "active" or not policy.address_allowed(environ.get("REMOTE_ADDR"), info.cidr_whitelist):
            return None
        note_user(environ, user.username)
        return user

    def status(self, name: str | None, environ: dict[str, Any]) -> int:
        """200, 401 or 404 for reading package `name` (registry_gen.access.name_status), asking
        the stores only what the rule needs."""
        rule = self.rules.rule_for(name) if name is not None else None
        if rule is None or rule.read == ALL:
            return 200  # public: no token lookup at all
        user = self.account(environ)
        if user is None:
            caller = ANONYMOUS
        else:
            needs_groups = isinstance(rule.read, frozenset) and not user.is_admin
            groups = self.store.groups_of(user.id) if needs_groups else frozenset()
            caller = Caller(user.username, groups, user.is_admin)
        return name_status(self.rules, name, caller)

    def protect(self, app: WsgiApp) -> WsgiApp:
        """`app` (the static tree) behind the rules: 401/404 JSON replies for denied reads."""

        def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            # PATH_INFO is decoded already: the very path the tree serves.
            status = self.status(package_of_served_path(str(environ.get("PATH_INFO") or "/")), environ)
            if status == 200:
                return app(environ, start_response)
            return _reply(start_response, status, environ.get("REQUEST_METHOD") == "HEAD")

        return guarded

    def search(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """`/-/v1/search` with rules in force: every package the caller may read, and only those."""
        query = parse_qs(str(environ.get("QUERY_STRING") or ""))
        try:
            size = min(max(int(query.get("size", ["20"])[0]), 1), 250)
            offset = max(int(query.get("from", ["0"])[0]), 0)
        except ValueError:
            return _json(start_response, "400 Bad Request", {"error": "size and from must be integers"})
        user = self.account(environ)
        caller = ANONYMOUS if user is None else Caller(user.username, self.store.groups_of(user.id), user.is_admin)
        text = query.get("text", [""])[0]
        found = search_registry(
            self.state, text, size=size, offset=offset, listed_only=False, readable=lambda name: self.rules.may_read(name, caller)
        )
        return _json(start_response, "200 OK", found)

    def decision(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """nginx's auth_request answer for the path it serves (403 stands for 404: see the module doc)."""
        path = _checked_path(environ)
        status = 403 if path is None else self.status(package_of_served_path(path), environ)
        line = {200: "200 OK", 401: "401 Unauthorized"}.get(status, "403 Forbidden")
        headers = [("Content-Length", "0"), ("Cache-Control", "no-store")]
        if path is None or self._from_an_old_config(environ):
            # nginx keeps an answer for the key it files the question under; that key must be the
            # package of the path decided on. A refusal decides about no package, and a config
            # written before SERVED_PATH_HEADER keys by the URI as sent (`/pub/..%2fx` as `pub`),
            # so such a config must ask for every read: nginx honours this over proxy_cache_valid.
            headers.append(("X-Accel-Expires", "0"))
        if status == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="registry"'))  # nginx passes it on
        start_response(line, headers)
        return []

    def _from_an_old_config(self, environ: dict[str, Any]) -> bool:
        """Whether the question comes from an nginx config without SERVED_PATH_HEADER (said once)."""
        if _SERVED_PATH_KEY in environ:
            return False
        if not self.warned_old_config:
            self.warned_old_config = True
            log.warning(
                "the nginx config predates %s: every read is checked uncached until it is regenerated (registry-gen host-config nginx)",
                SERVED_PATH_HEADER,
            )
        return True


def _checked_path(environ: dict[str, Any]) -> str | None:
    """The decoded path nginx serves, to decide on; None (refuse) when a question names none, or
    the URI as sent is spelled so that another path could be served (the config refuses those
    first; this holds for a config written before that, which sends X-Original-URI alone)."""
    served, sent = environ.get(_SERVED_PATH_KEY), environ.get("HTTP_X_ORIGINAL_URI")
    if served is None and sent is None:
        return None
    if sent is not None and not is_plain_request_path(str(sent)):
        return None
    path = str(served) if served is not None else decoded_path(str(sent))
    return None if not path.startswith("/") or has_dot_segment(path) else path


def _json(start_response: StartResponse, status: str, body: Any) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data))), ("Cache-Control", "no-store")])
    return [data]


def _reply(start_response: StartResponse, status: int, head: bool) -> list[bytes]:
    line, body = _REPLIES[status]
    data = json.dumps(body).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))), ("Cache-Control", "no-store")]
    if status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="registry"'))
    start_response(line, headers)
    return [] if head else [data]


def signing(decide: WsgiApp, signer: TreeSigner | None) -> WsgiApp:
    """`decide` (the read check) for an nginx that reads a private tree bucket: a read it allows
    is answered with the presigned paths of exactly the keys of the path decided on (nginx keeps
    them; the client never sees them). A question that asks for none is decided as before."""

    def decision(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        document = environ.get(_SIGN_DOCUMENT_KEY)
        if document is None:
            return decide(environ, start_response)
        if signer is None:
            log.error("nginx reads a private tree bucket (--private-bucket), but this instance has no storage: to sign for")
            start_response("500 Internal Server Error", [("Content-Length", "0"), ("Cache-Control", "no-store")])
            return []
        path = _checked_path(environ)
        try:
            signed = None if path is None else signer.signed_reads(path, str(document))
        except StorageError as exc:  # e.g. no credentials to sign with: a line in the log, no traceback
            log.error("cannot sign nginx's read of the private tree bucket: %s", exc)
            start_response("500 Internal Server Error", [("Content-Length", "0"), ("Cache-Control", "no-store")])
            return []
        if signed is None:  # no key this path could be read from: the 404 of a missing package
            start_response("403 Forbidden", [("Content-Length", "0"), ("Cache-Control", "no-store"), ("X-Accel-Expires", "0")])
            return []

        def with_urls(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            if status.startswith("200"):
                headers = [*headers, *((header, url) for (_, header), url in zip(SIGNED_VARIABLES, signed, strict=True))]
            return start_response(status, headers, *rest)

        return decide(environ, with_urls)

    return decision


def allow_all(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The read check when no rule restricts reads."""
    start_response("200 OK", [("Content-Length", "0"), ("Cache-Control", "no-store")])
    return []
