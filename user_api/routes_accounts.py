"""Accounts and tokens on the npm side: npm adduser/login (the legacy "couch" flow), logout,
the user documents npm owner reads, and npm token list/create/revoke."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

import bottle

from registry_gen.errors import NotFound
from registry_gen.publish import BadRequest
from user_api.models import TokenInfo, User, utcnow
from user_api.registry_context import (
    caller,
    context,
    environ,
    issue_token,
    json_object,
    logged_in,
    ok,
    required_caller,
    throttle,
)
from user_api.web import BASIC_REALM, HttpError, basic_credentials, json_response, note_user

log = logging.getLogger(__name__)
WRONG_PASSWORD = "incorrect username or password"
MAX_TOKEN_DAYS = 3650


def user_document(username: str) -> bottle.HTTPResponse:
    viewer = caller()
    user = context().store.get_by_username(username)
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
    password = _login_password(username, body)
    throttle(username)
    if rev is not None:
        # The 409 path: the client proves the password once more with Basic auth.
        credentials = basic_credentials(environ())
        if credentials is None:
            raise HttpError(401, "send the password as Basic credentials to log in", BASIC_REALM)
        if credentials[0].lower() != username.lower():
            raise HttpError(401, "the Basic credentials name another user", BASIC_REALM)
    user, message = _login_or_sign_up(username, password, body)
    logged_in(user.username)
    token = issue_token(user, "npm login")
    log.info("login: %s (%s)", user.username, message)
    return json_response(201, {
        "ok": message, "id": f"org.couchdb.user:{user.username}", "rev": "_we_dont_use_revs_any_more",
        "token": token, "username": user.username,
    })


def _login_password(username: str, body: dict[str, Any]) -> str:
    name = body.get("name")
    if name != username:
        raise BadRequest(f"the body's name {name!r} does not match the user in the URL ({username})")
    password = body.get("password")
    if not isinstance(password, str) or not password:
        raise BadRequest("password is required")
    return password


def _login_or_sign_up(username: str, password: str, body: dict[str, Any]) -> tuple[User, str]:
    ctx = context()
    store = ctx.store
    if store.get_by_username(username) is not None:
        return _existing_user_login(username), f"you are logged in as {username}"
    if ctx.settings.signup == "open":
        # Email is optional (as on Verdaccio): npm's login body and several test suites send none.
        user = store.create_user(username, password, body.get("email") or None)
        return user, f"user {user.username} created"
    if "email" not in body:
        # The answer (and the work: a dummy hash) of a wrong password: where nobody may sign up,
        # a login never tells whether a name exists.
        store.verify_password(username, password)
        raise HttpError(401, WRONG_PASSWORD, BASIC_REALM)
    if ctx.settings.signup == "closed":
        raise HttpError(403, "sign-up is closed on this registry; ask an administrator for an account")
    raise HttpError(403, "accounts on this registry are created by an administrator (registry-gen user add, or POST /user)")


def _existing_user_login(username: str) -> User:
    """An existing account logs in with Basic credentials, as CouchDB wants: a body password
    alone gets 409, and npm and yarn then send the password as Basic (GET the document, PUT
    with its revision); pnpm and yarn 1 send Basic at once. A body is no proof of who sends it
    twice (Verdaccio and @verdaccio/e2e-cli hold the same line)."""
    credentials = basic_credentials(environ())
    if credentials is None:
        raise HttpError(409, f"user {username} exists: to log in, send the password as Basic credentials "
                        "(npm login, pnpm login and yarn npm login do)")
    name, password = credentials
    user = context().store.verify_password(username, password) if name.lower() == username.lower() else None
    if user is None:
        raise HttpError(401, WRONG_PASSWORD, BASIC_REALM)
    return user


def logout(token: str) -> bottle.HTTPResponse:
    # Always 2xx: npm keeps the local credentials when this fails, which would strand the user.
    store = context().store
    owner = store.authenticate_token(token)
    if owner is not None:  # the access line names whose token went, as for any other request
        note_user(bottle.request.environ, owner[0].username)
    revoked = store.revoke_token_value(token)
    return ok(200, revoked=revoked)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def token_item(info: TokenInfo) -> dict[str, Any]:
    created = _iso(info.created)
    return {
        # npm redacts UUID-shaped strings in its output (old tokens were UUIDs): show the hex form.
        "key": info.key.replace("-", ""), "token": info.token_prefix, "name": info.description, "created": created,
        "updated": created, "readonly": info.readonly,
        "cidr_whitelist": list(info.cidr_whitelist) or None,
        "expires": None if info.expires is None else _iso(info.expires),
    }


def token_expiry(body: dict[str, Any]) -> datetime | None:
    """npm token create's `expires`: whole days from now (npm 11 sends an integer), or none."""
    days = body.get("expires")
    if days is None:
        return None
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_TOKEN_DAYS:
        raise BadRequest(f"expires must be a whole number of days from 1 to {MAX_TOKEN_DAYS}; got {days!r}")
    return utcnow() + timedelta(days=days)


def list_tokens() -> bottle.HTTPResponse:
    user = required_caller().user
    items = [token_item(i) for i in context().store.list_tokens(user.id)]
    return json_response(200, {"objects": items, "total": len(items), "urls": {"next": None}})


def create_token() -> bottle.HTTPResponse:
    found = required_caller()
    body = json_object()
    password = body.get("password")
    throttle(found.user.username)
    store = context().store
    if not isinstance(password, str) or not store.check_password(found.user.id, password):
        raise HttpError(401, "incorrect password", BASIC_REALM)
    logged_in(found.user.username)
    if found.token is not None and found.token.readonly and not body.get("readonly"):
        raise HttpError(403, "a read-only token cannot create a read-write token")
    cidr = body.get("cidr_whitelist") or None
    description = body.get("description") or body.get("name") or "npm token create"
    token, info = store.create_token(
        found.user.id, readonly=bool(body.get("readonly")), cidr=cidr, description=str(description)[:200],
        expires=token_expiry(body),
    )
    return json_response(201, {**token_item(info), "token": token})


def revoke_token(key: str) -> bottle.HTTPResponse:
    found = required_caller()
    if found.token is not None and found.token.readonly:
        raise HttpError(403, "this token is read-only; create a read-write token with npm token create")
    try:
        key = str(uuid.UUID(key))
    except ValueError:
        raise NotFound(f"you have no token with id {key!r}") from None
    if not context().store.revoke_token(found.user.id, key):
        raise NotFound(f"you have no token with id {key!r}")
    return ok(200)
