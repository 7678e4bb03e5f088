"""What the mirror's concurrent requests share (I/O-free, thread-safe): one upstream request per
package however many ask at once (`Flights`), the uplinks' health (`Health`: down for
`fail_timeout` after `max_fails` failures in a row), and the landings that wait for the write
lock, committed together with one build (`GroupCommit`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Flight(Generic[T]):
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class Flights:
    """`run(key, work)`: the first caller for `key` runs `work`; callers arriving meanwhile wait
    for its outcome (its result, or its exception) instead of running it again."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[Hashable, _Flight[Any]] = {}

    def run(self, key: Hashable, work: Callable[[], T]) -> T:
        with self.lock:
            flight = self.running.get(key)
            leader = flight is None
            if flight is None:
                flight = self.running[key] = _Flight()
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.result  # type: ignore[no-any-return]
        try:
            flight.result = work()
            return flight.result  # type: ignore[no-any-return]
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self.lock:
                del self.running[key]
            flight.done.set()


class Health:
    """Verdaccio's circuit breaker per uplink: `max_fails` failures in a row mark it down for
    `fail_timeout` seconds, during which no request goes to it (the mirror serves what it holds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.fails: dict[str, int] = {}
        self.down_until: dict[str, float] = {}

    def is_down(self, uplink: str) -> bool:
        with self.lock:
            return self.clock() < self.down_until.get(uplink, 0.0)

    def failed(self, uplink: str, max_fails: int, fail_timeout: float) -> None:
        with self.lock:
            self.fails[uplink] = self.fails.get(uplink, 0) + 1
            if self.fails[uplink] >= max(max_fails, 1):
                self.down_until[uplink] = self.clock() + fail_timeout
                self.fails[uplink] = 0

    def succeeded(self, uplink: str) -> None:
        with self.lock:
            self.fails.pop(uplink, None)
            self.down_until.pop(uplink, None)


@dataclass
class _Landing:
    write: Callable[[Any], list[str]]
    done: bool = False
    keys: list[str] = field(default_factory=list)
    error: BaseException | None = None


class GroupCommit:
    """Landings that arrive while one commits wait and then go together: their writes run one after
    the other under the write lock, and one build covers them all (`commit(writes)` does both).
    A rebuild per tarball would serialise a cold install behind ~0.2 s builds; grouped, the
    build's fixed cost is shared by whatever arrived meanwhile. Whoever finds no commit running
    commits the waiting batch, its own landing in it, and returns."""

    def __init__(self, commit: Callable[[Callable[[Any], list[str]]], object]) -> None:
        self.commit = commit
        self.ready = threading.Condition()
        self.waiting: list[_Landing] = []
        self.busy = False

    def land(self, write: Callable[[Any], list[str]]) -> list[str]:
        """Runs `write(storage)` under the write lock (with others), rebuilds; returns its keys."""
        landing = _Landing(write)
        with self.ready:
            self.waiting.append(landing)
            while self.busy and not landing.done:
                self.ready.wait()
            if not landing.done:
                self.busy = True
                batch, self.waiting = self.waiting, []
        if not landing.done:
            self._commit(batch)
        if landing.error is not None:
            raise landing.error
        return landing.keys

    def _commit(self, batch: list[_Landing]) -> None:
        try:
            self.commit(lambda storage: _run_all(batch, storage))
        except BaseException as exc:  # the build failed: every landing of the batch says so
            for landing in batch:
                landing.error = landing.error or exc
        with self.ready:
            for landing in batch:
                landing.done = True
            self.busy = False
            self.ready.notify_all()


def _run_all(batch: list[_Landing], storage: Any) -> list[str]:
    keys: list[str] = []
    for landing in batch:
        try:
            landing.keys = landing.write(storage)
            keys += landing.keys
        except Exception as exc:  # noqa: BLE001 - one landing's refusal is its own answer
            landing.error = exc
    return keys
