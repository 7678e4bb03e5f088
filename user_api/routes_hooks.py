"""npm's hooks API (libnpmhook, `npm hook add|ls|update|rm` of npm 10), on the npm app:

    POST   /-/npm/v1/hooks/hook          {type, name, endpoint, secret} -> the hook
    GET    /-/npm/v1/hooks?package=&limit=&offset=   -> {objects, total, urls}
    GET    /-/npm/v1/hooks/hook/<id>     PUT (endpoint, secret)     DELETE

A logged-in account makes hooks on what it may read; it sees and changes its own, an admin every
one. The secret is sealed (registry_gen.hooks.secrets) and never shown again. The endpoint's host
must resolve to an address hooks may reach (registry_gen.hooks.net), or the hook is refused (400).
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

import bottle

from registry_gen.access import Caller as ReadCaller
from registry_gen.hooks.net import AddressRefused, allowed_address
from registry_gen.hooks.rules import Hook, HookRefused, endpoint_problem, hook_target, secret_problem
from registry_gen.hooks.secrets import secret_box
from registry_gen.settings import Settings
from user_api.hooks_service import hook_store
from user_api.models import User
from user_api.policy import Caller
from user_api.registry_context import context, json_object, required_caller
from user_api.store import UserStore
from user_api.web import HttpError, json_response

PAGE_LIMIT: Final = 100


def _writer() -> Caller:
    caller = required_caller()
    if caller.token is not None and caller.token.readonly:
        raise HttpError(403, "this token is read-only; create a read-write token with npm token create")
    return caller


def reader_of(store: UserStore, user: User) -> ReadCaller:
    """The read rules' view of an account (registry_gen.access)."""
    return ReadCaller(user.username, store.groups_of(user.id), user.is_admin)


def checked_endpoint(settings: Settings, endpoint: Any) -> str:
    """The endpoint, if its spelling is a URL and its host resolves to an address hooks may reach."""
    problem = endpoint_problem(endpoint)
    if problem:
        raise HookRefused(problem)
    parts = urlsplit(endpoint)
    try:
        allowed_address(str(parts.hostname), parts.port or (443 if parts.scheme == "https" else 80), settings.hooks.allow_networks)
    except AddressRefused as exc:
        raise HookRefused(f"endpoint refused: {exc}") from None
    return str(endpoint)


def _secret(body: dict[str, Any]) -> str:
    problem = secret_problem(body.get("secret"))
    if problem:
        raise HookRefused(problem)
    return str(body["secret"])


def add_hook() -> bottle.HTTPResponse:
    caller, services = _writer(), context()
    body = json_object()
    type_, name = hook_target(body.get("type"), body.get("name"))
    if type_ == "package" and not services.settings.packages.may_read(name, reader_of(services.store, caller.user)):
        raise HttpError(404, f"no package {name} that you may read")
    if type_ == "owner" and services.store.get_by_username(name) is None:
        raise HookRefused(f"no account named {name}")
    endpoint, secret = checked_endpoint(services.settings, body.get("endpoint")), _secret(body)
    cipher = secret_box(services.settings, create=True).seal(secret)
    hook = hook_store(services.store).create_hook(caller.user.id, type_, name, endpoint, cipher, limit=services.settings.hooks.max_per_user)
    return json_response(201, hook.view())


def _page_number(name: str, default: int) -> int:
    raw = bottle.request.query.get(name)
    if raw in (None, ""):
        return default
    if not str(raw).isdigit():
        raise HttpError(400, f"{name} must be a whole number")
    return int(raw)


def list_hooks() -> bottle.HTTPResponse:
    caller = required_caller()
    package = bottle.request.query.get("package") or None
    limit, offset = min(_page_number("limit", PAGE_LIMIT), PAGE_LIMIT), _page_number("offset", 0)
    owner = None if caller.is_admin else caller.user.id
    hooks, total = hook_store(context().store).list_hooks(owner, package=package, offset=offset, limit=limit)
    return json_response(200, {"objects": [hook.view() for hook in hooks], "total": total, "urls": {}})


def _own_hook(hook_id: str, caller: Caller) -> Hook:
    """The hook, when the caller may see it (theirs, or any for an admin); 404 otherwise."""
    hook = hook_store(context().store).get_hook(hook_id)
    if hook is None or not (caller.is_admin or hook.owner_id == caller.user.id):
        raise HttpError(404, "no such hook")
    return hook


def get_hook(hook_id: str) -> bottle.HTTPResponse:
    return json_response(200, _own_hook(hook_id, required_caller()).view())


def update_hook(hook_id: str) -> bottle.HTTPResponse:
    caller, services = _writer(), context()
    _own_hook(hook_id, caller)
    body = json_object()
    endpoint, secret = checked_endpoint(services.settings, body.get("endpoint")), _secret(body)
    cipher = secret_box(services.settings, create=True).seal(secret)
    hook = hook_store(services.store).update_hook(hook_id, endpoint, cipher)
    if hook is None:
        raise HttpError(404, "no such hook")
    return json_response(200, hook.view())


def remove_hook(hook_id: str) -> bottle.HTTPResponse:
    caller = _writer()
    _own_hook(hook_id, caller)
    hook = hook_store(context().store).delete_hook(hook_id)
    if hook is None:
        raise HttpError(404, "no such hook")
    return json_response(200, hook.view())

