"""The npm registry's dynamic side: every write, the accounts, tokens, web login, search, audit.

`create_registry_app(settings, store)` builds a Bottle app. Paths are matched by one table of
regular expressions (package names may hold a slash, and Bottle's route syntax would read the
colon of `org.couchdb.user:<name>` as a wildcard). Handlers decode the request, call the pure rules
in `registry_gen.publish`, and the `RegistryWriter` orchestrator does the I/O: under the one build
lock (shared with `registry-gen build` and watch mode) it reads the package's state, applies the
rule, stores archive and registry-meta.json durably in content/, rebuilds the tree incrementally,
and only then is the reply sent. Every reply is a JSON object; errors are `{"error": "..."}`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import bottle
import jinja2
from filelock import Timeout

from registry_gen import publish
from registry_gen.build import PACKUMENT_FILE, BuildResult, _build_locked, build_lock
from registry_gen.buildstate import BuildState
from registry_gen.hosting import SEARCH_DOCUMENT
from registry_gen.errors import (
    Forbidden,
    InvalidArchive,
    InvalidManifest,
    InvalidName,
    InvalidVersion,
    LockTimeout,
    NotFound,
    RegistryError,
    VersionConflict,
)
from registry_gen.meta import PackageMeta, dump_meta, parse_meta
from registry_gen.names import package_dir, tarball_filename, validate_name
from registry_gen.publish import Actor, ArchiveTooLarge, BadRequest, PackageState, Upload
from registry_gen.settings import Settings
from registry_gen.storage import ContentStorage, FolderStorage, archive_key, meta_key
from user_api import policy
from user_api.app import read_body
from user_api.errors import (
    BadRequest as UserBadRequest,
)
from user_api.errors import (
    InvalidFields,
    PayloadTooLarge,
    StoreUnavailable,
    UserApiError,
    UsernameTaken,
)
from user_api.models import TokenInfo, User
from user_api.ratelimit import RateLimiter
from user_api.store import UserStore

log = logging.getLogger(__name__)

JSON_BODY_LIMIT: Final = 1024 * 1024  # everything but a publish: documents, logins, tags
LOCK_TIMEOUT_SECONDS: Final = 60
TEMPLATES: Final = Path(__file__).resolve().parent / "templates"
NAME: Final = r"(?P<name>@[^/]+/[^/]+|[^/@][^/]*)"
SEGMENT: Final = r"[^/]+"
SERVER_PATHS: Final = frozenset({"user"})  # /user is the user API's resource; a package there would be shadowed
NO_STORE: Final = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
LOGOUT_PREFIX: Final = "/-/user/token/"  # npm logout puts the token itself in the path


def loggable_path(path: object) -> str:
    """The request path for the log, with the token of an npm logout blanked out."""
    text = str(path or "")
    return LOGOUT_PREFIX + "<token>" if text.startswith(LOGOUT_PREFIX) else text


def publish_body_limit(settings: Settings) -> int:
    """A publish body is base64 (4/3 of the tarball) plus the manifest: the archive cap decides."""
    return settings.limits.max_archive_bytes * 4 // 3 + 4 + JSON_BODY_LIMIT


@dataclass(frozen=True)
class RegistryLimits:
    """Rates of the login edge; tests may loosen them. Attempts, not failures, are counted."""

    login_per_account_per_minute: float = 10
    login_per_account_burst: int = 10
    login_per_address_per_minute: float = 30
    login_per_address_burst: int = 30
    web_login_seconds: int = 600
    web_login_sessions: int = 1000
    done_retry_after: int = 1


@dataclass(frozen=True)
class Caller:
    """Who sent a request: a token's owner, or (Basic auth, legacy clients) a password's."""

    user: User
    token: TokenInfo | None


class HttpError(Exception):
    """An error reply decided by the web layer itself (auth, rate limits, routing)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


class BuildRefused(RegistryError):
    """The rebuild would not take the change (e.g. the same version in content/ with other bytes)."""


class BrokenMeta(RegistryError):
    """A registry-meta.json in content/ that does not parse: a person must fix it."""


def json_response(status: int, data: Any, headers: Mapping[str, str] | None = None) -> bottle.HTTPResponse:
    response = bottle.HTTPResponse(body=json.dumps(data, ensure_ascii=False).encode("utf-8"), status=status)
    response.set_header("Content-Type", "application/json")
    for name, value in {**NO_STORE, **(headers or {})}.items():
        response.set_header(name, value)
    return response


