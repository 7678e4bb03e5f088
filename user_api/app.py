"""The Bottle app for the `/user` resource: routes decode, call the store, and encode.

`create_user_app(settings, store)` builds a fresh app per call. One plugin wraps every route: it
negotiates the representation, authenticates the bearer token, checks the query parameters, and
turns every UserApiError (and anything unexpected) into an RFC 9457 problem. The router's own
errors (404, 405) and anything else Bottle would render as HTML go through the same renderer.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote, urlencode

import bottle

from registry_gen import audit
from registry_gen.advisories import InvalidAdvisory, add_advisory
from registry_gen.errors import InvalidName, NotFound, RegistryError
from registry_gen.settings import Settings
from user_api import account_actions, policy
from user_api.admin import claim_for
from user_api.hooks_service import hook_store
from user_api.errors import (
    AuthenticationRequired,
    BadRequest,
    ErasureIncomplete,
    PackageNotFound,
    PermissionDenied,
    UnsupportedMediaType,
    FieldError,
    HookNotFound,
    InvalidCredentials,
    InvalidFields,
    NotAcceptable,
    PreconditionFailed,
    RateLimited,
    UserApiError,
    UserNotFound,
)
from user_api.models import (
    User,
    UserPage,
    UserReplacement,
    parse_new_user,
    parse_patch,
    parse_replacement,
    private_view,
    token_view,
    view_for,
)
from user_api.negotiation import (
    DEFAULT_CHOICE,
    JSON,
    MediaChoice,
    encode_json,
    encode_xml,
    negotiate,
    parse_body,
    parse_patch_body,
)
from user_api.openapi import build_openapi
from user_api.params import (
    ACCOUNT_AUDITING,
    AUDITING,
    DELIVERY_PAGING,
    LIST_MAX_PAGE,
    PAGING,
    SEARCH_MAX_PAGE,
    SEARCH_TOTAL_CAP,
    SEARCHING,
    Paging,
    parse_account_audit_query,
    parse_audit_query,
    parse_delivery_paging,
    parse_keyword,
    parse_paging,
    parse_query,
)
from user_api.policy import Caller
from user_api.problems import encode_problem, headers_for, problem_document, problem_type_for, status_problem
from user_api.ratelimit import LoginGuard, RateLimiter
from user_api.store_shared import SharedLoginGuard
from user_api.store import KEEP, UserStore
from user_api import store_audit
from user_api.store_hooks import SqlHookStore
from user_api import web
from user_api.web import WebLimits, etag_matches, read_body

log = logging.getLogger(__name__)

UUID_FILTER: Final = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
TOKEN_KEY_FILTER: Final = r"[0-9a-fA-F-]{32,36}"  # a token's key: a UUID, with or without dashes (npm shows it without)
TOKENS_PATH: Final = "/-/user-api/tokens"
OPENAPI_PATH: Final = "/-/user-api/openapi.json"
OWNERS_PATH: Final = "/-/user-api/owners"  # admin: bind a maintainer name to an account
ADVISORIES_PATH: Final = "/-/user-api/advisories"  # admin: record an advisory for npm audit
AUDIT_PATH: Final = "/-/user-api/audit"  # admin: read the audit log (registry_gen.audit); nothing changes it
ACCOUNT_AUDIT_PATH: Final = AUDIT_PATH + "/accounts"  # admin: its account changes (user_api.store_audit)
HOOKS_PATH: Final = "/-/user-api/hooks"  # admin: a hook's delivery log and redeliver (`registry-gen hooks`)
COMMON_HEADERS: Final = {
    "Vary": "Accept",
    "Cache-Control": "no-store",  # responses depend on the caller and may carry private fields
    "X-Content-Type-Options": "nosniff",
}


ApiLimits = WebLimits  # the /user app's name for the one limits object


@dataclass(frozen=True)
class Reply:
    """What a handler returns; the plugin encodes it as JSON or XML."""

    status: int
    json: Mapping[str, Any] | None = None
    xml_root: str = ""
    xml: Mapping[str, Any] | None = None  # defaults to `json`
    item_names: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RequestContext:
    request_id: str
    media: MediaChoice
    caller: Caller | None
    query: dict[str, str]
    environ: dict[str, Any]
    max_body_bytes: int
    services: UserServices

    @property
    def client_address(self) -> str:
        # REMOTE_ADDR only: X-Forwarded-For is client-controlled unless a trusted proxy rewrites it.
        return str(self.environ.get("REMOTE_ADDR") or "unknown")

    def url(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        """An absolute-path reference that survives mounting under a SCRIPT_NAME prefix."""
        base = quote(str(self.environ.get("SCRIPT_NAME", "")).rstrip("/"))
        return base + path + ("?" + urlencode(query) if query else "")

    def body(self, xml_root: str) -> dict[str, Any]:
        raw = read_body(self.environ, self.max_body_bytes)
        return parse_body(raw, self.environ.get("CONTENT_TYPE"), xml_root=xml_root)


# ---- encoding ---------------------------------------------------------------------------------


def _response(
    status: int, body: bytes, content_type: str | None, headers: Mapping[str, str], request_id: str
) -> bottle.HTTPResponse:
    response = bottle.HTTPResponse(body=body, status=status)
    for name, value in {**COMMON_HEADERS, **headers, "X-Request-Id": request_id}.items():
        response.set_header(name, value)
    if content_type:
        response.set_header("Content-Type", content_type)
    return response


def encode_reply(reply: Reply, media: MediaChoice, request_id: str) -> bottle.HTTPResponse:
    if reply.json is None:
        return _response(reply.status, b"", None, reply.headers, request_id)
    if media.format == JSON:
        body = encode_json(reply.json)
    else:
        data = reply.xml if reply.xml is not None else reply.json
        body = encode_xml(reply.xml_root, data, item_names=reply.item_names)
    return _response(reply.status, body, media.content_type, reply.headers, request_id)


def problem_response(error: BaseException, media: MediaChoice, request_id: str) -> bottle.HTTPResponse:
    kind = problem_type_for(error)
    detail = error.detail if isinstance(error, UserApiError) else None
    errors = error.errors if isinstance(error, UserApiError) else ()
    document = problem_document(kind, detail=detail, request_id=request_id, errors=errors)
    body, content_type = encode_problem(document, media.format)
    return _response(kind.status, body, content_type, headers_for(error), request_id)


def lenient_media(environ: Mapping[str, Any]) -> MediaChoice:
    """Errors follow Accept when they can; a problem is still sent as JSON when they cannot."""
    try:
        return negotiate(environ.get("HTTP_ACCEPT"))
    except NotAcceptable:
        return DEFAULT_CHOICE


# ---- the plugin -------------------------------------------------------------------------------


def authenticate(environ: Mapping[str, Any], store: UserStore) -> Caller | None:
    """A bearer token only (the shared rules of user_api.web; no Basic on this API)."""
    return web.authenticate(environ, store)


class UserApiPlugin:
    """Bottle plugin (API v2). Route config: `auth` (required|optional|none), `params` (allowed names)."""

    name = "user_api"
    api = 2

    def __init__(self, services: UserServices, limits: ApiLimits):
        self.services = services
        self.store = services.store
        self.limits = limits

    def apply(self, callback: Callable[..., Reply], route: bottle.Route) -> Callable[..., Any]:
        auth_mode: str = route.config.get("auth", "required")
        allowed: frozenset[str] = frozenset(route.config.get("params", ()))

        def wrapper(**url_args: Any) -> bottle.HTTPResponse:
            environ = bottle.request.environ
            request_id = str(uuid.uuid4())
            media = DEFAULT_CHOICE
            try:
                media = negotiate(environ.get("HTTP_ACCEPT"))
                caller = None if auth_mode == "none" else authenticate(environ, self.store)
                if caller is None and auth_mode == "required":
                    raise AuthenticationRequired()
                query = parse_query(str(environ.get("QUERY_STRING", "")), allowed=allowed)
                context = RequestContext(
                    request_id, media, caller, query, environ, self.limits.max_body_bytes, self.services
                )
                response = encode_reply(callback(context, **url_args), media, request_id)
            except UserApiError as error:
                response = problem_response(error, media, request_id)
            except Exception:
                # The traceback goes to our log with the request id; the client gets a bare 500.
                log.exception("unhandled error, request %s", request_id)
                response = problem_response(RuntimeError(), media, request_id)
            log.debug("%s %s %d %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"),
                     response.status_code, request_id)
            return response

        return wrapper


def make_error_handler() -> Callable[[bottle.HTTPError], bytes]:
    """Renders the router's 404/405 (and any HTTPError Bottle raises itself) as a problem."""

    def handle(error: bottle.HTTPError) -> bytes:
        environ = bottle.request.environ
        request_id = str(uuid.uuid4())
        media = lenient_media(environ)
        if error.status_code >= 500:
            log.error("unhandled error outside a route, request %s", request_id)
        _, document = status_problem(error.status_code, request_id=request_id)
        body, content_type = encode_problem(document, media.format)
        target = bottle.response
        for name, value in {**COMMON_HEADERS, "X-Request-Id": request_id}.items():
            target.set_header(name, value)
        target.set_header("Content-Type", content_type)
        log.debug("%s %s %d %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"), error.status_code, request_id)
        return body

    return handle


