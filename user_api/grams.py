"""The short-keyword index: every distinct 1- and 2-character substring ("gram") of a live user's
searchable fields, so a 1-2 character search reads one index range instead of scanning the table.

Rows are (gram, field, user_pk), field one of: PREFIX, a gram the username starts with (those users
come first, from the username index: the ordered part of a search skips them without a join);
NAME, any other gram of the username or the full name; EMAIL, a gram found only in the email (so
non-admins, who never match on email, never read it). Each is one index range in user_pk order.
A second table, user_gram_counts, holds how many rows each (gram, field) has, so the capped total
of a short search and its username-prefix count are one row read each, not a count of up to 10,000
index entries. Both stores fold case the same way, here in Python: each character by str.lower()
when that gives one character (so 'É' matches 'é', as the trigram index of longer keywords folds),
else unchanged.

A store may index and count longer grams (PostgreSQL: rows up to INDEXED_GRAM, counts up to
COUNTED_GRAM, see store_postgres.py): a 3-character keyword is then one range and one count row as
a short one is, and a 4-5 character one takes its total from its count row and walks the rows of
its rarest 3-character gram for its page (4-5 character rows would double the table again).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, Final

NAME: Final = 0
EMAIL: Final = 1
PREFIX: Final = 2
MAX_GRAM: Final = 2  # keywords of this length or shorter read the gram index (user_grams rows)
INDEXED_GRAM: Final = 3  # the longest gram a store may index as rows (PostgreSQL does; SQLite MAX_GRAM)
COUNTED_GRAM: Final = 5  # the longest gram a store may count (PostgreSQL does; SQLite counts MAX_GRAM)


def fold(text: str) -> str:
    """Lower-case character by character, never changing the length (positions stay substrings)."""
    return "".join(lowered if len(lowered := char.lower()) == 1 else char for char in text)


def grams(text: str | None, longest: int = MAX_GRAM) -> set[str]:
    """Every distinct folded substring of 1 to `longest` characters."""
    if not text:
        return set()
    folded = fold(text)
    return {folded[i:i + size] for size in range(1, longest + 1) for i in range(len(folded) - size + 1)}


def user_grams(
    pk: int, username: str, full_name: str | None, email: str | None, longest: int = MAX_GRAM
) -> Iterator[tuple[str, int, int]]:
    """(gram, field, pk) rows of one live user; an email gram also in the name is a name row only."""
    names = grams(username, longest) | grams(full_name, longest)
    start = fold(username)
    for gram in names:
        yield gram, PREFIX if start.startswith(gram) else NAME, pk
    for gram in grams(email, longest) - names:
        yield gram, EMAIL, pk


def gram_rows(users: Iterable[tuple[Any, ...]], longest: int = MAX_GRAM) -> Iterator[tuple[str, int, int]]:
    """Rows for (pk, username, full_name, email) tuples: the backfill of a migration or bulk load."""
    for pk, username, full_name, email in users:
        yield from user_grams(int(pk), username, full_name, email, longest)


def insert_statement(rows: list[tuple[str, int, int]]) -> tuple[str, list[Any]]:
    """One multi-row INSERT (`?` placeholders) for a single user's rows."""
    values = ", ".join("(?, ?, ?)" for _ in rows)
    return f"INSERT INTO user_grams (gram, field, user_pk) VALUES {values}", [v for row in rows for v in row]


# Adds a batch of (gram, field, delta) to the counts; `?` placeholders (the PostgreSQL Tx maps them).
UPSERT_COUNTS: Final = (
    "INSERT INTO user_gram_counts (gram, field, n) VALUES (?, ?, ?)"
    " ON CONFLICT (gram, field) DO UPDATE SET n = user_gram_counts.n + excluded.n"
)
# The whole count table from the gram table (the schema-4 migration of a database that has grams).
RECOUNT: Final = (
    "INSERT INTO user_gram_counts (gram, field, n) SELECT gram, field, count(*) FROM user_grams GROUP BY gram, field"
)


def counted(
    rows: Iterable[tuple[str, int, int]], counts: Counter[tuple[str, int]], indexed: range
) -> Iterator[tuple[str, int, int]]:
    """Counts every row per (gram, field) (a bulk load's counts) and passes on those whose gram's
    length is in `indexed` (user_grams rows to write: longer grams are counted only)."""
    for row in rows:
        counts[row[0], row[1]] += 1
        if len(row[0]) in indexed:
            yield row


def count_deltas(old: set[tuple[str, int]], new: set[tuple[str, int]]) -> list[tuple[str, int, int]]:
    """(gram, field, +1/-1) taking a user's counts from `old` to `new`, in key order: two writers
    then lock count rows in the same order, so PostgreSQL never deadlocks them against each other."""
    return sorted([(gram, field, -1) for gram, field in old - new] + [(gram, field, 1) for gram, field in new - old])


def upsert_counts_statement(deltas: list[tuple[str, int, int]]) -> tuple[str, list[Any]]:
    """One multi-row upsert (`?` placeholders) of one user's count changes."""
    values = ", ".join("(?, ?, ?)" for _ in deltas)
    head, tail = UPSERT_COUNTS.split(" VALUES (?, ?, ?)")
    return f"{head} VALUES {values}{tail}", [v for row in deltas for v in row]
