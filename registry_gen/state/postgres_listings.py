"""The listing tables on PostgreSQL: what a build reads and writes of them while it holds the
registry-wide listings lock (registry_gen.state.postgres_cache), in as few statements as the SQL
allows. Each statement is a round trip every other instance's publish waits behind, so the
per-key and per-row loops of the portable SQL (sqlite_listings, one statement each: free on
SQLite) are one statement here, over arrays. Same rows, same decisions: only the round trips differ.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from registry_gen.state.records import Leaf, LeafHood, LeafOp, ListedAt, ListingMove, ListingPlace, PackageBefore
from registry_gen.state.sqlite_cache import BuildState

# The package's row, where it is listed and its shards: one statement.
_OWN_ROWS = (
    "SELECT p.record, p.versions, l.range_key,"
    " CASE WHEN l.name IS NULL THEN '{}'::text[] ELSE ARRAY(SELECT k.key FROM search_keys k WHERE k.name = p.name) END"
    " FROM packages p LEFT JOIN listings l ON l.name = p.name WHERE p.name = ?"
)
# For each shard key: the leaf with the greatest bound not after the name, the leaves on either side
# of that one, and whether the shard has any leaf (sqlite_listings._hood, for every key at once).
_HOODS = """
SELECT k.key, h.bound, h.count, b.bound, b.count, a.bound, a.count,
       h.bound IS NOT NULL OR EXISTS (SELECT 1 FROM search_leaves s WHERE s.key = k.key)
FROM unnest(?::text[]) AS k(key)
LEFT JOIN LATERAL (SELECT bound, count FROM search_leaves s WHERE s.key = k.key AND s.bound <= ? ORDER BY s.bound DESC LIMIT 1) h ON true
LEFT JOIN LATERAL (SELECT bound, count FROM search_leaves s WHERE s.key = k.key AND s.bound < h.bound ORDER BY s.bound DESC LIMIT 1) b ON true
LEFT JOIN LATERAL (SELECT bound, count FROM search_leaves s WHERE s.key = k.key AND s.bound > h.bound ORDER BY s.bound LIMIT 1) a ON true
"""
# The first leaves of several shards; the records of several leaves (sqlite_listings._leaf_range, per leaf).
_FIRST_LEAVES = (
    "SELECT k.key, s.bound FROM unnest(?::text[]) AS k(key)"
    " CROSS JOIN LATERAL (SELECT bound FROM search_leaves s WHERE s.key = k.key ORDER BY s.bound LIMIT ?) s ORDER BY 1, 2"
)
_LEAVES_ENTRIES = """
SELECT v.key, v.bound, l.search_entry FROM unnest(?::text[], ?::text[]) AS v(key, bound)
JOIN search_keys k ON k.key = v.key AND k.name >= v.bound
 AND NOT EXISTS (SELECT 1 FROM search_leaves s WHERE s.key = v.key AND s.bound > v.bound AND s.bound <= k.name)