# ---- handlers -----------------------------------------------------------------------------------


def _page_reply(context: RequestContext, page: UserPage, paging: Paging, *, path: str, max_page: int,
                query: Mapping[str, str] | None = None) -> Reply:
    viewer = policy.caller_user(context.caller)
    total_pages = math.ceil(page.total / paging.size) if page.total else 0
    content = [view_for(viewer, user) for user in page.items]
    meta = {"number": paging.page, "size": paging.size, "totalElements": page.total, "totalPages": total_pages}
    return Reply(
        200,
        json={"content": content, "page": meta},
        xml_root="page",
        xml={"content": content, **meta},
        item_names={"content": "user"},
        headers={
            "Link": _links(context, paging, total_pages, path=path, max_page=max_page, query=query or {}),
            "X-Total-Count": str(page.total),
        },
    )


def _links(context: RequestContext, paging: Paging, total_pages: int, *, path: str, max_page: int,
           query: Mapping[str, str]) -> str:
    """RFC 8288 first/prev/next/last, only to pages up to max_page (so every link works)."""
    last = max(1, min(total_pages, max_page))
    relations = {"first": 1, "prev": paging.page - 1 if paging.page > 1 else None,
                 "next": paging.page + 1 if paging.page < last else None, "last": last}
    parts = []
    for rel, number in relations.items():
        if number is None:
            continue
        target = context.url(path, {**query, "page": number, "size": paging.size})
        parts.append(f'<{target}>; rel="{rel}"')
    return ", ".join(parts)


