"""Large answers made in memory, handed to the server as a file wrapper instead of a body list.

waitress copies a body the app returns as bytes into the connection's output buffer, and a buffer
over `outbuf_overflow` (1 MB) is moved to a temporary file and read back from it to be sent: a
mirror's full document of a few MB cost a temporary file, its writes and its reads. Handed over as
`wsgi.file_wrapper` around the bytes themselves, the answer is sent from them (no copy, no file).

The price is memory: such an answer stays in memory until the client has read it (a slow client
keeps it after the request's thread has moved on). So the bytes held this way are bounded for the
whole process (`HELD_ANSWER_BUDGET`); an answer that would pass the bound goes the usual way.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterable
from typing import Any, Final

# Answers at most this large are sent as a body list (waitress keeps them in memory anyway).
SPOOL_FREE_BELOW: Final = 1024 * 1024
# Bytes of answers held in memory until their clients read them, across all connections.
HELD_ANSWER_BUDGET: Final = 64 * 1024 * 1024


class AnswerBudget:
    """How many bytes of held answers the process may still take."""

    def __init__(self, limit: int):
        self._lock = threading.Lock()
        self._left = limit

    def take(self, size: int) -> bool:
        with self._lock:
            if size > self._left:
                return False
            self._left -= size
            return True

    def give(self, size: int) -> None:
        with self._lock:
            self._left += size

    @property
    def left(self) -> int:
        return self._left


class _HeldAnswer(io.BytesIO):
    """The answer's bytes as a file; closing it (the server does, once sent or dropped) gives its
    size back to the budget."""

    def __init__(self, data: bytes, budget: AnswerBudget):
        super().__init__(data)  # shares `data`'s buffer: no copy until written to (never)
        self._budget = budget
        self._size = len(data)

    def close(self) -> None:
        if not self.closed:
            self._budget.give(self._size)
        super().close()


_BUDGET: Final = AnswerBudget(HELD_ANSWER_BUDGET)


def answer_body(data: bytes, environ: dict[str, Any], budget: AnswerBudget = _BUDGET) -> Iterable[bytes]:
    """`data` as the WSGI body: a file wrapper over it when it is large, the server offers one and
    the budget has room; else `[data]`."""
    wrapper = environ.get("wsgi.file_wrapper")
    if len(data) < SPOOL_FREE_BELOW or wrapper is None or not budget.take(len(data)):
        return [data]
    return wrapper(_HeldAnswer(data, budget), 64 * 1024)  # type: ignore[no-any-return]