JOIN listings l ON l.name = k.name
ORDER BY v.key, v.bound, k.name
"""
_NOT_READ: Any = object()


def _leaf(bound: str | None, count: int | None) -> Leaf | None:
    return None if bound is None else Leaf(bound, int(count or 0))


def summed_prefix_rows(rows: Iterable[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """A move's prefix rows with one row per prefix (a package moving between two keys under one
    prefix leaves and enters it: -1 and +1); prefixes whose count does not move are left out. One
    upsert cannot touch a row twice, the row-by-row SQL could."""
    deltas: dict[tuple[str, str], int] = defaultdict(int)
    for prefix, parent, delta in rows:
        deltas[(prefix, parent)] += delta
    return [(prefix, parent, delta) for (prefix, parent), delta in deltas.items() if delta]


class PgListings(BuildState):
    """Mixed into the PostgreSQL build session, before the portable SQL it overrides."""

    versions_before: dict[str, int | None]  # each package's version count as package_before read it
    # Each prefix whose count a move of this build raised: (lowest count before such a move, highest
    # after one). Counts move by one per move, so a range that split in this build has lowest <=
    # PAGE_SIZE < highest (build.indexes.split_ranges); read back from the upsert, no query of its own.
    grown: dict[str, tuple[int, int]]
    # The upserts' answers (prefix, count) with each move's deltas, read only when `prefix_growth`
    # asks: inside `writes_together` (under the listings lock), reading one at once would wait for it.
    growth_answers: list[tuple[Any, dict[str, int]]]

    def package_before(self, name: str, keys_after: Iterable[str]) -> PackageBefore:
        row = self.db.execute(_OWN_ROWS, (name,)).fetchone()
        self.versions_before[name] = int(row[1]) if row else None
        after = list(dict.fromkeys(keys_after))
        listed = ListedAt(row[2], frozenset(row[3])) if row and row[2] is not None else None
        shards = listed.shards if listed else frozenset()
        hoods = self._hoods(name, after + sorted(shards - set(after)), leaving=shards - set(after))
        links = frozenset(json.loads(row[0]).get("links", ())) if row else frozenset()
        return PackageBefore(links, listed, hoods)

    def _hoods(self, name: str, keys: Sequence[str], *, leaving: Iterable[str]) -> dict[str, LeafHood]:
        if not keys:
            return {}
        hoods = {}
        for key, bound, count, before, before_count, after, after_count, has_leaves in self.db.execute(_HOODS, (list(keys), name)):
            leaf = _leaf(bound, count)
            if key in leaving and leaf is not None:
                hoods[key] = LeafHood(leaf, _leaf(before, before_count), _leaf(after, after_count), True)
            else:
                hoods[key] = LeafHood(leaf, has_leaves=bool(has_leaves))
        return hoods

    def _count_package(self, name: str, *, versions_now: int | None) -> None:
        """As BuildState's, with the count package_before read (the row has not changed since: the
        same transaction, under the listings lock) instead of a second read."""
        before = self.versions_before.pop(name, _NOT_READ)
        if before is _NOT_READ:
            super()._count_package(name, versions_now=versions_now)
            return
        self._add_counters({"packages": (versions_now is not None) - (before is not None), "versions": (versions_now or 0) - (before or 0)})

    def _add_counters(self, deltas: dict[str, int]) -> None:
        moved = {key: delta for key, delta in deltas.items() if delta}
        if moved:
            self.db.execute(
                "INSERT INTO counters (key, value) SELECT * FROM unnest(?::text[], ?::bigint[])"
                " ON CONFLICT (key) DO UPDATE SET value = counters.value + excluded.value",
                (list(moved), list(moved.values())),
            )

    def _place_listing(self, name: str, listing: ListingPlace, summary: str) -> None:
        if not listing.listed:
            self.db.execute("DELETE FROM listings WHERE name = ?", (name,))
            return
        self.db.execute(
            "INSERT INTO listings (name, range_key, modified, summary, search_entry) VALUES (?, ?, ?, ?, ?) ON CONFLICT (name)"
            " DO UPDATE SET range_key = excluded.range_key, modified = excluded.modified, summary = excluded.summary,"
            " search_entry = excluded.search_entry",
            (name, listing.range_key, listing.modified, summary, listing.search_entry),
        )

    def set_settings(self, values: Mapping[str, str]) -> None:
        """Each of `values` written where it differs (a missing row reads as ""), in one statement
        (no read first: a round trip under the listings lock, where a build's end writes them)."""
        self.db.execute(
            "INSERT INTO settings (key, value) SELECT * FROM unnest(?::text[], ?::text[]) AS v (key, value)"
            " WHERE v.value <> '' OR EXISTS (SELECT 1 FROM settings s WHERE s.key = v.key) ON CONFLICT (key)"
            " DO UPDATE SET value = excluded.value WHERE settings.value IS DISTINCT FROM excluded.value",
            (list(values), list(values.values())),
        )

    def apply_listing_move(self, move: ListingMove) -> dict[str, str]:
        rows = summed_prefix_rows(move.prefix_rows)
        if rows:
            counts = self.db.execute(
                "INSERT INTO prefixes (prefix, parent, count) SELECT * FROM unnest(?::text[], ?::text[], ?::int[])"
                " ON CONFLICT (prefix) DO UPDATE SET count = prefixes.count + excluded.count RETURNING prefix, count",
                [list(column) for column in zip(*rows)],
            )
            self.growth_answers.append((counts, {prefix: delta for prefix, _, delta in rows}))
        emptied = [prefix for prefix, _, delta in rows if delta < 0]
        if emptied:
            self.db.execute("DELETE FROM prefixes WHERE prefix = ANY(?) AND count <= 0", (emptied,))
        if move.shards_gone:
            self.db.execute("DELETE FROM search_keys WHERE name = ? AND key = ANY(?)", (move.name, list(move.shards_gone)))
        if move.shards_now:
            self.db.execute(
                "INSERT INTO search_keys (key, name) SELECT unnest(?::text[]), ? ON CONFLICT DO NOTHING", (list(move.shards_now), move.name)
            )
        return self._apply_leaf_ops(move.leaf_ops)

    def _note_growth(self, counts: Mapping[str, int], deltas: Mapping[str, int]) -> None:
        for prefix, count in counts.items():
            if deltas[prefix] > 0:
                low, high = self.grown.get(prefix, (count - deltas[prefix], count))
                self.grown[prefix] = (min(low, count - deltas[prefix]), max(high, count))

    def prefix_growth(self) -> Mapping[str, tuple[int, int]]:
        for counts, deltas in self.growth_answers:
            self._note_growth(dict(counts.fetchall()), deltas)
        self.growth_answers.clear()
        return self.grown

    def _apply_leaf_ops(self, ops: Sequence[LeafOp]) -> dict[str, str]:
        """The counts first, in one statement: in a move, a leaf's count op comes before the split or
        join of that leaf (registry_gen.build.indexes), and inserts and deletes are of other keys."""
        counts = [op for op in ops if op.kind == "count"]
        if counts:
            self.db.execute(
                "UPDATE search_leaves s SET count = v.count FROM unnest(?::text[], ?::text[], ?::int[]) AS v(key, bound, count)"
                " WHERE s.key = v.key AND s.bound = v.bound",
                ([op.key for op in counts], [op.bound for op in counts], [op.count for op in counts]),
            )
        splits = {}
        for op in ops:
            if op.kind == "split":
                splits[op.key] = self._split_leaf(op.key, op.bound)
            elif op.kind != "count":
                self._apply_leaf_op(op)
        return splits

    def first_leaves(self, keys: Iterable[str], *, at_most: int) -> dict[str, list[str]]:
        found: dict[str, list[str]] = defaultdict(list)
        wanted = list(keys)
        for key, bound in self.db.execute(_FIRST_LEAVES, (wanted, at_most)) if wanted else ():
            found[key].append(bound)
        return dict(found)

    def leaves_entries(self, leaves: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[bytes]]:
        wanted = list(leaves)
        found: dict[tuple[str, str], list[bytes]] = {leaf: [] for leaf in wanted}
        if wanted:
            for key, bound, entry in self.db.execute(_LEAVES_ENTRIES, ([k for k, _ in wanted], [b for _, b in wanted])):
                found[(key, bound)].append(entry)
        return found
