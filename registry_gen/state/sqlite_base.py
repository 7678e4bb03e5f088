"""What every SQLite database of the state shares: how a connection is opened, how results are read."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any


def first_column(rows: sqlite3.Cursor, batch: int) -> Iterator[Any]:
    """A query's first column, fetched `batch` rows at a time: never the whole result in the heap."""
    while block := rows.fetchmany(batch):
        yield from (row[0] for row in block)
