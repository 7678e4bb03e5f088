"""The search leaves a full build's SQLite session holds in memory, to answer the neighbourhood of
a name in a shard (sqlite_listings._hood) by bisection instead of two or three SELECTs per package
and shard (12,523 over the real corpus, for 855 leaves).

A copy, never the only record: every insert and delete still goes to search_leaves at once, and a
count the session keeps waiting (SqliteSession._leaf_counts) is kept here too, so dropping it all
loses nothing. It is dropped when it would hold more than its bound of leaves (the shard asked last
is still held, whatever its size): memory stays flat at any size, and the shards asked after that
are loaded again one at a time.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable

from registry_gen.state.records import Leaf, LeafHood

ShardLoader = Callable[[str], Iterable[tuple[str, int]]]  # a shard's (bound, count) by bound


class HeldLeaves:
    """Bounds and counts of the leaves of the shards loaded so far (`complete`: of every shard, so
    a shard not held has no leaf)."""

    def __init__(self, rows: Iterable[tuple[str, str, int]], load: ShardLoader, *, at_most: int) -> None:
        self._load, self._at_most = load, at_most
        self._bounds: dict[str, list[str]] = {}
        self._counts: dict[tuple[str, str], int] = {}
        for key, bound, count in rows:  # by key and bound
            self._bounds.setdefault(key, []).append(bound)
            self._counts[(key, bound)] = count
        self.complete = True
        if len(self._counts) > at_most:
            self.drop()

    def drop(self) -> None:
        self._bounds, self._counts, self.complete = {}, {}, False

    def hood(self, key: str, name: str, *, leaving: bool) -> LeafHood:
        """As sqlite_listings._hood: the leaf whose bound is the greatest not past `name`, and
        where the name leaves the shard, that leaf's neighbours. (Python orders str by code
        point, as SQLite's BINARY collation orders their UTF-8 bytes.)"""
        bounds = self._shard(key)
        at = bisect.bisect_right(bounds, name) - 1
        if at < 0:
            return LeafHood(None, has_leaves=bool(bounds))
        leaf = self._leaf(key, bounds, at)
        if leaving:
            return LeafHood(leaf, self._leaf(key, bounds, at - 1), self._leaf(key, bounds, at + 1), True)
        return LeafHood(leaf, has_leaves=True)

    def _leaf(self, key: str, bounds: list[str], at: int) -> Leaf | None:
        return Leaf(bounds[at], self._counts[(key, bounds[at])]) if 0 <= at < len(bounds) else None

    def _shard(self, key: str) -> list[str]:
        bounds = self._bounds.get(key)
        if bounds is not None:
            return bounds
        bounds = []
        if not self.complete:
            rows = list(self._load(key))
            if len(self._counts) + len(rows) > self._at_most:
                self.drop()
            for bound, count in rows:
                bounds.append(bound)
                self._counts[(key, bound)] = count
        self._bounds[key] = bounds
        return bounds

    # -- the session's moves, mirrored (of a shard not held: nothing to mirror, it loads as stored)

    def inserted(self, key: str, bound: str, count: int) -> None:
        bounds = self._bounds.get(key) if not self.complete else self._bounds.setdefault(key, [])
        if bounds is None:
            return
        bisect.insort(bounds, bound)
        self._counts[(key, bound)] = count
        if len(self._counts) > self._at_most:
            self.drop()

    def counted(self, key: str, bound: str, count: int) -> None:
        if (key, bound) in self._counts:
            self._counts[(key, bound)] = count

    def deleted(self, key: str, bound: str) -> None:
        if self._counts.pop((key, bound), None) is not None:
            bounds = self._bounds[key]
            del bounds[bisect.bisect_left(bounds, bound)]
