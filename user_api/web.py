"""The web layer both apps share: who is calling, what the body says, and which status an error gets.

* `Caller` and `authenticate()`: a bearer token (both apps) or, for the npm side's legacy clients,
  Basic credentials; a token restricted to networks works only from inside them.
* `read_body()`: at most `limit` bytes, refused before reading when Content-Length says more.
* `error_status()`: the one table from errors (the domain's and the user service's) to an HTTP
  status, a message and headers. The `/user` app renders the same status as an RFC 9457 problem
  (`user_api.problems`), the npm side as `{"error": message}`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
import dataclasses
from dataclasses import dataclass
from typing import Any, Final

import bottle

from registry_gen.errors import (
    Forbidden,
    InvalidArchive,
    InvalidManifest,
    InvalidName,
    InvalidVersion,
    LockTimeout,
    NotFound,
    RevisionConflict,
    StateUnavailable,
    StorageUnavailable,
    VersionConflict,
)
from registry_gen.hooks.rules import HookRefused, HooksNotConfigured
from registry_gen.publish import ArchiveTooLarge, BadRequest
from registry_gen.settings import AuthLimits, Settings
from registry_gen.writes import BrokenMeta, BuildRefused
from user_api import store_audit
from user_api import errors as e
from user_api.policy import Caller, address_allowed
from user_api.problems import headers_for, problem_type_for
from user_api.ratelimit import LoginGuard, shared_login_guard
from user_api.store import UserStore
from user_api.store_shared import SharedLoginGuard, SharedWebLogins, shared_dialect
from user_api.weblogin import WebLoginPool

JSON_BODY_LIMIT: Final = 1024 * 1024  # everything but a publish: documents, logins, tags
NO_STORE: Final = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
BASIC_REALM: Final = {"WWW-Authenticate": 'Basic realm="registry"'}
BEARER_REALM: Final = {"WWW-Authenticate": 'Bearer realm="registry"'}
LOGOUT_PREFIX: Final = "/-/user/token/"  # npm logout puts the token itself in the path

__all__ = ["Caller", "HttpError", "authenticate", "error_status", "read_body"]


@dataclass(frozen=True)
class WebLimits:
    """The one limits object of the HTTP edge (docs/user-api.md §8.9); tests pass looser rates.
    Login and sign-up attempts, not failures, are counted. The rates and web-login bounds default to
    registry.yaml's `auth_limits:` defaults; `web_limits(settings)` takes the configured ones."""

    max_body_bytes: int = 64 * 1024  # the /user app's bodies
    signup_per_minute: float = AuthLimits.signup_per_minute  # anonymous sign-ups on POST /user, per address
    signup_burst: int = AuthLimits.signup_burst
    # Every login path (POST /-/user-api/tokens, npm login, Basic auth, web login, npm token
    # create, PUT /user's currentPassword) shares one user_api.ratelimit.LoginGuard per store:
    login_per_account_per_minute: float = AuthLimits.login_per_account_per_minute
    login_per_account_burst: int = AuthLimits.login_per_account_burst
    login_per_address_per_minute: float = AuthLimits.login_per_address_per_minute
    login_per_address_burst: int = AuthLimits.login_per_address_burst
    web_login_seconds: int = AuthLimits.web_login_seconds  # npm web login sessions
    web_login_sessions: int = AuthLimits.web_login_sessions
    web_login_per_address: int = AuthLimits.web_login_per_address
    done_retry_after: int = 1


def web_limits(settings: Settings) -> WebLimits:
    """The edge's limits with registry.yaml's `auth_limits:` applied."""
    return WebLimits(**dataclasses.asdict(settings.auth_limits))


def login_guard(store: object, limits: WebLimits) -> LoginGuard | SharedLoginGuard:
    """The store's one LoginGuard (shared by the /user app and the npm side), at these rates; on
    PostgreSQL its buckets are tables every instance shares (user_api.store_shared)."""
    per_address = (limits.login_per_address_per_minute, limits.login_per_address_burst)
    per_account = (limits.login_per_account_per_minute, limits.login_per_account_burst)
    dialect = shared_dialect(store)
    if dialect is not None:
        return SharedLoginGuard(dialect, per_address, per_account)
    return shared_login_guard(store, per_address=per_address, per_account=per_account)