def _user_reply(status: int, view: Mapping[str, Any], etag: str, extra: Mapping[str, str] | None = None) -> Reply:
    return Reply(status, json=view, xml_root="user", headers={"ETag": etag, **(extra or {})})


def _login_fields(body: Mapping[str, Any]) -> tuple[str, str]:
    problems = [
        FieldError("is not a field of this resource", pointer="#/" + "".join(c for c in k[:64] if c.isprintable()))
        for k in body
        if k not in ("username", "password")
    ]
    for name in ("username", "password"):
        value = body.get(name)
        if not isinstance(value, str) or not value:
            problems.append(FieldError("is required and must be a non-empty string", pointer=f"#/{name}"))
    if problems:
        raise InvalidFields(errors=problems)
    return body["username"], body["password"]


@dataclass(frozen=True)
class UserServices:
    """What the /user routes work with: one per app."""

    settings: Settings
    store: UserStore
    signup_limiter: RateLimiter
    logins: LoginGuard | SharedLoginGuard  # shared with the npm login paths (web.login_guard)
    openapi_document: Mapping[str, Any]
    # Called with a deleted account's username and account_ids={its id}: the server erases its email
    # from every package (registry_gen.ownership.erase_maintainer_email, an Erasure); None for a
    # /user app without a registry.
    forget_maintainer: Callable[..., Any] | None = None


