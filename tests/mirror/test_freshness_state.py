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


def test_a_damaged_freshness_file_is_kept_aside_and_the_mirror_starts_afresh(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The freshness state is a cache: a file that is no database (a disk error, a stray copy) is
    not a reason for a 500 on every proxied read. It is set aside, named in the log, and a new one
    is used, by every thread (one of them sets it aside)."""
    state_file = tmp_path / "mirror" / "state.sqlite3"
    state_file.parent.mkdir()
    junk = b"this is not a database\n" * 512
    state_file.write_bytes(junk)
    seen: list[object] = []
    failures: list[BaseException] = []
    state = MirrorState(tmp_path)
    start = threading.Barrier(4)

    def read() -> None:
        try:
            start.wait()
            seen.append(state.get("left-pad"))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            failures.append(exc)

    with caplog.at_level("WARNING"):
        threads = [threading.Thread(target=read) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert failures == [] and seen == [None] * 4
    aside = [p for p in state_file.parent.iterdir() if p.name.startswith("state.sqlite3.damaged-")]
    assert [p.read_bytes() for p in aside] == [junk]  # kept once, byte for byte
    assert sqlite3.connect(state_file).execute("SELECT count(*) FROM packages").fetchone() == (0,)
    assert [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()] == [
        f"{state_file} is damaged (file is not a database); it is kept as {aside[0].name} and the mirror's freshness state starts afresh"
    ]