def web_login_sessions(store: object, limits: WebLimits) -> WebLoginPool | SharedWebLogins:
    """npm's web-login sessions: in this process, or on PostgreSQL a table every instance shares."""
    sizes = {"capacity": limits.web_login_sessions, "per_address": limits.web_login_per_address,
             "lifetime_seconds": limits.web_login_seconds}  # fmt: skip
    dialect = shared_dialect(store)
    return WebLoginPool(**sizes) if dialect is None else SharedWebLogins(dialect, **sizes)


class HttpError(Exception):
    """An error reply decided by the web layer itself (auth, rate limits, routing)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


class AddressNotAllowed(e.InvalidToken):
    """A token restricted to networks (npm's cidr_whitelist), used from outside them."""


# ---------------------------------------------------------------- errors -> statuses

# Domain errors, most specific first (isinstance order matters: ArchiveTooLarge is a RegistryError).
_DOMAIN_STATUS: Final[tuple[tuple[type[BaseException], int], ...]] = (
    (ArchiveTooLarge, 413),
    (InvalidManifest, 400),
    (BadRequest, 400),
    (InvalidName, 400),
    (InvalidVersion, 400),
    (InvalidArchive, 400),
    (HookRefused, 400),
    (Forbidden, 403),
    (VersionConflict, 403),
    (NotFound, 404),
    (BuildRefused, 409),
    (RevisionConflict, 409),
    (BrokenMeta, 500),
    (LockTimeout, 503),
    (StorageUnavailable, 503),
    (HooksNotConfigured, 503),
    (StateUnavailable, 503),
)


def _message(error: BaseException) -> str:
    if isinstance(error, InvalidManifest):
        return "invalid package.json: " + "; ".join(str(p) for p in error.problems)
    if isinstance(error, e.InvalidFields):
        details = "; ".join(f"{(x.pointer or x.parameter or '').lstrip('#/')}: {x.detail}" for x in error.errors)
        return f"{error.detail} {details}".strip()
    if isinstance(error, e.UserApiError):
        return error.detail or problem_type_for(error).title
    return str(error)


def error_status(error: BaseException) -> tuple[int, str, dict[str, str]]:
    """The one table from errors to HTTP (status, message, headers)."""
    if isinstance(error, HttpError):
        return error.status, error.message, error.headers
    if isinstance(error, InvalidArchive) and error.rule == "max-archive-size":
        return 413, str(error), {}
    if isinstance(error, e.UserApiError):
        return problem_type_for(error).status, _message(error), _user_error_headers(error)
    for kind, status in _DOMAIN_STATUS:
        if isinstance(error, kind):
            headers = {"Retry-After": "5"} if status == 503 else {}
            return status, (_message(error) or "the registry is busy; retry shortly"), headers
    return 500, "internal error; the registry log has the details", {}


def is_expected_outage(error: BaseException) -> bool:
    """A 5xx the registry answers on purpose (busy, a store or the state unreachable): logged by
    whoever noticed it, not as a failure of the request's code."""
    return isinstance(error, (LockTimeout, StateUnavailable, e.StoreUnavailable, StorageUnavailable, HttpError))


def _user_error_headers(error: e.UserApiError) -> dict[str, str]:
    if isinstance(error, AddressNotAllowed):
        return {"WWW-Authenticate": "ipaddress"}  # npm explains this one to its user
    if isinstance(error, e.InvalidCredentials):
        return dict(BASIC_REALM)  # the npm side's password logins are Basic
    return headers_for(error)


# ---------------------------------------------------------------- requests


def client_address(environ: Mapping[str, Any]) -> str:
    # REMOTE_ADDR only: X-Forwarded-For is client-controlled unless waitress's trusted_proxy rewrote it.
    return str(environ.get("REMOTE_ADDR") or "unknown")


ACCESS_USER_KEY: Final = "registry_gen.user"  # the environ key the access log reads the user from


def note_user(environ: dict[str, Any], username: str) -> None:
    """Tells the access log (user_api.access_log) who this request authenticated as."""
    environ[ACCESS_USER_KEY] = username


def wsgi_path(environ: dict[str, Any]) -> str:
    """PATH_INFO arrives as latin-1-decoded bytes (PEP 3333); names are UTF-8."""
    raw = str(environ.get("PATH_INFO") or "/")
    try:
        return raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return raw


def loggable_path(path: object) -> str:
    """The request path for the log, with the token of an npm logout blanked out."""
    text = str(path or "")
    return LOGOUT_PREFIX + "<token>" if text.startswith(LOGOUT_PREFIX) else text


def read_body(environ: Mapping[str, Any], limit: int) -> bytes:
    """At most `limit` bytes, refused before reading when Content-Length already says more."""
    header = str(environ.get("CONTENT_LENGTH") or "").strip()
    stream = environ["wsgi.input"]
    if header:
        if not header.isdigit():
            raise e.BadRequest("Content-Length is not a number.")
        length = int(header)
        if length > limit:
            raise e.PayloadTooLarge(f"Bodies are limited to {limit} bytes.")
        data = stream.read(length) if length else b""
    elif environ.get("wsgi.input_terminated"):
        data = stream.read(limit + 1)
        if len(data) > limit:
            raise e.PayloadTooLarge(f"Bodies are limited to {limit} bytes.")
    else:
        data = b""
    return bytes(data)


def json_body(environ: Mapping[str, Any], limit: int = JSON_BODY_LIMIT) -> Any:
    raw = read_body(environ, limit)
    try:
        return json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"the body is not valid JSON ({exc})") from exc