def list_users(context: RequestContext) -> Reply:
    paging = parse_paging(context.query, max_page=LIST_MAX_PAGE)
    page = context.services.store.list_users(offset=paging.offset, limit=paging.size)
    return _page_reply(context, page, paging, path="/user", max_page=LIST_MAX_PAGE)


def search_users(context: RequestContext) -> Reply:
    keyword = parse_keyword(context.query)
    paging = parse_paging(context.query, max_page=SEARCH_MAX_PAGE)
    assert context.caller is not None
    page = context.services.store.search_users(keyword, offset=paging.offset, limit=paging.size,
                                               include_email=context.caller.is_admin, count_limit=SEARCH_TOTAL_CAP)
    return _page_reply(context, page, paging, path="/user/search", max_page=SEARCH_MAX_PAGE, query={"keyword": keyword})


def read_user(context: RequestContext, user_id: str) -> Reply:
    user = context.services.store.get_by_id(user_id)
    if user is None:
        raise UserNotFound()
    return _user_reply(200, view_for(policy.caller_user(context.caller), user), user.etag)


def create_user(context: RequestContext) -> Reply:
    services = context.services
    policy.may_create(context.caller, services.settings.signup)
    if context.caller is None:
        allowed, retry_after = services.signup_limiter.allow(context.client_address)
        if not allowed:
            raise RateLimited(retry_after)
    new = parse_new_user(context.body("user"))
    policy.check_create_fields(context.caller, new)
    user = services.store.create_user(new.username, new.password, new.email, new.full_name, new.role, status=new.status)
    location = context.url(f"/user/{user.id}")
    return _user_reply(201, private_view(user), user.etag, {"Location": location})


def update_user(context: RequestContext) -> Reply:
    """PUT /user: full replacement (the id travels in the body; an omitted email or fullName is removed)."""
    assert context.caller is not None
    policy.require_writable(context.caller)
    replacement = parse_replacement(context.body("user"))
    current = context.services.store.get_by_id(replacement.id)
    if current is None:
        raise UserNotFound()
    return _apply_update(context, current, replacement)


def patch_user(context: RequestContext, user_id: str) -> Reply:
    """PATCH /user/{id}: a merge patch (RFC 7396); only the members sent change."""
    assert context.caller is not None
    policy.require_writable(context.caller)
    current = context.services.store.get_by_id(user_id)
    if current is None:
        raise UserNotFound()
    raw = read_body(context.environ, context.max_body_bytes)
    patch = parse_patch_body(raw, context.environ.get("CONTENT_TYPE"), xml_root="user")
    policy.may_update(context.caller, current)
    return _apply_update(context, current, parse_patch(patch, current))


def _apply_update(context: RequestContext, current: User, replacement: UserReplacement) -> Reply:
    caller, store = context.caller, context.services.store
    assert caller is not None
    policy.may_update(caller, current)
    policy.check_update_fields(caller, current, replacement)
    if_match = context.environ.get("HTTP_IF_MATCH")
    if if_match is not None and not etag_matches(if_match, current.etag, weak=False):
        raise PreconditionFailed()
    if policy.needs_current_password(caller, current, replacement):
        sent = replacement.current_password is not None
        if sent:
            admit_login(context, current.username)  # a stolen token must not make this a password oracle
        verified = sent and store.check_password(current.id, replacement.current_password or "")
        policy.require_current_password(verified, sent, email_removed=current.email is not None and replacement.email is None)
    user = store.update_user(
        current.id,
        expected_version=current.version if if_match is not None else None,
        username=replacement.username,
        email=replacement.email,
        full_name=replacement.full_name,
        role=replacement.role if replacement.role is not None else KEEP,
        status=replacement.status if replacement.status is not None else KEEP,
        password=replacement.password if replacement.password is not None else KEEP,
    )
    return _user_reply(200, private_view(user), user.etag)


