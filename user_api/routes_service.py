"""Service endpoints of the npm side: ping, whoami, search, and the audit endpoints."""

from __future__ import annotations


import bottle

from registry_gen.publish import BadRequest
from registry_gen.search import search_registry
from registry_gen.state import open_state
from user_api.audit import MAX_BODY as MAX_AUDIT_BODY
from user_api.audit import audit_answer
from user_api.registry_context import context, required_caller
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


def audit() -> bottle.HTTPResponse:
    """npm audit's endpoints, answered from the operator's advisories (user_api.audit): no
    advisory source gives 404 with a message, never "nothing known"."""
    environ = bottle.request.environ
    raw = read_body(environ, MAX_AUDIT_BODY)
    encoding = str(environ.get("HTTP_CONTENT_ENCODING") or "")
    status, data = audit_answer(context().settings, bottle.request.path, raw, encoding)
    return json_response(int(status.split()[0]), data)
