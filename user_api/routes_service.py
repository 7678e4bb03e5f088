"""Service endpoints of the npm side: ping, whoami, search, the change feed, and the audit endpoints."""

from __future__ import annotations

from collections.abc import Callable

import bottle

from registry_gen.access import ANONYMOUS
from registry_gen.access import Caller as ReadCaller
from registry_gen.changes import feed_page, feed_query
from registry_gen.publish import BadRequest
from registry_gen.search import search_registry
from registry_gen.state import open_state
from user_api.audit import MAX_BODY as MAX_AUDIT_BODY
from user_api.audit import audit_answer
from user_api.registry_context import caller, context, required_caller
from user_api.web import json_response, read_body



def ping() -> bottle.HTTPResponse:
    return json_response(200, {})


def whoami() -> bottle.HTTPResponse:
    return json_response(200, {"username": required_caller().user.username})


def search() -> bottle.HTTPResponse:
    """npm search over the packages anyone may read (with read rules in force, ReadGuard.search
    answers instead, per caller)."""
    query = bottle.request.query
    try:
        size = min(max(int(query.get("size") or 20), 1), 250)
        offset = max(int(query.get("from") or 0), 0)
    except ValueError:
        raise BadRequest("size and from must be integers") from None
    found = search_registry(open_state(context().settings), query.getunicode("text") or "", size=size, offset=offset, listed_only=True)
    return json_response(200, found)


def changes() -> bottle.HTTPResponse:
    """The change journal as a paged feed (registry_gen.changes): a private package's entries
    only to callers who may read it."""
    since, limit = feed_query({key: bottle.request.query.get(key) for key in ("since", "limit")})
    settings = context().settings
    readable = _readable()
    with open_state(settings).journal() as journal:
        page = feed_page(journal.since, since, limit, readable)
    return json_response(200, page)


def _readable() -> Callable[[str], bool]:
    """Which packages this request's caller may read (with no read rule, every package: no
    token lookup at all)."""
    rules = context().settings.packages
    if not rules.in_force:
        return lambda name: True
    found = caller()
    if found is None or found.user.status != "active":
        reader = ANONYMOUS
    else:
        user = found.user
        reader = ReadCaller(user.username, context().store.groups_of(user.id), user.is_admin)
    return lambda name: rules.may_read(name, reader)


def audit() -> bottle.HTTPResponse:
    """npm audit's endpoints, answered from the operator's advisories (user_api.audit): no
    advisory source gives 404 with a message, never "nothing known"."""
    environ = bottle.request.environ
    raw = read_body(environ, MAX_AUDIT_BODY)
    encoding = str(environ.get("HTTP_CONTENT_ENCODING") or "")
    status, data = audit_answer(context().settings, bottle.request.path, raw, encoding)
    return json_response(int(status.split()[0]), data)
