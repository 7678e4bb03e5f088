"""The change feed, `GET /-/changes?since=SEQ&limit=N` (pure): the state's change journal as pages,
CouchDB `_changes` style, for followers, mirrors and caches.

A page is `{"results": [...], "last_seq": N}`. Each result is one journal entry: `seq`, `time`,
`kind` (npm's hook event names: `package:publish`, `package:dist-tag`...), `name`, `versions` and
`detail` (tags, owners' usernames, a deprecation message; never the actor, an account id or an
email). A follower asks again with `since=last_seq`; `last_seq` equal to `since` means it is
caught up. Entries of a package the caller may not read (registry.yaml `packages:`) are skipped
but still move `last_seq`, so a follower never re-reads them; a page scans at most MAX_SCAN
entries, so a page may be empty while `last_seq` moves on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from registry_gen.publish import BadRequest
from registry_gen.state.ledger import JournalEntry

DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000
MAX_SCAN: Final = 10_000  # entries one page may read past unreadable ones (bounds a request's cost)
# what reads the journal: the entries after a sequence number, in order, at most that many
JournalReader = Callable[[int, int], list[JournalEntry]]


def feed_query(query: Mapping[str, str | None]) -> tuple[int, int]:
    """(since, limit) of a request's query; BadRequest (400) naming the parameter otherwise."""
    since = _count(query.get("since"), "since", default=0, low=0)
    limit = _count(query.get("limit"), "limit", default=DEFAULT_LIMIT, low=1)
    return since, min(limit, MAX_LIMIT)


def _count(raw: str | None, field: str, *, default: int, low: int) -> int:
    if raw is None or raw == "":
        return default
    text = raw.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 18 or int(text) < low:
        raise BadRequest(f"{field} must be a whole number of at least {low} (got {raw[:40]!r})")
    return int(text)


def feed_entry(entry: JournalEntry) -> dict[str, Any]:
    """One journal entry as the feed shows it (no actor, no account id)."""
    return {"seq": entry.seq, "time": entry.time, "kind": entry.kind, "name": entry.package,
            "versions": list(entry.versions), "detail": dict(entry.detail)}  # fmt: skip


def feed_page(read: JournalReader, since: int, limit: int, readable: Callable[[str], bool]) -> dict[str, Any]:
    """The page after `since`: up to `limit` entries `readable` allows, reading at most MAX_SCAN."""
    results: list[dict[str, Any]] = []
    last_seq, scanned = since, 0
    while len(results) < limit and scanned < MAX_SCAN:
        wanted = min(limit, MAX_SCAN - scanned)
        batch = read(last_seq, wanted)
        for entry in batch:
            last_seq, scanned = entry.seq, scanned + 1
            if readable(entry.package):
                results.append(feed_entry(entry))
                if len(results) == limit:
                    break
        if len(batch) < wanted:
            break  # the journal has no more
    return {"results": results, "last_seq": last_seq}
