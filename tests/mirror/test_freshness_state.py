"""Opening a new SQLite file from several threads at once: the mirror's freshness state (its
start-up sweep and the first read race for it in every new `serve`) and the state's own
databases. SQLite answers the switch of a new file to WAL with "database is locked" at once,
without asking its busy handler: CI saw that as a 500 on a mirror's first read."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from registry_gen.state.mirror_freshness import MirrorState
from registry_gen.state.sqlite_base import connect

ROUNDS = 600  # about 1 in 100 rounds lost the race before the fix: red at once, ~10 s
THREADS = 12


def _openers() -> dict[str, Callable[[Path], object]]:
    return {
        "mirror freshness": lambda folder: MirrorState(folder).get("left-pad"),
        "state database": lambda folder: connect(folder / "state.sqlite3", synchronous="NORMAL").close(),
    }


@pytest.mark.parametrize("opener", sorted(_openers()))
def test_threads_opening_a_new_database_together_all_get_it(opener: str) -> None:
    open_one = _openers()[opener]
    failures: list[BaseException] = []
    # In memory (tmpfs): the race is in SQLite's locks, and a disk's fsyncs only make rounds slow.
    with tempfile.TemporaryDirectory(dir="/dev/shm") as scratch:
        for round_ in range(ROUNDS):
            folder = Path(scratch) / str(round_)
            start = threading.Barrier(THREADS)

            def one() -> None:
                start.wait()
                try:
                    open_one(folder)
                except sqlite3.Error as exc:
                    failures.append(exc)

            threads = [threading.Thread(target=one) for _ in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not failures, f"round {round_}: {failures[0]!r}"
