"""The search leaves a full build's SQLite session holds (state.sqlite_leaves): each package's leaf
neighbourhood answered from memory, the same as the table answers it, through every insert, count
and delete the session applies, within its bound of leaves or past it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from registry_gen.state import sqlite_cache
from registry_gen.state.sqlite_cache import SqliteSession
from registry_gen.state.sqlite_listings import ListingTables

# Bounds past ASCII too: Python orders str by code point, SQLite by UTF-8 bytes, the same order.
LETTERS = ["", "a", "b", "m", "z", "é", "中", "\U0001f600"]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(0, 3)))


def _move(session: SqliteSession, rng: random.Random, leaves: set[tuple[str, str]]) -> None:
    """One random insert, count or delete of a leaf, as the session's listing moves apply them."""
    key, bound = rng.choice("pqr"), _word(rng)
    if (key, bound) not in leaves:
        session._insert_leaf(key, bound, rng.randint(1, 200))
        leaves.add((key, bound))
    elif rng.random() < 0.5:
        session._set_leaf_count(key, bound, rng.randint(1, 200))
    else:
        session._delete_leaf(key, bound)
        leaves.discard((key, bound))


@pytest.mark.parametrize("at_most", [4, 40, 65_536])  # past its bound: dropped, then loaded a shard at a time
def test_a_full_build_s_held_leaves_answer_as_the_table_without_asking_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_most: int) -> None:
    monkeypatch.setattr(sqlite_cache, "MOVES_WAITING_AT_MOST", at_most)
    rng = random.Random(31)
    session = SqliteSession(tmp_path / "state.sqlite3")
    try:
        session.begin()
        leaves: set[tuple[str, str]] = set()
        for _ in range(12):  # some leaves stored before the build starts
            _move(session, rng, leaves)
        session.start_full_build()
        asked: list[str] = []
        session.db.set_trace_callback(asked.append)
        for _ in range(400):
            _move(session, rng, leaves)
            key, name, leaving = rng.choice("pqrs"), _word(rng), rng.random() < 0.5
            asked.clear()
            held = session._hood(key, name, leaving=leaving)
            loads = list(asked)
            assert held == ListingTables._hood(session, key, name, leaving=leaving), (key, name, leaving)
            # Past its bound a shard is loaded whole, at most once until the next drop; within it, never.
            assert all(sql.startswith(f"SELECT bound, count FROM search_leaves WHERE key = '{key}' ORDER BY bound") for sql in loads)
            assert len(loads) <= (0 if at_most > 1000 else 1)
    finally:
        session.close()
