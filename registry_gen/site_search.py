"""The words the site's static search finds a package by, and the search shards they put it in.

Pure functions of a package's summary: the build stores each package's keys with its listing
(registry_gen.build.indexes decides the leaves), and the search box (site_template/static/site.js)
cuts the typed words the same way and fetches the shards of the first one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SEARCH_KEY_LIMIT = 32  # shards one package may sit in (a publish rewrites at most this many)
# A description word's shard is keyed by its first three characters, a name's, keyword's or
# maintainer's by two: descriptions hold ten times the words, and two-character shards of them
# (`co`, `re`, `pr`) would hold most of a registry. A query of two characters searches names,
# keywords and maintainers only; from three on, descriptions too.
DESCRIPTION_KEY_LENGTH = 3
# English function words are not indexed in descriptions: they are in most of them (`the`, `for`,
# `with`), so their shards would hold nearly every package and nobody searches for them. Words of
# the trade (`module`, `library`, `node`) are kept: people do search for them. npmjs.com drops no
# stop-word from names, and neither do we: these apply to descriptions only.
DESCRIPTION_STOP_WORDS = frozenset(
    "about above after again all also and any are aren because been before being below between both but "
    "can cannot could did does doing don down during each etc few for from further had has have having her "
    "here hers him his how into its itself just more most not now off once only other our ours out over own "
    "same she should some such than that the their theirs them then there these they this those through too "
    "under until upon very via was were what when where which while who whom why will with within without "
    "would yet you your yours".split()
)
_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")


def search_tokens(summary: Mapping[str, Any]) -> list[str]:
    """Words the site search finds a package by, in order: name parts, keywords, maintainers."""
    words: list[str] = _TOKEN_SPLIT.split(str(summary.get("name", "")).lower())
    for keyword in summary.get("keywords") or []:
        words.extend(_TOKEN_SPLIT.split(str(keyword).lower()))
    for person in summary.get("maintainers") or []:
        if isinstance(person, Mapping):
            words.extend(_TOKEN_SPLIT.split(str(person.get("name", "")).lower()))
    return list(dict.fromkeys(w for w in words if len(w) >= 2))


def description_words(summary: Mapping[str, Any]) -> list[str]:
    """The words of a package's description the site search finds it by, in order: three
    characters or more, not a stop-word, not already one of its `search_tokens`."""
    tokens = set(search_tokens(summary))
    words = _TOKEN_SPLIT.split(str(summary.get("description") or "").lower())
    return list(dict.fromkeys(w for w in words if len(w) >= DESCRIPTION_KEY_LENGTH and w not in DESCRIPTION_STOP_WORDS and w not in tokens))


def search_keys(summary: Mapping[str, Any]) -> list[str]:
    """The search shards a package is in: the first two characters of each of its tokens, then the
    first three of each of its description words, at most SEARCH_KEY_LIMIT of them (name parts
    come first, so a package is always found by its name; a long description's last words may
    find it only among the packages its other words fetch)."""
    keys = [token[:2] for token in search_tokens(summary)] + [word[:DESCRIPTION_KEY_LENGTH] for word in description_words(summary)]
    return list(dict.fromkeys(keys))[:SEARCH_KEY_LIMIT]


# Why a package matches a query, best first: the site's search box (site_template/static/site.js
# `why`) and the API's /-/v1/search (registry_gen.search) rank by this one list.
MATCH_REASONS = ("exact name", "name starts with", "word of the name", "keyword", "maintainer", "description word")


def _words(texts: list[str], shortest: int) -> list[str]:
    return [w for text in texts for w in _TOKEN_SPLIT.split(text.lower()) if len(w) >= shortest]


def match_rank(name: str, description: str, keywords: list[str], maintainers: list[str], text: str) -> int | None:
    """The index in MATCH_REASONS of the best reason the package matches the query `text`: the
    query is its exact name, its name starts with the query or with the query's first word of two
    characters or more (its lead), a word of its name, of a keyword, of a maintainer, or (a lead of
    DESCRIPTION_KEY_LENGTH characters or more) of its description starts with the lead. None when
    nothing of it starts with the lead (or the query has no lead)."""
    lead = next((w for w in _TOKEN_SPLIT.split(text.lower()) if len(w) >= 2), None)
    if lead is None:
        return None
    query, lower_name = text.strip().lower(), name.lower()
    if lower_name == query:
        return 0
    if lower_name.startswith(query) or lower_name.removeprefix("@").startswith(lead):
        return 1
    candidates = (_words([name], 2), _words(keywords, 2), _words(maintainers, 2))
    for rank, words in enumerate(candidates, 2):
        if any(w.startswith(lead) for w in words):
            return rank
    if len(lead) >= DESCRIPTION_KEY_LENGTH and any(w.startswith(lead) for w in _words([description], DESCRIPTION_KEY_LENGTH)):
        return 5
    return None