def delete_user(context: RequestContext, user_id: str) -> Reply:
    assert context.caller is not None
    policy.may_delete(context.caller)
    services = context.services
    user = services.store.get_by_id(user_id)
    if user is None or not services.store.delete_user(user_id):
        raise UserNotFound()
    if services.forget_maintainer is not None:
        _forget(services.forget_maintainer, user)  # AUTH.md: a deleted user's email leaves every package
    return Reply(204)


def _forget(forget_maintainer: Callable[..., Any], user: User) -> None:
    """The removed account's email leaves every package (the entries bound to its id, whatever name
    they were recorded under, and the unbound ones of its name); ErasureIncomplete (500, naming each
    damaged meta left and the command that finishes) when some could not be read. The account stays
    removed: the erasure is finished by `registry-gen user erase-email NAME` (SECURITY.md, "Maintainer emails")."""
    username = user.username
    finish = f"`registry-gen user erase-email {username}`"
    try:
        left = list(forget_maintainer(username, account_ids=frozenset({user.id})).left)
    except RegistryError as error:
        log.warning("account %s removed, its email's erasure stopped: %s; finish with %s", username, error, finish)
        raise ErasureIncomplete(f"The account {username} is removed, but erasing its email stopped ({error}); "
                                f"an operator finishes it with {finish}.") from error
    if left:
        log.warning("account %s removed, its email left in damaged metas: %s", username, "; ".join(left))
        raise ErasureIncomplete(
            f"The account {username} is removed; its email may remain in {len(left)} damaged package file(s) "
            f"until an operator fixes each by hand and runs {finish}.", errors=[FieldError(line) for line in left])


def admit_login(context: RequestContext, username: str) -> None:
    """Counts a password attempt against the address and the account (every login path shares it)."""
    allowed, retry_after = context.services.logins.admit(username, context.client_address)
    if not allowed:
        raise RateLimited(retry_after)
def _token_owner(context: RequestContext, user_id: str) -> Any:
    """The user whose tokens are asked for: admins reach everyone's, a user only their own."""
    assert context.caller is not None
    user = context.services.store.get_by_id(user_id)
    if user is None:
        raise UserNotFound()
    policy.may_manage_tokens(context.caller, user)
    return user


def list_user_tokens(context: RequestContext, user_id: str) -> Reply:
    user = _token_owner(context, user_id)
    items = [account_actions.token_json(info) for info in context.services.store.list_tokens(user.id)]
    return Reply(200, json={"content": items}, xml_root="tokens", item_names={"content": "token", "cidrWhitelist": "cidr"})


def revoke_user_tokens(context: RequestContext, user_id: str) -> Reply:
    policy.require_writable(context.caller)
    account_actions.revoke_tokens(context.services.store, _token_owner(context, user_id))
    return Reply(204)


def revoke_user_token(context: RequestContext, user_id: str, key: str) -> Reply:
    policy.require_writable(context.caller)
    if not account_actions.revoke_tokens(context.services.store, _token_owner(context, user_id), key):
        raise UserNotFound("This user has no token with that key.")
    return Reply(204)


def create_token(context: RequestContext) -> Reply:
    services = context.services
    username, password = _login_fields(context.body("credentials"))
    admit_login(context, username)
    user = services.store.verify_password(username, password)
    if user is None:
        log.info("login failed for a username (request %s)", context.request_id)
        raise InvalidCredentials()
    services.logins.succeeded(user.username, context.client_address)
    token, info = services.store.create_token(user.id, description="user-api login")
    return Reply(201, json=token_view(token, info), xml_root="token")


