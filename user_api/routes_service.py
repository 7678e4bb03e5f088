"""Service endpoints of the npm side: ping, whoami, search, and the audit endpoints."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import bottle

from registry_gen.layout import SEARCH_DOCUMENT
from registry_gen.publish import BadRequest, now_iso
from user_api.audit import MAX_BODY as MAX_AUDIT_BODY
from user_api.audit import audit_answer
from user_api.registry_context import context, required_caller
from user_api.web import json_response, read_body



def ping() -> bottle.HTTPResponse:
    return json_response(200, {})


def whoami() -> bottle.HTTPResponse:
    return json_response(200, {"username": required_caller().user.username})


def search() -> bottle.HTTPResponse:
    query = bottle.request.query
    text = query.getunicode("text") or ""
    try:
        size = min(max(int(query.get("size") or 20), 1), 250)
        offset = max(int(query.get("from") or 0), 0)
    except ValueError:
        raise BadRequest("size and from must be integers") from None
    document = _search_document()
    if document is None:
        return json_response(200, {"objects": [], "total": 0, "time": now_iso()})
    return json_response(200, search_objects(document, text, size=size, offset=offset))


def _search_document() -> Mapping[str, Any] | None:
    """The built search document, parsed again only when the build rewrote it."""
    ctx = context()
    path = ctx.settings.out_dir / SEARCH_DOCUMENT
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_size)
    if ctx.search_cache.get("stamp") != stamp:
        ctx.search_cache.update(stamp=stamp, document=json.loads(path.read_bytes()))
    document: Mapping[str, Any] = ctx.search_cache["document"]
    return document


def audit() -> bottle.HTTPResponse:
    """npm audit's endpoints, answered from the operator's advisories (user_api.audit): no
    advisory source gives 404 with a message, never "nothing known"."""
    environ = bottle.request.environ
    raw = read_body(environ, MAX_AUDIT_BODY)
    encoding = str(environ.get("HTTP_CONTENT_ENCODING") or "")
    status, data = audit_answer(context().settings, bottle.request.path, raw, encoding)
    return json_response(int(status.split()[0]), data)


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
    """Filters the built search document by npm's search text. Every term must match; exact
    names first, then names containing the text, then the rest."""
    terms = [t for t in text.lower().split() if t]
    objects = [o for o in document.get("objects", []) if all(_matches(o.get("package", {}), t) for t in terms)]
    plain = " ".join(t for t in terms if ":" not in t)

    def rank(entry: Mapping[str, Any]) -> tuple[int, str]:
        name = str(entry.get("package", {}).get("name", ""))
        return (0 if name == plain else 1 if plain and plain in name else 2, name)

    objects.sort(key=rank)
    return {"objects": objects[offset : offset + size], "total": len(objects), "time": now_iso()}