def error_status(error: BaseException) -> tuple[int, str, dict[str, str]]:
    """The one table from domain errors to HTTP (status, message, headers)."""
    if isinstance(error, HttpError):
        return error.status, error.message, error.headers
    if isinstance(error, ArchiveTooLarge) or (isinstance(error, InvalidArchive) and error.rule == "max-archive-size"):
        return 413, str(error), {}
    if isinstance(error, InvalidManifest):
        return 400, "invalid package.json: " + "; ".join(str(p) for p in error.problems), {}
    if isinstance(error, (BadRequest, InvalidName, InvalidVersion, InvalidArchive)):
        return 400, str(error), {}
    if isinstance(error, InvalidFields):
        details = "; ".join(f"{(e.pointer or e.parameter or '').lstrip('#/')}: {e.detail}" for e in error.errors)
        return 400, f"{error.detail} {details}".strip(), {}
    if isinstance(error, UserBadRequest):
        return 400, error.detail, {}
    if isinstance(error, PayloadTooLarge):
        return 413, error.detail, {}
    if isinstance(error, (Forbidden, VersionConflict)):
        return 403, str(error), {}
    if isinstance(error, NotFound):
        return 404, str(error), {}
    if isinstance(error, UsernameTaken):
        return 409, error.detail, {}
    if isinstance(error, BuildRefused):
        return 409, str(error), {}
    if isinstance(error, BrokenMeta):
        return 500, str(error), {}
    if isinstance(error, (LockTimeout, StoreUnavailable)):
        return 503, str(error) or "the registry is busy; retry shortly", {"Retry-After": "5"}
    if isinstance(error, UserApiError):
        return 400, error.detail, {}
    return 500, "internal error; the registry log has the details", {}


def json_error_page(error: bottle.HTTPError) -> str:
    """What Bottle renders for errors raised outside a handler: JSON too, never its HTML page."""
    bottle.response.set_header("Content-Type", "application/json")
    return json.dumps({"error": str(error.body or error.status_line)})


# ---------------------------------------------------------------- the write orchestrator


@dataclass
class Change:
    """What a rule decided: the new meta (None: keep; `delete_meta`: remove), an archive to add,
    and versions whose archives go."""

    meta: PackageMeta | None = None
    delete_meta: bool = False
    upload: Upload | None = None
    removed: set[str] = field(default_factory=set)

    @property
    def is_empty(self) -> bool:
        return self.meta is None and not self.delete_meta and self.upload is None and not self.removed


class RegistryWriter:
    """Serialises writes (a thread lock, then the cross-process build lock), applies them to
    content/, and rebuilds the tree before returning."""

    def __init__(self, settings: Settings, storage: ContentStorage | None = None):
        self.settings = settings
        self.storage = storage or FolderStorage(settings.content_dir)
        self._thread_lock = threading.Lock()
        self._file_lock = build_lock(settings)

    @contextmanager
    def locked(self) -> Iterator[None]:
        deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
        # Threads queue on a thread lock (no polling); only one of them then waits for the file lock.
        if not self._thread_lock.acquire(timeout=LOCK_TIMEOUT_SECONDS):
            raise LockTimeout("the registry is busy with other writes; retry shortly")
        try:
            try:
                self._file_lock.acquire(timeout=max(0.1, deadline - time.monotonic()))
            except Timeout as exc:
                raise LockTimeout(f"another build holds {self.settings.lock_file}; retry shortly") from exc
            try:
                yield
            finally:
                self._file_lock.release()
        finally:
            self._thread_lock.release()

    def _published(self, name: str) -> frozenset[str]:
        path = self.settings.out_dir / package_dir(name) / PACKUMENT_FILE
        try:
            document = json.loads(path.read_bytes())
        except FileNotFoundError:
            return frozenset()
        except ValueError as exc:
            raise RegistryError(f"{path} is not valid JSON; rebuild the tree") from exc
        versions = document.get("versions") if isinstance(document, dict) else None
        return frozenset(versions) if isinstance(versions, dict) else frozenset()

    @contextmanager
    def _build_state(self) -> Iterator[BuildState]:
        """The build's memory of content/ (read only; call with the lock held)."""
        state = BuildState(self.settings.state_file)
        try:
            yield state
        finally:
            state.close()

    def _meta_location(self, name: str) -> str:
        """The API's own place, unless the build found this package's meta file elsewhere."""
        canonical = meta_key(name)
        if self.storage.exists(canonical):
            return canonical
        with self._build_state() as state:
            for path, error in state.metas_of(name):
                if error is None and self.storage.exists(path):
                    return path
        return canonical

    def read_state(self, name: str) -> tuple[PackageState, str, bytes | None]:
        """Call with the lock held: the package as the registry holds it, where its meta lives,
        and the meta's current bytes (for a rollback)."""
        validate_name(name, legacy=True)
        if name in SERVER_PATHS:
            raise BadRequest(f"the name {name!r} is taken by this registry's own endpoints (/{name}); choose another")
        key = self._meta_location(name)
        raw = self.storage.read(key)
        meta = PackageMeta(name=name)
        if raw is not None:
            try:
                meta = parse_meta(raw)
            except InvalidManifest as exc:
                raise BrokenMeta(f"content/{key} is broken ({exc}); fix it by hand, then retry") from exc
        return PackageState(name, meta, self._published(name)), key, raw

    def _archive_keys(self, name: str, version: str) -> list[str]:
        """Every archive in content/ that holds name@version (the API's, and any dropped by hand)."""
        keys = [archive_key(name, version)]
        with self._build_state() as state:
            keys += [r.path for r in state.archives_of(name) if r.version == version and r.path not in keys]
        return [k for k in keys if self.storage.exists(k)]

    def apply(self, name: str, rule: Callable[[PackageState], Change]) -> BuildResult | None:
        """Runs `rule` on the current state and commits its change, all under the lock."""
        with self.locked():
            state, key, previous_meta = self.read_state(name)
            change = rule(state)
            if change.is_empty:
                return None
            return self._commit(name, key, previous_meta, change)

    def _commit(self, name: str, key: str, previous_meta: bytes | None, change: Change) -> BuildResult:
        added = None
        touched = [key]  # the build looks only at these files (it trusts its state for the rest)
        try:
            # The meta (owners, times, unpublish records) is written first: a kill before the
            # archive lands leaves a number without an archive, which stays publishable; the other
            # order could leave an archive that nobody owns.
            if change.delete_meta:
                self.storage.remove(key)
            elif change.meta is not None:
                self.storage.replace(key, dump_meta(change.meta))
            if change.upload is not None:
                target = archive_key(name, change.upload.version)
                try:
                    self.storage.create(target, change.upload.data)
                except VersionConflict as exc:
                    raise VersionConflict(
                        f"content/ already holds an archive for {name}@{change.upload.version} (not yet built?); "
                        "a version number can be published only once"
                    ) from exc
                added = target
                touched.append(added)
            for version in sorted(change.removed):
                for archive in self._archive_keys(name, version):
                    self.storage.remove(archive)
                    touched.append(archive)
            result = _build_locked(self.settings, None, touched)
        except BaseException:
            self._roll_back(added, key, previous_meta, change)
            raise
        refused = [i for i in result.errors if i.path in (added, key, name)]
        if refused and added is not None:
            self._roll_back(added, key, previous_meta, change)
            _build_locked(self.settings, None, touched)
            raise BuildRefused("the registry could not take this archive: " + "; ".join(i.reason for i in refused))
        return result

    def _roll_back(self, added: str | None, key: str, previous_meta: bytes | None, change: Change) -> None:
        if added is not None:
            self.storage.remove(added)
        if change.meta is not None or change.delete_meta:
            if previous_meta is None:
                self.storage.remove(key)
            else:
                self.storage.replace(key, previous_meta)


