"""The registry-wide work of a registry on PostgreSQL, done by one process at a time (issue 28).

Several `registry-gen api` processes share one state. What concerns the whole registry rather
than one write is the leader's, so it happens once and in order whatever the number of instances:

- rewriting `-/all` and `-/search.json` (the IndexRefresher's job on one machine), and the
  listing pages a write touched (the front page, browse pages, search shards and leaves): every
  write's build only marks them stale in the state, in its transaction; the leader renders them,
  uploads and purges them, then settles their marks, at most every `index_refresh_seconds`;
- reconciling: a write journalled pending whose writer is gone (a process killed between its
  commit and its render) is resolved, and its package rendered, by the leader's next build once
  it has been seen pending for RECONCILE_AFTER_SECONDS, instead of waiting for some later write.

Leadership and its fence: registry_gen.state.postgres_leader. Each process runs a `Leader`
thread that tries to lead every TICK_SECONDS; the one that leads does the work, fenced by its epoch.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from registry_gen.errors import NotLeader, RegistryError
from registry_gen.objectstore import ObjectStore
from registry_gen.refresher import WholeRewrite
from registry_gen.settings import Settings
from registry_gen.state import open_state

if TYPE_CHECKING:
    from registry_gen.state.postgres_leader import PgLeadership

TICK_SECONDS: Final = 1.0
RECONCILE_AFTER_SECONDS: Final = 2.0  # a write this long pending with its writer gone is healed
FAILURE_LOG_SECONDS: Final = 60.0  # a failure the next turns repeat is logged again at most this often
log = logging.getLogger(__name__)


def due_writes(pending: Iterable[int], first_seen: Mapping[int, float], now: float, settle: float) -> tuple[list[int], dict[int, float]]:
    """The pending writes seen pending for `settle` seconds, and when each pending one was first seen."""
    seen = {write_id: first_seen.get(write_id, now) for write_id in pending}
    return sorted(write_id for write_id, since in seen.items() if now - since >= settle), seen


def holder_name() -> str:
    """How the records name this process: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Leader:
    """One process's part in the leadership: a thread that leads when it can and then works.
    Also takes the IndexRefresher's calls (`schedule`, `flush`) from the write service."""

    def __init__(self, settings: Settings, leadership: PgLeadership | None = None, *, objects: ObjectStore | None = None,
                 tick: float = TICK_SECONDS, settle: float = RECONCILE_AFTER_SECONDS):  # fmt: skip
        assert settings.database_url, "a leader needs the state on PostgreSQL"
        self.settings = settings
        self.rewrite = WholeRewrite(settings, objects)  # with buckets: sync first, upload after; then purge
        self.state = open_state(settings)
        if leadership is None:
            from registry_gen.state.postgres_leader import PgLeadership  # psycopg: loaded on PostgreSQL only

            leadership = PgLeadership(settings.database_url, holder_name())
        self.leadership = leadership
        self.tick, self.settle, self.delay = tick, settle, float(settings.index_refresh_seconds)
        self.rebuilds = 0  # completed fenced builds, for tests and the logs
        self._first_seen: dict[int, float] = {}
        self._last_rebuild = float("-inf")
        self._failing: tuple[str, float, int] | None = None  # the failure last logged, when, and the failed turns since
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="registry-leader", daemon=True)

    def start(self) -> Leader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        self.leadership.resign()

    def schedule(self) -> None:
        """A write deferred the whole documents: the leader sees their stale mark in the state."""

    def flush(self) -> None:
        """At shutdown: the leader rewrites what is stale now; another process would only mark it."""
        self.work(force=True)

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self.work()
            self._stopped.wait(self.tick)

    def work(self, *, force: bool = False) -> bool:
        """One turn: lead if nobody does, then rebuild when something is due; True if it rebuilt."""
        try:
            if self.leadership.try_lead() is None:
                self._first_seen = {}
                return False
            if self.rewrite.purger is not None:
                self.rewrite.purger.retry_owed()  # any instance's owed purges that are due (registry_gen.purge)
            if not self._due(force):
                return False
            with self.leadership.fenced("rebuild"):
                self.rewrite()  # resolves pending writes, rewrites what is stale
        except NotLeader:
            return False
        except Exception as exc:  # noqa: BLE001 - the thread must live on; the next turn retries
            self._log_failure(str(exc) if isinstance(exc, (RegistryError, OSError)) else f"{type(exc).__name__}: {exc}")
            return False
        self._first_seen, self._last_rebuild = {}, time.monotonic()
        self.rebuilds += 1
        if self._failing is not None:
            log.warning("the leader's rebuild runs again, after %d failed turn(s)", self._failing[2] + 1)
            self._failing = None
        return True

    def _log_failure(self, detail: str) -> None:
        """One line per failure, not per turn: a bucket down for an hour would otherwise log 3,600
        identical lines; the same failure is logged again every FAILURE_LOG_SECONDS with its count."""
        now = time.monotonic()
        if self._failing is not None and self._failing[0] == detail and now - self._failing[1] < FAILURE_LOG_SECONDS:
            self._failing = (detail, self._failing[1], self._failing[2] + 1)
            return
        again = f" ({self._failing[2] + 1} failed turn(s) since the last line)" if self._failing is not None else ""
        log.warning("the leader's rebuild did not run (the next turn retries): %s%s", detail, again)
        self._failing = (detail, now, 0)

    def _due(self, force: bool) -> bool:
        now = time.monotonic()
        with self.state.journal() as journal:
            pending = [write.id for write in journal.pending_writes()]
        due, self._first_seen = due_writes(pending, self._first_seen, now, 0.0 if force else self.settle)
        if not (force or now - self._last_rebuild >= self.delay):
            return bool(due)
        return bool(due) or self.state.whole_documents_stale() or self.state.listings_stale()


def start_leader(settings: Settings, objects: ObjectStore | None = None) -> Leader | None:
    """A running Leader when the state is on PostgreSQL; None on the embedded default (one process)."""
    return Leader(settings, objects=objects).start() if settings.database_url else None
