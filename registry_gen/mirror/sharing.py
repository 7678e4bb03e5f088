"""What the mirror's concurrent requests share (thread-safe): one upstream request per package
however many ask at once (`Flights`), the uplinks' health (`Health`: down for `fail_timeout`
after `max_fails` failures in a row), and the landings, committed in batches with one build each
by a background thread (`LandingQueue`)."""

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
class Landing:
    write: Callable[[Any], list[str]]
    done: Callable[[BaseException | None], None] | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    keys: list[str] = field(default_factory=list)
    error: BaseException | None = None

    def wait(self) -> list[str]:
        """The keys it wrote once it is built, or the reason it was not."""
        self.finished.wait()
        if self.error is not None:
            raise self.error
        return self.keys


class LandingQueue:
    """Landings go to content/ at once and into the tree a little later, in one build for many.

    One background thread takes the landings that wait, runs their writes one after the other
    under the write lock (`store`: `WriteService.store_batch`), then builds what they wrote
    (`build`: `WriteService.land`) once the queue has been quiet for `quiet` seconds, its oldest
    unbuilt landing is `longest` seconds old, or `most` wait: a build per tarball (0.2-0.6 s each)
    would serialise a cold install behind them, and one build for the whole install costs a
    fraction of their sum. Requests are answered from what they fetched meanwhile (the service's
    `Pending`); a landing's `done` runs once it is built, and `wait()` returns then.

    `flush()` builds everything now and returns when it is done (`registry-gen mirror`, tests)."""

    def __init__(
        self, store: Callable[[Callable[[Any], list[str]]], list[str]], build: Callable[[Callable[[Any], list[str]]], object],
        *, quiet: float = 5.0, longest: float = 60.0, most: int = 2000,
    ) -> None:  # fmt: skip
        self.store, self.build = store, build
        self.quiet, self.longest, self.most = quiet, longest, most
        self.ready = threading.Condition()
        self.waiting: list[Landing] = []
        self.unbuilt: list[Landing] = []
        self.last_submit = self.first_unbuilt = 0.0
        self.flushing = 0
        self.working = 0  # landings taken from the lists and not finished yet
        self.thread: threading.Thread | None = None

    def submit(self, write: Callable[[Any], list[str]], done: Callable[[BaseException | None], None] | None = None) -> Landing:
        landing = Landing(write, done)
        with self.ready:
            self.waiting.append(landing)
            self.last_submit = time.monotonic()
            self._start()
            self.ready.notify_all()
        return landing

    def flush(self) -> None:
        """Writes and builds everything submitted so far; returns once it is in the tree."""
        with self.ready:
            self.flushing += 1
            self._start()
            self.ready.notify_all()
            while self.waiting or self.unbuilt or self.working:
                self.ready.wait(1.0)
            self.flushing -= 1

    def _start(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._run, name="mirror-landings", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        while True:
            with self.ready:
                if not self.ready.wait_for(lambda: bool(self.waiting or self.unbuilt), timeout=60.0):
                    self.thread = None  # idle: a later submit starts a new one
                    return
                writes, self.waiting = self.waiting, []
                self.working += len(writes)
            if writes:
                self._store(writes)
            with self.ready:
                due = self._build_due()
                if not due:
                    self.ready.wait(0.2)  # woken early by a submit or a flush
                    continue
                batch, self.unbuilt = self.unbuilt, []
                self.working += len(batch)
            self._build(batch)

    def _build_due(self) -> bool:
        now = time.monotonic()
        if not self.unbuilt or self.waiting:
            return False
        return bool(self.flushing) or len(self.unbuilt) >= self.most or now - self.last_submit >= self.quiet or (
            now - self.first_unbuilt >= self.longest)  # fmt: skip

    def _store(self, writes: list[Landing]) -> None:
        try:
            self.store(lambda storage: _run_all(writes, storage))
        except BaseException as exc:  # noqa: BLE001 - the lock could not be had: each landing says so
            for landing in writes:
                landing.error = landing.error or exc
        failed = [landing for landing in writes if landing.error is not None]
        self._finish(failed)
        with self.ready:
            if not self.unbuilt:
                self.first_unbuilt = time.monotonic()
            self.unbuilt += [landing for landing in writes if landing.error is None]
            self.working -= len(writes)

    def _build(self, batch: list[Landing]) -> None:
        keys = [key for landing in batch for key in landing.keys]
        try:
            self.build(lambda storage: keys)
        except BaseException as exc:  # noqa: BLE001 - the build failed: every landing of the batch says so
            for landing in batch:
                landing.error = exc
        self._finish(batch)
        self._build_done(batch)

    def _finish(self, landings: list[Landing]) -> None:
        for landing in landings:
            if landing.done is not None:
                landing.done(landing.error)
            landing.finished.set()
        with self.ready:
            self.ready.notify_all()

    def _build_done(self, batch: list[Landing]) -> None:
        with self.ready:
            self.working -= len(batch)
            self.ready.notify_all()


def _run_all(batch: list[Landing], storage: Any) -> list[str]:
    keys: list[str] = []
    for landing in batch:
        try:
            landing.keys = landing.write(storage)
            keys += landing.keys
        except Exception as exc:  # noqa: BLE001 - one landing's refusal is its own answer
            landing.error = exc
    return keys