def json_object(environ: Mapping[str, Any], limit: int = JSON_BODY_LIMIT) -> dict[str, Any]:
    body = json_body(environ, limit)
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def json_response(status: int, data: Any, headers: Mapping[str, str] | None = None) -> bottle.HTTPResponse:
    response = bottle.HTTPResponse(body=json.dumps(data, ensure_ascii=False).encode("utf-8"), status=status)
    response.set_header("Content-Type", "application/json")
    for name, value in {**NO_STORE, **(headers or {})}.items():
        response.set_header(name, value)
    return response


def etag_matches(header: str, etag: str, *, weak: bool) -> bool:
    """If-None-Match compares weakly (RFC 9110 §13.1.2); If-Match strongly: W/ tags never match (§13.1.1)."""
    if header.strip() == "*":
        return True
    candidates = [candidate.strip() for candidate in header.split(",")]
    if weak:
        bare = etag.removeprefix("W/")
        return any(candidate.removeprefix("W/") == bare for candidate in candidates)
    return etag in candidates


# ---------------------------------------------------------------- who is calling


def basic_credentials(environ: Mapping[str, Any]) -> tuple[str, str] | None:
    """(username, password) of an `Authorization: Basic` header; None for any other scheme."""
    header = str(environ.get("HTTP_AUTHORIZATION") or "")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise HttpError(401, "the Basic credentials are malformed", BASIC_REALM) from None
    username, colon, password = decoded.partition(":")
    if not colon:
        raise HttpError(401, "the Basic credentials are malformed", BASIC_REALM)
    return username, password


def authenticate(
    environ: Mapping[str, Any],
    store: UserStore,
    *,
    basic: Callable[[str, str], Caller] | None = None,
) -> Caller | None:
    """The caller of a request: a bearer token's owner, or (when `basic` is given: npm's legacy
    `_auth`) what `basic` makes of a username and password. None without an Authorization header."""
    header = str(environ.get("HTTP_AUTHORIZATION") or "").strip()
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        found = store.authenticate_token(value.strip())
        if found is None:
            raise e.InvalidToken("your token is not valid (revoked, or from another registry); run npm login")
        user, info = found
        if not address_allowed(client_address(environ), info.cidr_whitelist):
            raise AddressNotAllowed("this token may not be used from your address")
        return _noted(environ, Caller(user, info))
    credentials = basic_credentials(environ) if basic is not None else None
    if credentials is None:
        raise e.AuthenticationRequired("use Authorization: Bearer <token>" + (" or Basic" if basic else ""))
    assert basic is not None
    return _noted(environ, basic(*credentials))


def _noted(environ: Mapping[str, Any], caller: Caller) -> Caller:
    """The access log names the authenticated user (user_api.access_log)."""
    if isinstance(environ, dict):
        note_user(environ, caller.user.username)
        environ[store_audit.CALLER_KEY] = caller  # who made an account change (user_api.store_audit)
    return caller
