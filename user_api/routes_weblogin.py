"""npm's web login (`npm login`'s default since npm 9): the browser's form and the CLI's polling.

The sessions live in `user_api.weblogin.WebLoginPool` (capped per address, evicting the oldest
unauthenticated one). The browser's URL and the CLI's polling URL carry different secrets, so
seeing the login page's address cannot fetch the token; the page shows the confirmation code npm
printed, the starting address and time, and the form post must come from the registry's origin.
"""

from __future__ import annotations

from typing import Any

import bottle

from registry_gen.errors import NotFound
from user_api.errors import InvalidFields, UsernameTaken
from user_api.registry_context import context, environ, issue_token, json_body, logged_in, throttle
from user_api.web import HttpError, client_address, error_status, json_response
from user_api.weblogin import BoundWebLogin, login_url, origin_allowed, token_description

EXPIRED = "This login link has expired or was used. Run npm login again."
FOREIGN_ORIGIN = "This form was sent from another site. Open the login link npm printed and log in there."


def web_login_start() -> bottle.HTTPResponse:
    body = json_body() or {}
    throttle(None)
    ctx = context()
    create = bool(isinstance(body, dict) and body.get("create"))
    session = ctx.web_logins.start(create, client_address(environ()))
    return json_response(200, {
        "loginUrl": login_url(ctx.settings.base_url, session),
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
    # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with the form.
    response.set_header("Referrer-Policy", "same-origin")
    return response


def expired_page() -> bottle.HTTPResponse:
    return page("login_done.html", 404, ok=False, message=EXPIRED)


def login_page(session: BoundWebLogin, status: int = 200, error: str | None = None, username: str = "") -> bottle.HTTPResponse:
    settings = context().settings
    return page(
        "login.html", status, create=session.create and settings.signup == "open", error=error,
        username=username, action=f"{settings.base_url}-/v1/login/{session.login_id}", session=session,
    )


def web_login_form(login_id: str) -> bottle.HTTPResponse:
    session = context().web_logins.by_login(login_id)
    return expired_page() if session is None else login_page(session)


def web_login_submit(login_id: str) -> bottle.HTTPResponse:
    ctx = context()
    session = ctx.web_logins.by_login(login_id)
    if session is None:
        return expired_page()
    headers = bottle.request.headers
    if not origin_allowed(headers.get("Origin"), headers.get("Referer"), ctx.settings.base_url):
        return login_page(session, 403, FOREIGN_ORIGIN)
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
    logged_in(user.username)
    if not ctx.web_logins.complete(login_id, issue_token(user, token_description(session))):
        return expired_page()
    return page("login_done.html", 200, ok=True, message=f"You are logged in as {user.username}. Return to your terminal.")


def _form_user(session: BoundWebLogin, username: str, password: str, email: str) -> Any:
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
