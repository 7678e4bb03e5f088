"""Paging through an admin audit route to its end, as a client would."""

from __future__ import annotations

from typing import Any

from tests.registry_api.helpers import http


def admin_pages(base: str, token: str, route: str, query: str, limit: int) -> list[dict[str, Any]]:
    """Every entry of `route` (the package writes' or the account changes'), `limit` a page,
    following `next` to the end; each page at most `limit` long."""
    entries: list[dict[str, Any]] = []
    since = "0"
    for _ in range(50):
        reply = http("GET", f"{base}{route}?{query}&limit={limit}&since={since}", token=token)
        assert reply.status == 200, reply.body
        entries += reply.json["entries"]
        assert len(reply.json["entries"]) <= limit
        if reply.json["next"] is None:
            return entries
        since = reply.json["next"]
    raise AssertionError(f"the pages of {route} did not end")