def _require_admin(context: RequestContext) -> None:
    caller = context.caller
    assert caller is not None
    policy.require_writable(caller)
    if not caller.is_admin:
        raise PermissionDenied("Only administrators may do this.")


def claim_owner(context: RequestContext) -> Reply:
    """An administrator binds a package's maintainer name to an account (`registry-gen owner claim`)."""
    _require_admin(context)
    body = context.body("claim")
    package, username = body.get("package"), body.get("username")
    problems = [FieldError("is required and must be a string", pointer=f"#/{key}")
                for key, value in (("package", package), ("username", username)) if not isinstance(value, str) or not value]
    if problems:
        raise InvalidFields(errors=problems)
    try:
        changed = claim_for(context.services.settings, context.services.store, package, username)
    except InvalidName as exc:
        raise InvalidFields(errors=[FieldError(str(exc), pointer="#/package")]) from exc
    except NotFound as exc:
        raise PackageNotFound(str(exc)) from exc
    return Reply(200, json={"package": package, "username": username, "changed": changed}, xml_root="claim")


def record_advisory(context: RequestContext) -> Reply:
    """An administrator records an advisory (OSV or GitHub JSON) for `npm audit` (`registry-gen advisory add`)."""
    _require_admin(context)
    if not str(context.environ.get("CONTENT_TYPE") or "").startswith("application/json"):
        raise UnsupportedMediaType("An advisory is an OSV or GitHub advisory JSON document (application/json).")
    try:
        found = add_advisory(context.services.settings, read_body(context.environ, context.max_body_bytes), "the request body")
    except InvalidAdvisory as exc:
        raise BadRequest(str(exc)) from exc
    added = [{"id": a.source_id, "package": a.name, "severity": a.severity, "vulnerable_versions": a.vulnerable_versions}
             for a in found]
    return Reply(201, json={"advisories": added}, xml_root="advisories", item_names={"advisories": "advisory"})


def _audit_reader(context: RequestContext) -> None:
    """Only administrators read the audit log (read-only tokens too), as JSON."""
    if context.caller is None or not context.caller.is_admin:
        raise PermissionDenied("Only administrators may read the audit log.")
    if context.media.format != JSON:
        raise NotAcceptable("The audit log is available as application/json only.")


def read_audit_log(context: RequestContext) -> Reply:
    """An administrator reads the audit log's package writes, oldest first, a page at a time
    (`next` is the `since` of the next page). No route changes an entry."""
    _audit_reader(context)
    wanted, limit = parse_audit_query(context.query)
    from registry_gen.state import open_state  # the state's modules load with the first read of it

    with open_state(context.services.settings).journal() as journal:
        return Reply(200, json=audit.page(journal, wanted, limit))


def read_account_audit(context: RequestContext) -> Reply:
    """An administrator reads the audit log's account changes (their own numbering), oldest
    first, a page at a time. No route changes an entry."""
    _audit_reader(context)
    wanted, after, limit = parse_account_audit_query(context.query)
    return Reply(200, json=store_audit.entries_page(getattr(context.services.store, "dialect"), wanted, after, limit))


def _admins_hooks(context: RequestContext) -> SqlHookStore:
    """The hook store, to an administrator; to anyone else a hook's delivery log is not there
    (404, as npm's hooks API answers for another account's hook: nothing says the hook exists)."""
    caller = context.caller
    if caller is None or not caller.is_admin:
        raise HookNotFound()
    if context.media.format != JSON:
        raise NotAcceptable("A hook's delivery log is available as application/json only.")
    return hook_store(context.services.store)


def list_hook_deliveries(context: RequestContext, hook_id: str) -> Reply:
    """An administrator reads a hook's delivery log, newest first (`registry-gen hooks deliveries`)."""
    store = _admins_hooks(context)
    if store.get_hook(hook_id) is None:
        raise HookNotFound()
    offset, limit = parse_delivery_paging(context.query)
    found = store.deliveries(hook_id, offset=offset, limit=limit + 1)
    following = offset + limit if len(found) > limit else None
    return Reply(200, json={"deliveries": [d.view() for d in found[:limit]], "next": following})


