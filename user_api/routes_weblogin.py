"""npm's web login (`npm login`'s default since npm 9): the sessions, the browser's form, the CLI's polling.

The browser's URL and the CLI's polling URL carry different secrets, so seeing the login page's
address cannot fetch the token.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bottle

from registry_gen.errors import NotFound
from user_api.errors import InvalidFields, UsernameTaken
from user_api.registry_context import RegistryLimits, context, issue_token, json_body, throttle
from user_api.web import HttpError, error_status, json_response

EXPIRED = "This login link has expired or was used. Run npm login again."


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


def web_login_start() -> bottle.HTTPResponse:
    body = json_body() or {}
    throttle(None)
    ctx = context()
    session = ctx.web_logins.start(bool(isinstance(body, dict) and body.get("create")))
    return json_response(200, {
        "loginUrl": f"{ctx.settings.base_url}-/v1/login/{session.login_id}",
        "doneUrl": f"{ctx.settings.base_url}-/v1/done/{session.done_id}",
    })


def page(template: str, status: int, **values: Any) -> bottle.HTTPResponse:
    ctx = context()
    html = ctx.pages.get_template(template).render(site_title=ctx.settings.site_title, **values)
    response = bottle.HTTPResponse(body=html.encode("utf-8"), status=status)
    response.set_header("Content-Type", "text/html; charset=utf-8")
    response.set_header("Cache-Control", "no-store")
    response.set_header("X-Frame-Options", "DENY")
    response.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
    response.set_header("Referrer-Policy", "no-referrer")
    return response


def expired_page() -> bottle.HTTPResponse:
    return page("login_done.html", 404, ok=False, message=EXPIRED)


def login_page(session: WebLogin, status: int = 200, error: str | None = None, username: str = "") -> bottle.HTTPResponse:
    settings = context().settings
    return page(
        "login.html", status, create=session.create and settings.signup == "open", error=error,
        username=username, action=f"{settings.base_url}-/v1/login/{session.login_id}",
    )


def web_login_form(login_id: str) -> bottle.HTTPResponse:
    session = context().web_logins.by_login(login_id)
    return expired_page() if session is None else login_page(session)


def web_login_submit(login_id: str) -> bottle.HTTPResponse:
    ctx = context()
    session = ctx.web_logins.by_login(login_id)
    if session is None:
        return expired_page()
    forms = bottle.request.forms
    username = (forms.getunicode("username") or "").strip()
    password = forms.getunicode("password") or ""
    email = (forms.getunicode("email") or "").strip()
    try:
        throttle(username or None)
    except HttpError as exc:
        return login_page(session, exc.status, exc.message, username)
    try:
        user = _form_user(session, username, password, email)
    except (InvalidFields, UsernameTaken) as exc:
        return login_page(session, 400, error_status(exc)[1], username)
    if user is None:
        return login_page(session, 401, "Incorrect username or password.", username)
    if not ctx.web_logins.complete(login_id, issue_token(user, "npm web login")):
        return expired_page()
    return page("login_done.html", 200, ok=True, message=f"You are logged in as {user.username}. Return to your terminal.")


def _form_user(session: WebLogin, username: str, password: str, email: str) -> Any:
    """The account the form names: created when the session may sign up, else checked."""
    ctx = context()
    if session.create and ctx.settings.signup == "open" and email and ctx.store.get_by_username(username) is None:
        return ctx.store.create_user(username, password, email)
    return ctx.store.verify_password(username, password) if username and password else None


def web_login_done(done_id: str) -> bottle.HTTPResponse:
    ctx = context()
    known, token = ctx.web_logins.poll(done_id)
    if not known:
        raise NotFound("this login has expired or is unknown; run npm login again")
    if token is None:
        return json_response(202, {}, {"Retry-After": str(ctx.limits.done_retry_after)})
    return json_response(200, {"token": token})
