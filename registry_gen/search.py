"""npm's `/-/v1/search`, answered from the build's state rather than from a document.

The build keeps each package's search piece and a lower-case search text in its state
(registry_gen.state), updated with the package: a publish changes one row, never a document
listing every package. A query narrows the rows in the state by substring (every term's text must
be in the package's search text: `State.search_pieces`), then applies npm's rules to what is left
(`matches`), exactly as they were applied to the whole document before, and ranks what matched
as the site's search box does (`search_rank`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from registry_gen.publish import now_iso
from registry_gen.site_search import MATCH_REASONS, match_rank


def matches(package: Mapping[str, Any], term: str) -> bool:
    """One search term against one package: `keywords:a,b`, `author:`/`maintainer:`, `scope:`, or
    a substring of the name, description, keywords and maintainers."""
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


def search_rank(package: Mapping[str, Any], text: str) -> tuple[int, str]:
    """Where a matching package comes in the answer to `text`: by the site search's ranking
    (registry_gen.site_search.match_rank) of the query's plain terms, a package found only by a
    substring or a qualifier after every ranked one; by name within a rank."""
    plain = " ".join(t for t in text.lower().split() if ":" not in t)
    name = str(package.get("name", ""))
    people = [str(m.get("username", "")) for m in package.get("maintainers", []) if isinstance(m, Mapping)]
    keywords = [str(k) for k in package.get("keywords", []) if isinstance(k, str)]
    rank = match_rank(name, str(package.get("description") or ""), keywords, people, plain)
    return (len(MATCH_REASONS) if rank is None else rank, name)


def search_objects(objects: list[dict[str, Any]], text: str, *, size: int, offset: int) -> dict[str, Any]:
    """npm's search answer over `objects`: every term must match; ranked as the site's search
    ranks (search_rank)."""
    terms = [t for t in text.lower().split() if t]
    found = [o for o in objects if all(matches(o.get("package", {}), t) for t in terms)]
    found.sort(key=lambda entry: search_rank(entry.get("package", {}), text))
    return {"objects": found[offset : offset + size], "total": len(found), "time": now_iso()}


def needles(text: str) -> list[str]:
    """What each term needs to find in a package's search text (a superset of `matches`)."""
    found = []
    for term in text.lower().split():
        qualifier, colon, value = term.partition(":")
        if not colon:
            found.append(term)
        elif qualifier in ("author", "maintainer") or (qualifier in ("keywords", "keyword") and "," not in value):
            found.append(value)
        elif qualifier == "scope" and value:
            found.append(value if value.startswith("@") else "@" + value)
    return [n for n in found if n]


class SearchSource(Protocol):
    """Where the search pieces are kept (registry_gen.state.State has them)."""

    def search_pieces(self, needles: list[str], *, listed_only: bool) -> list[bytes]: ...


def search_registry(
    state: SearchSource,
    text: str,
    *,
    size: int,
    offset: int,
    listed_only: bool,
    readable: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """The answer to one search. `listed_only`: only what anyone may read (no read rules in force,
    or an anonymous static listing); `readable`: the caller's own filter when rules are in force."""
    objects = [json.loads(piece) for piece in state.search_pieces(needles(text), listed_only=listed_only)]
    if readable is not None:
        objects = [o for o in objects if readable(str(o.get("package", {}).get("name")))]
    return search_objects(objects, text, size=size, offset=offset)