# ---------------------------------------------------------------- web login sessions


@dataclass
class WebLogin:
    login_id: str
    done_id: str
    create: bool
    expires: float
    token: str | None = None


class WebLogins:
    """npm's web login (POST /-/v1/login): in memory, expiring. The browser's URL and the CLI's
    polling URL carry different secrets, so seeing the login page's address cannot fetch the token."""

    def __init__(self, limits: RegistryLimits, clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.clock = clock
        self._by_login: dict[str, WebLogin] = {}
        self._by_done: dict[str, WebLogin] = {}
        self._lock = threading.Lock()

    def _expire(self) -> None:
        now = self.clock()
        for session in [s for s in self._by_login.values() if s.expires <= now]:
            self._drop(session)

    def _drop(self, session: WebLogin) -> None:
        self._by_login.pop(session.login_id, None)
        self._by_done.pop(session.done_id, None)

    def start(self, create: bool) -> WebLogin:
        with self._lock:
            self._expire()
            if len(self._by_login) >= self.limits.web_login_sessions:
                raise HttpError(503, "too many logins in progress; retry in a minute", {"Retry-After": "60"})
            session = WebLogin(
                secrets.token_urlsafe(24), secrets.token_urlsafe(24), create, self.clock() + self.limits.web_login_seconds
            )
            self._by_login[session.login_id] = session
            self._by_done[session.done_id] = session
            return session

    def by_login(self, login_id: str) -> WebLogin | None:
        with self._lock:
            self._expire()
            session = self._by_login.get(login_id)
            return session if session is not None and session.token is None else None

    def complete(self, login_id: str, token: str) -> bool:
        with self._lock:
            session = self._by_login.get(login_id)
            if session is None or session.token is not None:
                return False
            session.token = token
            return True

    def poll(self, done_id: str) -> tuple[bool, str | None]:
        """(known, token): a token is handed out once, then the session is gone."""
        with self._lock:
            self._expire()
            session = self._by_done.get(done_id)
            if session is None:
                return False, None
            if session.token is not None:
                self._drop(session)
            return True, session.token


# ---------------------------------------------------------------- search


def _matches(package: Mapping[str, Any], term: str) -> bool:
    qualifier, colon, value = term.partition(":")
    people = [m.get("username", "") for m in package.get("maintainers", []) if isinstance(m, dict)]
    keywords = [k.lower() for k in package.get("keywords", []) if isinstance(k, str)]
    if colon and qualifier in ("keywords", "keyword"):
        return any(k in keywords for k in value.split(",") if k)
    if colon and qualifier in ("author", "maintainer"):
        return value in [p.lower() for p in people]
    if colon and qualifier == "scope":
        return str(package.get("name", "")).startswith(value if value.startswith("@") else "@" + value)
    haystack = " ".join([str(package.get("name", "")), str(package.get("description") or ""), *keywords, *people]).lower()
    return term in haystack


def search_objects(document: Mapping[str, Any], text: str, *, size: int, offset: int) -> dict[str, Any]:
    """Filters the built search document (`-/search.json`) by npm's search text.
    Every term must match; exact names first, then names containing the text, then the rest."""
    terms = [t for t in text.lower().split() if t]
    objects = [o for o in document.get("objects", []) if all(_matches(o.get("package", {}), t) for t in terms)]
    plain = " ".join(t for t in terms if ":" not in t)

    def rank(entry: Mapping[str, Any]) -> tuple[int, str]:
        name = str(entry.get("package", {}).get("name", ""))
        return (0 if name == plain else 1 if plain and plain in name else 2, name)

    objects.sort(key=rank)
    return {"objects": objects[offset : offset + size], "total": len(objects), "time": publish.now_iso()}


# ---------------------------------------------------------------- the app


def _route_table(handlers: Mapping[str, Callable[..., Any]]) -> list[tuple[str, re.Pattern[str], Callable[..., Any]]]:
    h = handlers
    table = [
        ("GET", r"/-/ping", h["ping"]),
        ("GET", r"/-/whoami", h["whoami"]),
        ("GET", r"/-/v1/search", h["search"]),
        ("POST", r"/-/v1/login", h["web_login_start"]),
        ("GET", rf"/-/v1/login/(?P<login_id>{SEGMENT})", h["web_login_form"]),
        ("POST", rf"/-/v1/login/(?P<login_id>{SEGMENT})", h["web_login_submit"]),
        ("GET", rf"/-/v1/done/(?P<done_id>{SEGMENT})", h["web_login_done"]),
        ("GET", rf"/-/user/org\.couchdb\.user:(?P<username>{SEGMENT})", h["user_document"]),
        ("PUT", rf"/-/user/org\.couchdb\.user:(?P<username>{SEGMENT})(?:/-rev/(?P<rev>{SEGMENT}))?", h["couch_login"]),
        ("DELETE", r"/-/user/token/(?P<token>.+)", h["logout"]),
        ("GET", r"/-/npm/v1/tokens", h["list_tokens"]),
        ("POST", r"/-/npm/v1/tokens", h["create_token"]),
        ("DELETE", rf"/-/npm/v1/tokens/token/(?P<key>{SEGMENT})", h["revoke_token"]),
        ("POST", r"/-/npm/v1/security/advisories/bulk", h["audit_bulk"]),
        ("POST", r"/-/npm/v1/security/audits/quick", h["audit_quick"]),
        ("PUT", rf"/-/package/{NAME}/dist-tags/(?P<tag>{SEGMENT})", h["dist_tag_set"]),
        ("DELETE", rf"/-/package/{NAME}/dist-tags/(?P<tag>{SEGMENT})", h["dist_tag_remove"]),
        ("PUT", rf"/{NAME}", h["package_put"]),
        ("PUT", rf"/{NAME}/-rev/(?P<rev>{SEGMENT})", h["package_rev_put"]),
        ("DELETE", rf"/{NAME}/-rev/(?P<rev>{SEGMENT})", h["package_delete"]),
        ("PUT", rf"/{NAME}/-/(?P<filename>.+\.tgz)/-rev/(?P<rev>{SEGMENT})", h["tarball_put"]),
        ("DELETE", rf"/{NAME}/-/(?P<filename>.+\.tgz)/-rev/(?P<rev>{SEGMENT})", h["tarball_delete"]),
        ("PUT", rf"/{NAME}/(?P<version>{SEGMENT})/-tag/(?P<tag>{SEGMENT})", h["stage_version"]),
        ("PUT", rf"/{NAME}/(?P<tag>[^/\-][^/]*)", h["old_tag"]),
    ]
    return [(method, re.compile(pattern + r"/?\Z"), handler) for method, pattern, handler in table]


def _route(table: list[tuple[str, re.Pattern[str], Callable[..., Any]]], method: str, path: str) -> tuple[Callable[..., Any], dict[str, str]]:
    allowed = []
    reserved = path.startswith("/-/")  # the registry's own namespace never falls through to package routes
    for route_method, pattern, handler in table:
        if reserved and not pattern.pattern.startswith("/-/"):
            continue
        found = pattern.match(path)
        if found is None:
            continue
        if route_method == method or (method == "HEAD" and route_method == "GET"):
            return handler, {k: v for k, v in found.groupdict().items() if v is not None}
        allowed.append(route_method)
    if allowed and method not in ("GET", "HEAD"):
        raise HttpError(405, f"{method} is not supported here (use {', '.join(sorted(set(allowed)))})", {"Allow": ", ".join(sorted(set(allowed)))})
    raise HttpError(404, "not found")


def create_registry_app(
    settings: Settings,
    store: UserStore,
    *,
    storage: ContentStorage | None = None,
    limits: RegistryLimits | None = None,
) -> bottle.Bottle:
    """The registry's dynamic endpoints as a fresh Bottle app (see the module docstring)."""
    limits = limits or RegistryLimits()
    writer = RegistryWriter(settings, storage)
    per_account = RateLimiter(limits.login_per_account_per_minute, limits.login_per_account_burst)
    per_address = RateLimiter(limits.login_per_address_per_minute, limits.login_per_address_burst)
    web_logins = WebLogins(limits)
    pages = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True)
    publish_limit = publish_body_limit(settings)
    search_cache: dict[str, Any] = {}
    request = bottle.request

    # ---- request helpers

    def client_address() -> str:
        # REMOTE_ADDR only: X-Forwarded-For is client-controlled unless waitress's trusted_proxy rewrote it.
        return str(request.environ.get("REMOTE_ADDR") or "unknown")

    def body_bytes(limit: int) -> bytes:
        return read_body(request.environ, limit)

    def json_body(limit: int = JSON_BODY_LIMIT) -> Any:
        raw = body_bytes(limit)
        try:
            return json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError) as exc:
            raise BadRequest(f"the body is not valid JSON ({exc})") from exc

    def json_object(limit: int = JSON_BODY_LIMIT) -> dict[str, Any]:
        body = json_body(limit)
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    def throttle(username: str | None) -> None:
        keys = [(per_address, "addr:" + client_address())]
        if username:
            keys.append((per_account, "user:" + username.lower()))
        for limiter, key in keys:
            allowed, retry_after = limiter.allow(key)
            if not allowed:
                raise HttpError(429, f"too many login attempts; retry in {retry_after} s", {"Retry-After": str(retry_after)})

    def basic_credentials() -> tuple[str, str] | None:
        header = str(request.environ.get("HTTP_AUTHORIZATION") or "")
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise HttpError(401, "the Basic credentials are malformed", {"WWW-Authenticate": 'Basic realm="registry"'})
        username, colon, password = decoded.partition(":")
        if not colon:
            raise HttpError(401, "the Basic credentials are malformed", {"WWW-Authenticate": 'Basic realm="registry"'})
        return username, password

    def caller() -> Caller | None:
        """Bearer token (npm's `_authToken`) or Basic (`_auth`, legacy clients); None when absent."""
        header = str(request.environ.get("HTTP_AUTHORIZATION") or "").strip()
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            found = store.authenticate_token(value.strip())
            if found is None:
                raise HttpError(
                    401,
                    "your token is not valid (revoked, or from another registry); run npm login",
                    {"WWW-Authenticate": 'Bearer realm="registry", error="invalid_token"'},
                )
            user, info = found
            if not policy.address_allowed(client_address(), info.cidr_whitelist):
                raise HttpError(401, "this token may not be used from your address", {"WWW-Authenticate": "ipaddress"})
            return Caller(user, info)
        credentials = basic_credentials()
        if credentials is None:
            raise HttpError(401, "use Authorization: Bearer <token> or Basic", {"WWW-Authenticate": 'Bearer realm="registry"'})
        throttle(credentials[0])
        verified = store.verify_password(*credentials)
        if verified is None:
            raise HttpError(401, "incorrect username or password", {"WWW-Authenticate": 'Basic realm="registry"'})
        return Caller(verified, None)

    def required_caller() -> Caller:
        found = caller()
        if found is None:
            raise HttpError(
                401,
                f"log in first: npm login --registry {settings.base_url}",
                {"WWW-Authenticate": 'Bearer realm="registry"'},
            )
        return found

    def writer_actor() -> Actor:
        found = required_caller()
        if found.token is not None and found.token.readonly:
            raise HttpError(403, "this token is read-only; create a read-write token with npm token create")
        return Actor(found.user.username, found.user.email, found.user.is_admin)

    def lookup_person(username: str) -> dict[str, str] | None:
        user = store.get_by_username(username)
        if user is None or user.status != "active":
            return None
        return {"name": user.username, "email": user.email} if user.email else {"name": user.username}

    def ok(status: int = 200, **extra: Any) -> bottle.HTTPResponse:
        return json_response(status, {"ok": True, **extra})

    def issue_token(user: User, description: str) -> str:
        token, _ = store.create_token(user.id, description=description)
        return token

    # ---- service endpoints

    def ping() -> bottle.HTTPResponse:
        return json_response(200, {})

    def whoami() -> bottle.HTTPResponse:
        return json_response(200, {"username": required_caller().user.username})

    def search() -> bottle.HTTPResponse:
        query = request.query
        text = query.getunicode("text") or ""
        try:
            size = min(max(int(query.get("size") or 20), 1), 250)
            offset = max(int(query.get("from") or 0), 0)
        except ValueError:
            raise BadRequest("size and from must be integers")
        path = settings.out_dir / SEARCH_DOCUMENT
        try:
            stat = path.stat()
        except FileNotFoundError:
            return json_response(200, {"objects": [], "total": 0, "time": publish.now_iso()})
        stamp = (stat.st_mtime_ns, stat.st_size)
        if search_cache.get("stamp") != stamp:
            search_cache.update(stamp=stamp, document=json.loads(path.read_bytes()))
        return json_response(200, search_objects(search_cache["document"], text, size=size, offset=offset))

    def audit_bulk() -> bottle.HTTPResponse:
        # No advisory database: "nothing known" keeps `npm install` quiet; the gzip body is not read.
        return json_response(200, {})

    def audit_quick() -> bottle.HTTPResponse:
        counts = {"info": 0, "low": 0, "moderate": 0, "high": 0, "critical": 0}
        return json_response(200, {
            "actions": [], "advisories": {}, "muted": [],
            "metadata": {"vulnerabilities": counts, "dependencies": 0, "devDependencies": 0,
                         "optionalDependencies": 0, "totalDependencies": 0},
        })

    # ---- accounts (npm adduser/login, legacy "couch" flow)

    def user_document(username: str) -> bottle.HTTPResponse:
        viewer = caller()
        user = store.get_by_username(username)
        if user is None or user.status != "active":
            raise NotFound(f"there is no user named {username!r}")
        document: dict[str, Any] = {
            "_id": f"org.couchdb.user:{user.username}",
            "_rev": f"{user.version}-{user.id.replace('-', '')[:16]}",
            "name": user.username,
            "type": "user",
            "roles": [],
            "date": user.created_at.isoformat(),
        }
        if viewer is not None and user.email:
            # Emails are shown to logged-in users only (npm owner add reads them; anonymous probing cannot).
            document["email"] = user.email
        return json_response(200, document)

    def couch_login(username: str, rev: str | None = None) -> bottle.HTTPResponse:
        body = json_object()
        name = body.get("name")
        if name != username:
            raise BadRequest(f"the body's name {name!r} does not match the user in the URL ({username})")
        password = body.get("password")
        if not isinstance(password, str) or not password:
            raise BadRequest("password is required")
        throttle(username)
        if rev is not None:
            # The 409 path: the client proves the password once more with Basic auth.
            credentials = basic_credentials()
            if credentials is not None and credentials[0].lower() != username.lower():
                raise HttpError(401, "the Basic credentials name another user", {"WWW-Authenticate": 'Basic realm="registry"'})
        existing = store.get_by_username(username)
        if existing is not None:
            user = store.verify_password(username, password)
            if user is None:
                raise HttpError(401, "incorrect username or password", {"WWW-Authenticate": 'Basic realm="registry"'})
            message = f"you are logged in as {user.username}"
        elif "email" not in body:
            # The answer (and the work: a dummy hash) of a wrong password: a login never tells whether a name exists.
            store.verify_password(username, password)
            raise HttpError(401, "incorrect username or password", {"WWW-Authenticate": 'Basic realm="registry"'})
        elif settings.signup == "open":
            user = store.create_user(username, password, body.get("email"))
            message = f"user {user.username} created"
        elif settings.signup == "closed":
            raise HttpError(403, "sign-up is closed on this registry; ask an administrator for an account")
        else:
            raise HttpError(403, "accounts on this registry are created by an administrator (registry-gen user add, or POST /user)")
        token = issue_token(user, "npm login")
        log.info("login: %s (%s)", user.username, message)
        return json_response(201, {
            "ok": message, "id": f"org.couchdb.user:{user.username}", "rev": "_we_dont_use_revs_any_more",
            "token": token, "username": user.username,
        })

    def logout(token: str) -> bottle.HTTPResponse:
        # Always 2xx: npm keeps the local credentials when this fails, which would strand the user.
        revoked = store.revoke_token_value(token)
        return ok(200, revoked=revoked)

    # ---- tokens (npm token list/create/revoke)

    def token_item(info: Any) -> dict[str, Any]:
        created = info.created.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return {
            # npm redacts UUID-shaped strings in its output (old tokens were UUIDs): show the hex form.
            "key": info.key.replace("-", ""), "token": info.token_prefix, "name": info.description, "created": created,
            "updated": created, "readonly": info.readonly,
            "cidr_whitelist": list(info.cidr_whitelist) or None,
        }

    def list_tokens() -> bottle.HTTPResponse:
        user = required_caller().user
        items = [token_item(i) for i in store.list_tokens(user.id)]
        return json_response(200, {"objects": items, "total": len(items), "urls": {"next": None}})

    def create_token() -> bottle.HTTPResponse:
        found = required_caller()
        body = json_object()
        password = body.get("password")
        throttle(found.user.username)
        if not isinstance(password, str) or not store.check_password(found.user.id, password):
            raise HttpError(401, "incorrect password", {"WWW-Authenticate": 'Basic realm="registry"'})
        if found.token is not None and found.token.readonly and not body.get("readonly"):
            raise HttpError(403, "a read-only token cannot create a read-write token")
        cidr = body.get("cidr_whitelist") or None
        description = body.get("description") or body.get("name") or "npm token create"
        token, info = store.create_token(
            found.user.id, readonly=bool(body.get("readonly")), cidr=cidr, description=str(description)[:200]
        )
        return json_response(201, {**token_item(info), "token": token})

    def revoke_token(key: str) -> bottle.HTTPResponse:
        found = required_caller()
        if found.token is not None and found.token.readonly:
            raise HttpError(403, "this token is read-only; create a read-write token with npm token create")
        user = found.user
        try:
            key = str(uuid.UUID(key))
        except ValueError:
            raise NotFound(f"you have no token with id {key!r}") from None
        if not store.revoke_token(user.id, key):
            raise NotFound(f"you have no token with id {key!r}")
        return ok(200)

    # ---- web login (npm login's default since npm 9)

    def web_login_start() -> bottle.HTTPResponse:
        body = json_body() or {}
        throttle(None)
        session = web_logins.start(bool(isinstance(body, dict) and body.get("create")))
        return json_response(200, {
            "loginUrl": f"{settings.base_url}-/v1/login/{session.login_id}",
            "doneUrl": f"{settings.base_url}-/v1/done/{session.done_id}",
        })

    def page(template: str, status: int, **values: Any) -> bottle.HTTPResponse:
        html = pages.get_template(template).render(site_title=settings.site_title, **values)
        response = bottle.HTTPResponse(body=html.encode("utf-8"), status=status)
        response.set_header("Content-Type", "text/html; charset=utf-8")
        response.set_header("Cache-Control", "no-store")
        response.set_header("X-Frame-Options", "DENY")
        response.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
        response.set_header("Referrer-Policy", "no-referrer")
        return response

    def login_page(session: Any, status: int = 200, error: str | None = None, username: str = "") -> bottle.HTTPResponse:
        return page(
            "login.html", status, create=session.create and settings.signup == "open", error=error,
            username=username, action=f"{settings.base_url}-/v1/login/{session.login_id}",
        )

    def web_login_form(login_id: str) -> bottle.HTTPResponse:
        session = web_logins.by_login(login_id)
        if session is None:
            return page("login_done.html", 404, ok=False, message="This login link has expired or was used. Run npm login again.")
        return login_page(session)

    def web_login_submit(login_id: str) -> bottle.HTTPResponse:
        session = web_logins.by_login(login_id)
        if session is None:
            return page("login_done.html", 404, ok=False, message="This login link has expired or was used. Run npm login again.")
        forms = request.forms
        username = (forms.getunicode("username") or "").strip()
        password = forms.getunicode("password") or ""
        email = (forms.getunicode("email") or "").strip()
        try:
            throttle(username or None)
        except HttpError as exc:
            return login_page(session, 429, exc.message, username)
        user = None
        if session.create and settings.signup == "open" and email and store.get_by_username(username) is None:
            try:
                user = store.create_user(username, password, email)
            except (InvalidFields, UsernameTaken) as exc:
                return login_page(session, 400, error_status(exc)[1], username)
        else:
            user = store.verify_password(username, password) if username and password else None
        if user is None:
            return login_page(session, 401, "Incorrect username or password.", username)
        if not web_logins.complete(login_id, issue_token(user, "npm web login")):
            return page("login_done.html", 404, ok=False, message="This login link has expired or was used. Run npm login again.")
        return page("login_done.html", 200, ok=True, message=f"You are logged in as {user.username}. Return to your terminal.")

    def web_login_done(done_id: str) -> bottle.HTTPResponse:
        known, token = web_logins.poll(done_id)
        if not known:
            raise NotFound("this login has expired or is unknown; run npm login again")
        if token is None:
            return json_response(202, {}, {"Retry-After": str(limits.done_retry_after)})
        return json_response(200, {"token": token})

    # ---- package writes

    def commit(name: str, rule: Callable[[PackageState], Change], status: int = 201, **extra: Any) -> bottle.HTTPResponse:
        writer.apply(name, rule)
        return ok(status, id=name, **extra)

    def package_put(name: str) -> bottle.HTTPResponse:
        actor = writer_actor()
        body = json_object(publish_limit)
        now = publish.now_iso()
        attachments = body.get("_attachments")
        if attachments:
            upload = publish.decode_publish(name, body, settings.limits)  # heavy and pure: outside the lock
            return commit(name, lambda s: Change(meta=publish.apply_publish(s, upload, actor, now), upload=upload), success=True)
        publish.check_body_name(name, body)
        versions = body.get("versions")
        if versions:
            return commit(name, lambda s: Change(meta=publish.apply_deprecations(s, versions, actor, now)))
        return commit(name, lambda s: Change(meta=publish.apply_create(s, actor, now)))

    def package_rev_put(name: str, rev: str) -> bottle.HTTPResponse:
        actor = writer_actor()
        body = json_object(publish_limit)
        now = publish.now_iso()
        if body.get("_attachments"):
            upload = publish.decode_publish(name, body, settings.limits)
            return commit(name, lambda s: Change(meta=publish.apply_publish(s, upload, actor, now), upload=upload), success=True)
        publish.check_body_name(name, body)
        if "versions" in body:
            versions = body["versions"]
            if not isinstance(versions, dict):
                raise BadRequest("versions must be an object")

            def unpublish(state: PackageState) -> Change:
                meta, removed = publish.apply_version_set(state, versions, body.get("dist-tags"), actor, now)
                return Change(meta=meta if meta is not state.meta else None, delete_meta=meta is None, removed=removed)

            return commit(name, unpublish, 200)
        if "maintainers" in body:
            return commit(
                name, lambda s: Change(meta=publish.apply_owners(s, body["maintainers"], actor, now, lookup_person)), 200
            )
        if "users" in body:
            # npm star: accepted and not recorded (a static tree has no place for per-user stars).
            return ok(200, id=name)
        raise BadRequest("this request changes nothing: send versions (unpublish) or maintainers (owner)")

    def package_delete(name: str, rev: str) -> bottle.HTTPResponse:
        actor = writer_actor()
        now = publish.now_iso()

        def unpublish_all(state: PackageState) -> Change:
            if not state.is_held and not state.meta.unpublished:
                raise NotFound(f"{name} is not in this registry")
            meta, removed = publish.apply_unpublish_all(state, actor, now)
            return Change(meta=meta, delete_meta=meta is None, removed=removed)

        return commit(name, unpublish_all, 200)

    def tarball_put(name: str, filename: str, rev: str) -> bottle.HTTPResponse:
        actor = writer_actor()
        data = body_bytes(settings.limits.max_archive_bytes)
        upload = publish.decode_upload(name, filename, data, settings.limits)
        now = publish.now_iso()
        return commit(name, lambda s: Change(meta=publish.apply_publish(s, upload, actor, now), upload=upload))

    def tarball_delete(name: str, filename: str, rev: str) -> bottle.HTTPResponse:
        actor = writer_actor()
        now = publish.now_iso()
        # npm derives this path from dist.tarball; older scoped URLs carry the full name as the file.
        bare = filename.rsplit("/", 1)[-1]

        def remove(state: PackageState) -> Change:
            version = next((v for v in state.published if bare == tarball_filename(name, v)), None)
            if version is None:
                if any(bare == tarball_filename(name, v) for v in state.meta.unpublished):
                    publish.authorize(state, actor, "unpublish")
                    return Change()  # already gone with the document PUT that came first
                raise NotFound(f"{filename} is not a tarball of {name}")
            meta, removed = publish.apply_unpublish_version(state, version, actor, now)
            return Change(meta=meta, delete_meta=meta is None, removed=removed)

        return commit(name, remove, 200)

    def stage_version(name: str, version: str, tag: str) -> bottle.HTTPResponse:
        actor = writer_actor()
        document = json_body()
        now = publish.now_iso()
        return commit(name, lambda s: Change(meta=publish.apply_stage(s, version, tag, document, actor, now)))

    def old_tag(name: str, tag: str) -> bottle.HTTPResponse:
        actor = writer_actor()
        version = json_body()
        now = publish.now_iso()
        return commit(name, lambda s: Change(meta=publish.apply_dist_tag(s, tag, version, actor, now)))

    def dist_tag_set(name: str, tag: str) -> bottle.HTTPResponse:
        actor = writer_actor()
        version = json_body()
        now = publish.now_iso()
        return commit(name, lambda s: Change(meta=publish.apply_dist_tag(s, tag, version, actor, now)))

    def dist_tag_remove(name: str, tag: str) -> bottle.HTTPResponse:
        actor = writer_actor()
        now = publish.now_iso()
        return commit(name, lambda s: Change(meta=publish.apply_dist_tag_removal(s, tag, actor, now)), 200)

    table = _route_table({
        "ping": ping, "whoami": whoami, "search": search, "audit_bulk": audit_bulk, "audit_quick": audit_quick,
        "user_document": user_document, "couch_login": couch_login, "logout": logout,
        "list_tokens": list_tokens, "create_token": create_token, "revoke_token": revoke_token,
        "web_login_start": web_login_start, "web_login_form": web_login_form,
        "web_login_submit": web_login_submit, "web_login_done": web_login_done,
        "package_put": package_put, "package_rev_put": package_rev_put, "package_delete": package_delete,
        "tarball_put": tarball_put, "tarball_delete": tarball_delete, "stage_version": stage_version,
        "old_tag": old_tag, "dist_tag_set": dist_tag_set, "dist_tag_remove": dist_tag_remove,
    })

    def dispatch(path: str = "") -> bottle.HTTPResponse:
        environ = request.environ
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        try:
            handler, args = _route(table, method, "/" + path)
            response = handler(**args)
        except Exception as error:
            status, message, headers = error_status(error)
            if status >= 500 and not isinstance(error, (LockTimeout, StoreUnavailable, HttpError)):
                log.exception("%s %s failed", method, loggable_path(environ.get("PATH_INFO")))
            response = json_response(status, {"error": message}, headers)
        log.info("%s %s %d", method, loggable_path(environ.get("PATH_INFO")), response.status_code)
        return response

    app = bottle.Bottle(catchall=True)
    methods = ["GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS"]
    app.route("/", methods, dispatch)
    app.route("/<path:path>", methods, dispatch)
    app.default_error_handler = json_error_page  # type: ignore[method-assign]
    app.config["registry.writer"] = writer
    return app
