"""Read access at serving time: the `packages:` rules (registry_gen.access) for a request.

`registry-gen serve` checks every static read in-process (`ReadGuard.protect`); behind nginx,
the emitted config asks `READ_CHECK_PATH` with `auth_request` (the original URI in
X-Original-URI, the client's Authorization header as it came) and caches the answer briefly.
Answers: 200 may read; 401 no valid token; 403 a token without access (nginx turns it into the
same 404 as a missing package, so names do not leak).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Final
from urllib.parse import parse_qs

from registry_gen.access import ALL, ANONYMOUS, Caller, package_of_path, read_status
from registry_gen.nginx_access import READ_CHECK_PATH
from registry_gen.search import search_registry
from registry_gen.settings import Settings
from user_api import policy
from user_api.web import note_user
from user_api.groups import GroupStore
from user_api.models import User
from user_api.store import UserStore

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_REPLIES: Final = {
    401: ("401 Unauthorized", {"error": "log in to read this package (npm login), then send the token"}),
    404: ("404 Not Found", {"error": "not found"}),
}


class ReadGuard:
    def __init__(self, settings: Settings, store: UserStore, groups: GroupStore):
        self.rules = settings.packages
        self.store = store
        self.groups = groups
        self.out_dir = settings.out_dir
        self.state_file = settings.state_file

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

    def status(self, path: str, environ: dict[str, Any]) -> int:
        """200, 401 or 404 (registry_gen.access.read_status), asking the stores only what the rule needs."""
        name = package_of_path(path)
        rule = self.rules.rule_for(name) if name is not None else None
        if rule is None or rule.read == ALL:
            return 200  # public: no token lookup at all
        user = self.account(environ)
        if user is None:
            caller = ANONYMOUS
        else:
            needs_groups = isinstance(rule.read, frozenset) and not user.is_admin
            groups = self.groups.groups_of(user.id) if needs_groups else frozenset()
            caller = Caller(user.username, groups, user.is_admin)
        return read_status(self.rules, path, caller)

    def protect(self, app: WsgiApp) -> WsgiApp:
        """`app` (the static tree) behind the rules: 401/404 JSON replies for denied reads."""

        def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            status = self.status(str(environ.get("PATH_INFO") or "/"), environ)
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
        caller = ANONYMOUS if user is None else Caller(user.username, self.groups.groups_of(user.id), user.is_admin)
        text = query.get("text", [""])[0]
        found = search_registry(
            self.state_file, text, size=size, offset=offset, listed_only=False, readable=lambda name: self.rules.may_read(name, caller)
        )
        return _json(start_response, "200 OK", found)

    def decision(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """nginx's auth_request answer for X-Original-URI (403 stands for 404: see the module doc)."""
        status = self.status(str(environ.get("HTTP_X_ORIGINAL_URI") or "/"), environ)
        line = {200: "200 OK", 401: "401 Unauthorized"}.get(status, "403 Forbidden")
        headers = [("Content-Length", "0"), ("Cache-Control", "no-store")]
        if status == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="registry"'))  # nginx passes it on
        start_response(line, headers)
        return []


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


def allow_all(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The read check when no rule restricts reads."""
    start_response("200 OK", [("Content-Length", "0"), ("Cache-Control", "no-store")])
    return []
