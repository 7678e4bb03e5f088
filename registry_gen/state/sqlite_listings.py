"""The listing tables of the SQLite cache: where each listed package shows (browse key, search
shards), the package count of every browse prefix, and each search shard's leaves.

Storage only: which leaf splits or joins, and which pages a change rewrites, is decided by
registry_gen.build.indexes; this applies its moves and answers what a page shows. Browse keys hold
a-z, 0-9 and "-" only, all below U+007F: [prefix, prefix + U+007F) is exactly the keys starting
with prefix, one range of the (range_key, name) index.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from registry_gen.state.records import BrowseInputs, Leaf, LeafHood, LeafOp, ListedAt, ListingMove
from registry_gen.state.sqlite_base import first_column


class ListingTables:
    """Mixed into the cache's build session, which owns `db` (one transaction per build)."""

    db: sqlite3.Connection

    # -- moves

    def listing_neighbourhood(self, name: str, keys_after: Iterable[str]) -> tuple[ListedAt | None, dict[str, LeafHood]]:
        """Where `name` is listed now, and the leaf around it in each shard it is or will be in
        (with the leaf's neighbours where it leaves a shard, which a join needs)."""
        row = self.db.execute("SELECT range_key FROM listings WHERE name = ?", (name,)).fetchone()
        shards = frozenset(k for (k,) in self.db.execute("SELECT key FROM search_keys WHERE name = ?", (name,))) if row else frozenset()
        before = ListedAt(row[0], shards) if row else None
        after = set(keys_after)
        hoods = {key: self._hood(key, name, leaving=key not in after) for key in shards | after}
        return before, hoods

    # -- where a move's writes go: straight to the tables here; the SQLite build session keeps
    # them waiting in memory (sqlite_cache.SqliteSession), the reads below asking it first

    def _move_prefix_counts(self, rows: Sequence[tuple[str, str, int]]) -> None:
        self.db.executemany(
            "INSERT INTO prefixes (prefix, parent, count) VALUES (?, ?, ?)"
            " ON CONFLICT (prefix) DO UPDATE SET count = prefixes.count + excluded.count",
            rows,
        )
        self.db.executemany("DELETE FROM prefixes WHERE prefix = ? AND count <= 0", [(r[0],) for r in rows if r[2] < 0])

    def _set_leaf_count(self, key: str, bound: str, count: int) -> None:
        self.db.execute("UPDATE search_leaves SET count = ? WHERE key = ? AND bound = ?", (count, key, bound))

    def _insert_leaf(self, key: str, bound: str, count: int) -> None:
        self.db.execute("INSERT INTO search_leaves (key, bound, count) VALUES (?, ?, ?)", (key, bound, count))

    def _delete_leaf(self, key: str, bound: str) -> None:
        self.db.execute("DELETE FROM search_leaves WHERE key = ? AND bound = ?", (key, bound))

    def _leaf_count(self, key: str, bound: str, stored: int) -> int:
        """A leaf's count, `stored` as its row holds it."""
        return stored

    def _prefixes_read(self) -> None:
        """Called before the prefixes are read."""

    def _hood(self, key: str, name: str, *, leaving: bool) -> LeafHood:
        leaf = self._leaf(key, "bound <= ? ORDER BY bound DESC", name)
        if leaving and leaf is not None:
            return LeafHood(leaf, self._leaf(key, "bound < ? ORDER BY bound DESC", leaf.bound), self._leaf(key, "bound > ? ORDER BY bound", leaf.bound), True)
        has_leaves = leaf is not None or self.db.execute("SELECT 1 FROM search_leaves WHERE key = ? LIMIT 1", (key,)).fetchone() is not None
        return LeafHood(leaf, has_leaves=has_leaves)

    def _leaf(self, key: str, where: str, value: str) -> Leaf | None:
        # `where` is one of the three literal clauses of _hood, never outside text.
        row = self.db.execute(f"SELECT bound, count FROM search_leaves WHERE key = ? AND {where} LIMIT 1", (key, value)).fetchone()
        return Leaf(row[0], int(self._leaf_count(key, row[0], row[1]))) if row else None

    def apply_listing_move(self, move: ListingMove) -> dict[str, str]:
        """Applies a move decided by the build; returns the bound each split leaf's new half starts at."""
        self._move_prefix_counts(move.prefix_rows)
        self.db.executemany("DELETE FROM search_keys WHERE key = ? AND name = ?", ((k, move.name) for k in move.shards_gone))
        self.db.executemany("INSERT INTO search_keys (key, name) VALUES (?, ?) ON CONFLICT DO NOTHING", ((k, move.name) for k in move.shards_now))
        splits = {}
        for op in move.leaf_ops:
            if op.kind == "split":
                splits[op.key] = self._split_leaf(op.key, op.bound)
            else:
                self._apply_leaf_op(op)
        return splits

    def _apply_leaf_op(self, op: LeafOp) -> None:
        if op.kind == "insert":
            self._insert_leaf(op.key, op.bound, op.count)
        elif op.kind == "count":
            self._set_leaf_count(op.key, op.bound, op.count)
        elif op.kind == "delete":
            self._delete_leaf(op.key, op.bound)
        elif op.kind == "join":
            self._delete_leaf(op.key, op.other)
            self._set_leaf_count(op.key, op.bound, op.count)
        else:
            raise ValueError(f"not a leaf operation: {op.kind}")

    def _split_leaf(self, key: str, bound: str) -> str:
        """Cuts a leaf at its middle name; returns that name, the new leaf's bound."""
        names = self.leaf_names(key, bound)
        middle = names[len(names) // 2]
        self._set_leaf_count(key, bound, len(names) // 2)
        self._insert_leaf(key, middle, len(names) - len(names) // 2)
        return middle

    # -- what the listing documents show

    def browse_inputs(self, prefix: str, page_size: int, total: int | None = None) -> BrowseInputs:
        """`total`: the prefix's count when the caller read it in this transaction (`prefix_counts`)."""
        total = self._prefix_count(prefix) if total is None else total
        if not total:
            return BrowseInputs(0, (), ())
        split = total > page_size
        children = []
        for child, count in self.prefix_children(prefix) if split else []:
            first, last = self._key_bounds(child) if count > page_size else ("", "")
            children.append((child, count, first, last))
        return BrowseInputs(total, tuple(children), tuple(self._prefix_summaries(prefix, exact=split)))

    def prefix_counts(self, key: str) -> dict[str, int]:
        """The listed-package count of every prefix of browse key `key` (two characters or more)."""
        self._prefixes_read()
        prefixes = [key[:n] for n in range(2, len(key) + 1)]
        marks = ", ".join("?" for _ in prefixes)
        return {p: int(c) for p, c in self.db.execute(f"SELECT prefix, count FROM prefixes WHERE prefix IN ({marks})", prefixes)}

    def _prefix_count(self, prefix: str) -> int:
        self._prefixes_read()
        row = self.db.execute("SELECT count FROM prefixes WHERE prefix = ?", (prefix,)).fetchone()
        return int(row[0]) if row else 0

    def _prefix_summaries(self, prefix: str, *, exact: bool = False) -> list[dict[str, Any]]:
        """Listed packages whose browse key starts with (`exact`: is) `prefix`, by key and name."""
        if exact:
            sql, args = "SELECT summary FROM listings WHERE range_key = ? ORDER BY name", (prefix,)
        else:
            sql = "SELECT summary FROM listings WHERE range_key >= ? AND range_key < ? ORDER BY range_key, name"
            args = (prefix, prefix + "\x7f")
        return [json.loads(summary) for (summary,) in self.db.execute(sql, args)]

    def _key_bounds(self, prefix: str) -> tuple[str, str]:
        """The smallest and the greatest browse key of the listed packages under `prefix` ("" if none)."""
        sql = "SELECT range_key FROM listings WHERE range_key >= ? AND range_key < ? ORDER BY range_key {} LIMIT 1"
        first, last = (self.db.execute(sql.format(order), (prefix, prefix + "\x7f")).fetchone() for order in ("ASC", "DESC"))
        return (first[0], last[0]) if first and last else ("", "")

    def prefix_children(self, prefix: str) -> list[tuple[str, int]]:
        """The one-character-longer prefixes under `prefix` ("": the two-character roots), counted."""
        self._prefixes_read()
        rows = self.db.execute("SELECT prefix, count FROM prefixes WHERE parent = ? ORDER BY prefix", (prefix,))
        return [(k, int(c)) for k, c in rows]

    def front_page_inputs(self, recent: int) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
        """The `recent` latest changed listed packages, and the two-character ranges with their counts."""
        rows = self.db.execute("SELECT summary FROM listings ORDER BY modified DESC, name DESC LIMIT ?", (recent,))
        return [json.loads(summary) for (summary,) in rows], self.prefix_children("")

    def listed_ranges(self) -> set[str]:
        return {k for k, _ in self.prefix_children("")}

    def listed_shards(self) -> set[str]:
        return {k for (k,) in self.db.execute("SELECT DISTINCT key FROM search_leaves")}

    def existing_leaves(self, key: str, bounds: Iterable[str]) -> set[str]:
        """Which of `bounds` are still leaves of shard `key`."""
        query = "SELECT 1 FROM search_leaves WHERE key = ? AND bound = ?"
        return {bound for bound in bounds if self.db.execute(query, (key, bound)).fetchone() is not None}

    def shard_leaves(self, key: str, *, at_most: int | None = None) -> list[str]:
        """The bounds of shard `key`'s leaves, in name order (the first `at_most`: cheap whatever its size)."""
        limit = "" if at_most is None else f" LIMIT {int(at_most)}"
        return [bound for (bound,) in self.db.execute(f"SELECT bound FROM search_leaves WHERE key = ? ORDER BY bound{limit}", (key,))]

    def first_leaves(self, keys: Iterable[str], *, at_most: int) -> dict[str, list[str]]:
        """shard_leaves(key, at_most=at_most) of each of `keys` that has leaves."""
        found = {key: self.shard_leaves(key, at_most=at_most) for key in keys}
        return {key: bounds for key, bounds in found.items() if bounds}

    def leaves_entries(self, leaves: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[bytes]]:
        """leaf_entries of each (shard, bound) of `leaves`."""
        return {(key, bound): self.leaf_entries(key, bound) for key, bound in leaves}

    def _leaf_range(self, key: str, bound: str) -> tuple[str, tuple[str, ...]]:
        """The WHERE clause (on search_keys as k) and its arguments for the names of one leaf: from
        its bound up to the next leaf's, asked within the same statement (a round trip less per
        leaf on PostgreSQL, where a publish writes its shards under the listings lock)."""
        following = "NOT EXISTS (SELECT 1 FROM search_leaves s WHERE s.key = ? AND s.bound > ? AND s.bound <= k.name)"
        return f"k.key = ? AND k.name >= ? AND {following}", (key, bound, key, bound)

    def leaf_names(self, key: str, bound: str) -> list[str]:
        where, args = self._leaf_range(key, bound)
        return [name for (name,) in self.db.execute(f"SELECT k.name FROM search_keys k WHERE {where} ORDER BY k.name", args)]

    def leaf_entries(self, key: str, bound: str) -> list[bytes]:
        """The site-search records of one leaf of shard `key` (`bound`: its first name), by name."""
        where, args = self._leaf_range(key, bound)
        rows = self.db.execute(
            f"SELECT l.search_entry FROM search_keys k JOIN listings l ON l.name = k.name WHERE {where} ORDER BY k.name", args
        )
        return [entry for (entry,) in rows]

    # -- the whole documents

    def whole_document_stamp(self) -> str:
        """-/all's `_updated` and -/search.json's `time`: the latest change of a listed package."""
        (stamp,) = self.db.execute("SELECT MAX(modified) FROM listings").fetchone()  # '' only if all are
        return stamp or "1970-01-01T00:00:00.000Z"

    def whole_document_fragments(self, column: str, batch: int = 1000) -> Iterator[bytes]:
        """Every listed package's piece of -/all (`column` all_fragment) or of -/v1/search
        (search_fragment), by name, read a batch at a time: never all of them at once."""
        if column not in ("all_fragment", "search_fragment"):
            raise ValueError(f"not a fragment column: {column}")
        rows = self.db.execute(f"SELECT {column} FROM packages WHERE listed ORDER BY name")  # the column name is one of two, checked above
        return first_column(rows, batch)