def redeliver_hook_delivery(context: RequestContext, hook_id: str, delivery_id: str) -> Reply:
    """An administrator queues a delivery again, due now, with its delivery id (`registry-gen hooks redeliver`)."""
    policy.require_writable(context.caller)
    store = _admins_hooks(context)
    delivery = store.delivery(delivery_id)
    if delivery is None or delivery.hook_id != hook_id or not store.redeliver(delivery_id, now=time.time()):
        raise HookNotFound()
    queued = store.delivery(delivery_id)
    return Reply(202, json=(queued or delivery).view())


def openapi(context: RequestContext) -> Reply:
    if context.media.format != JSON:
        raise NotAcceptable("The OpenAPI document is available as application/json only.")
    return Reply(200, json=context.services.openapi_document)


def create_user_app(settings: Settings, store: UserStore, *, limits: ApiLimits | None = None,
                    forget_maintainer: Callable[..., object] | None = None) -> bottle.Bottle:
    """A fresh Bottle app serving /user, /user/<id>, /user/search, the login and the OpenAPI document.
    `forget_maintainer(username, account_ids=...)` runs after an account is deleted (see UserServices)."""
    limits = limits or web.web_limits(settings)
    services = UserServices(
        settings=settings,
        store=store,
        signup_limiter=RateLimiter(limits.signup_per_minute, limits.signup_burst),
        logins=web.login_guard(store, limits),
        openapi_document=build_openapi(settings, max_body_bytes=limits.max_body_bytes),
        forget_maintainer=forget_maintainer,
    )
    app = bottle.Bottle(catchall=True)
    app.install(UserApiPlugin(services, limits))
    app.default_error_handler = make_error_handler()  # type: ignore[method-assign]
    app.route("/user", "GET", list_users, params=PAGING)
    app.route("/user", "POST", create_user, params=(), auth="optional")
    app.route("/user", "PUT", update_user, params=())
    app.route("/user/search", "GET", search_users, params=SEARCHING)
    app.route(f"/user/<user_id:re:{UUID_FILTER}>", "GET", read_user, params=())
    app.route(f"/user/<user_id:re:{UUID_FILTER}>", "PATCH", patch_user, params=())
    app.route(f"/user/<user_id:re:{UUID_FILTER}>", "DELETE", delete_user, params=())
    app.route(f"/user/<user_id:re:{UUID_FILTER}>/tokens", "GET", list_user_tokens, params=())
    app.route(f"/user/<user_id:re:{UUID_FILTER}>/tokens", "DELETE", revoke_user_tokens, params=())
    app.route(f"/user/<user_id:re:{UUID_FILTER}>/tokens/<key:re:{TOKEN_KEY_FILTER}>", "DELETE", revoke_user_token, params=())
    app.route(TOKENS_PATH, "POST", create_token, params=(), auth="none")
    app.route(OPENAPI_PATH, "GET", openapi, params=(), auth="none")
    app.route(OWNERS_PATH, "POST", claim_owner, params=())
    app.route(ADVISORIES_PATH, "POST", record_advisory, params=())
    app.route(AUDIT_PATH, "GET", read_audit_log, params=AUDITING)
    app.route(ACCOUNT_AUDIT_PATH, "GET", read_account_audit, params=ACCOUNT_AUDITING)
    app.route(f"{HOOKS_PATH}/<hook_id:re:{UUID_FILTER}>/deliveries", "GET", list_hook_deliveries, params=DELIVERY_PAGING)
    app.route(f"{HOOKS_PATH}/<hook_id:re:{UUID_FILTER}>/deliveries/<delivery_id:re:{UUID_FILTER}>/redeliver", "POST",
              redeliver_hook_delivery, params=())
    return app
