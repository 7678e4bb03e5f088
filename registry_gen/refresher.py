"""Rewriting `-/all` and `-/search.json` a little after the writes that changed them.

Both are one URL listing every package, so they cannot be split: rewriting them costs
O(packages), which in every publish would make a publish slower as the registry grows. The
long-running writers (the API's WriteService, watch mode) build with `defer_whole=True`, which
only marks them stale in the build's state, and hold an `IndexRefresher` that rewrites them at
most `Settings.index_refresh_seconds` after the first write that staled them: one rewrite for a
burst of publishes. A stale mark survives a crash; any later build without `defer_whole` (a CLI
build, the next refresh) rewrites them.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from registry_gen.build import run_build
from registry_gen.errors import RegistryError
from registry_gen.failpoints import failpoint
from registry_gen.layout import ALL_DOCUMENT, SEARCH_DOCUMENT
from registry_gen.build.results import BuildResult
from registry_gen.objectstore import ObjectStore
from registry_gen.purge import Purger, purger_for
from registry_gen.settings import Settings
from registry_gen.state import open_state

log = logging.getLogger(__name__)


class IndexRewrites(Protocol):
    """What a write service calls: an IndexRefresher, or on PostgreSQL the registry_gen.leader.Leader."""

    def schedule(self) -> None: ...
    def flush(self) -> None: ...


class WholeRewrite:
    """The rewrite of what the state marks stale (and of writes left pending), with what follows
    every build of a long-running writer: content synced from the bucket first, the tree's new
    files uploaded after, then the caches in front purged. The IndexRefresher and, on
    PostgreSQL, the leader (registry_gen.leader) both run it."""

    def __init__(self, settings: Settings, objects: ObjectStore | None = None):
        self.settings = settings
        self.objects = objects  # content and tree in buckets (registry_gen.objectstore): sync, then publish
        self.purger: Purger | None = purger_for(settings)  # the caches in front learn what each rewrite changed

    def __call__(self) -> BuildResult:
        # Owed before the build commits, as a write's purge is: a kill between the commit and the
        # purge leaves it to the next start (Purger.resume) or the leader, not a cache in front
        # serving the old -/all for its whole shared lifetime.
        owed = self.purger.owe([ALL_DOCUMENT, SEARCH_DOCUMENT]) if self.purger is not None else None
        if self.objects is not None:
            self.objects.sync_pending(self.settings)
        # Nothing changed: it writes what the state marks stale (the listing pages writes left on
        # PostgreSQL too, whose marks, and -/all's, are settled only once the pages are uploaded
        # and purged: a kill before leaves them marked for the next rewrite).
        tree = self.objects.tree.files_under if self.objects is not None else None  # what the bucket holds where a range shrank
        result = run_build(self.settings, changed=[], settle_listings=False, tree=tree)
        failpoint("before-rewrite-upload")
        if self.objects is not None:
            self.objects.tree.publish(result)
        if self.purger is not None:
            self.purger.after_build(result.written, result.removed, owed)
        state = open_state(self.settings)
        state.settle_stale_listings(result.stale_listings)
        state.settle_whole_documents(result.whole_mark)  # -/all and -/search.json too, once uploaded and purged
        return result


class IndexRefresher:
    """One pending refresh at a time, on a timer thread; `flush` runs a pending one at once."""

    def __init__(self, settings: Settings, objects: ObjectStore | None = None):
        self.settings = settings
        self.rewrite = WholeRewrite(settings, objects)
        self.delay = float(settings.index_refresh_seconds)
        self.refreshes = 0  # completed rewrites, for tests and the logs
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def schedule(self) -> None:
        """A write deferred the documents: refresh them after the delay, unless already due."""
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(self.delay, self._refresh)
            self._timer.daemon = True
            self._timer.start()

    def flush(self) -> None:
        """Runs a pending refresh now (shutdown, or a caller that needs the documents current)."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            self._run()

    def _refresh(self) -> None:
        with self._lock:
            if self._timer is not threading.current_thread():
                return  # flushed meanwhile
            self._timer = None
        self._run()

    def _run(self) -> None:
        try:
            self.rewrite()
        except Exception as exc:  # noqa: BLE001 - a timer thread must not die with a traceback in the log
            detail = str(exc) if isinstance(exc, (RegistryError, OSError)) else f"{type(exc).__name__}: {exc}"
            log.warning("could not rewrite -/all and -/search.json (the next write or build retries): %s", detail)
            return
        self.refreshes += 1
