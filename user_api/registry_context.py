"""What the npm-side route functions share: the services of one app, and the request helpers.

`create_registry_app` puts one `RegistryContext` in the app's config; a route function reaches it
with `context()` (Bottle's `request.app`), so routes are plain module-level functions that any
test can call inside a Bottle request, and the app is still built fresh by a factory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import bottle
import jinja2

from registry_gen.audit import Who
from registry_gen.publish import Actor, maintainer_entry
from registry_gen.settings import Settings
from registry_gen.writes import WriteService
from user_api import web
from user_api.errors import InvalidCredentials
from user_api.models import User
from user_api.policy import Caller
from user_api.ratelimit import LoginGuard
from user_api.store import UserStore
from user_api.store_shared import SharedLoginGuard, SharedWebLogins
from user_api.weblogin import WebLoginPool
from user_api.web import BEARER_REALM, JSON_BODY_LIMIT, HttpError, WebLimits, json_response

CONTEXT_KEY: Final = "registry.context"


RegistryLimits = WebLimits  # the npm side's name for the one limits object


def publish_body_limit(settings: Settings) -> int:
    """A publish body is base64 (4/3 of the tarball) plus the manifest: the archive cap decides."""
    return settings.limits.max_archive_bytes * 4 // 3 + 4 + JSON_BODY_LIMIT


@dataclass
class RegistryContext:
    """The services behind one registry app."""

    settings: Settings
    store: UserStore
    writes: WriteService
    limits: RegistryLimits
    web_logins: WebLoginPool | SharedWebLogins  # in this process, or shared on PostgreSQL (web.web_login_sessions)
    pages: jinja2.Environment
    logins: LoginGuard | SharedLoginGuard  # shared with the /user app (web.login_guard)

    @property
    def publish_limit(self) -> int:
        return publish_body_limit(self.settings)


def context() -> RegistryContext:
    found = bottle.request.app.config[CONTEXT_KEY]
    assert isinstance(found, RegistryContext)
    return found


def environ() -> dict[str, Any]:
    return bottle.request.environ


def json_body(limit: int = JSON_BODY_LIMIT) -> Any:
    return web.json_body(environ(), limit)


def json_object(limit: int = JSON_BODY_LIMIT) -> dict[str, Any]:
    return web.json_object(environ(), limit)


def ok(status: int = 200, **extra: Any) -> bottle.HTTPResponse:
    return json_response(status, {"ok": True, **extra})


def throttle(username: str | None) -> None:
    """Counts a login attempt (before the password is checked); 429 past the address's or the
    account's rate (user_api.ratelimit.LoginGuard)."""
    allowed, retry_after = context().logins.admit(username, web.client_address(environ()))
    if not allowed:
        raise HttpError(429, f"too many login attempts; retry in {retry_after} s", {"Retry-After": str(retry_after)})


def logged_in(username: str) -> None:
    """A login succeeded from this address: its later attempts get the account's own bucket."""
    context().logins.succeeded(username, web.client_address(environ()))


def _password_caller(username: str, password: str) -> Caller:
    throttle(username)
    verified = context().store.verify_password(username, password)
    if verified is None:
        raise InvalidCredentials("incorrect username or password")
    logged_in(verified.username)
    return Caller(verified, None)


def caller() -> Caller | None:
    """Bearer token (npm's `_authToken`) or Basic (`_auth`, legacy clients); None when absent."""
    return web.authenticate(environ(), context().store, basic=_password_caller)


def required_caller() -> Caller:
    found = caller()
    if found is None:
        raise HttpError(401, f"log in first: npm login --registry {context().settings.base_url}", BEARER_REALM)
    return found


def writer_actor() -> Actor:
    found = required_caller()
    if found.token is not None and found.token.readonly:
        raise HttpError(403, "this token is read-only; create a read-write token with npm token create")
    # The account id, not the name, is what a maintainer entry binds (registry_gen.publish.grants).
    return Actor(found.user.username, found.user.email, found.user.is_admin, account_id=found.user.id, origin=request_origin(found))


def request_origin(found: Caller) -> Who:
    """The audit log's record of where a write came from: the token's key (never the token), the
    client address (as user_api.web.client_address trusts it) and the user agent."""
    env = environ()
    return Who.http(found.token.key if found.token else None, web.client_address(env), env.get("HTTP_USER_AGENT"))


def lookup_person(username: str) -> dict[str, str] | None:
    """The maintainer entry `npm owner add` records: bound to the account's immutable id."""
    user = context().store.get_by_username(username)
    if user is None or user.status != "active":
        return None
    return maintainer_entry(user.username, user.email, user.id)


def issue_token(user: User, description: str) -> str:
    token, _ = context().store.create_token(user.id, description=description)
    return token
