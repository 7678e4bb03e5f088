"""Watch mode: rebuild the tree when content/ changes, debounced and only once files are stable.

One worker thread owns the builds; watchdog's observer thread only records that something
happened. After the first relevant event the worker waits until the content folder has been
quiet for `settle_seconds` (no event, and no archive whose size or mtime moved between two
snapshots), then runs the ordinary incremental `run_build`, which takes the shared build lock
(so a publish through the API and a watch build never interleave) and rewrites only the
packages whose archives changed. The files named by the events are handed to the build as
hints, so a change costs in proportion to what changed, not to the size of content/; a folder
event, a template change or a failed build makes the next build look at everything again. A copy of 100 archives is thus one build (or a few, when the
copy outlasts `max_wait_seconds`), and a file still being written is not read until its size
and mtime stop moving. Should an archive be read half-written anyway (a writer that pauses
longer than the settle interval), it is a truncated archive, which the build reports and leaves
out; its next change triggers another build.

Nothing that goes wrong in a build (a bad archive, a template error, a lock timeout) stops the
watcher: it is logged, reported to `on_build`, and the last good tree stays in place.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from watchdog.events import (
    EVENT_TYPE_ATTRIB,
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from registry_gen.build import BuildIssue, BuildResult, run_build, scan_content
from registry_gen.purge import purger_for
from registry_gen.refresher import IndexRefresher
from registry_gen.contentrules import content_kind, is_candidate
from registry_gen.errors import ConfigError, LockTimeout
from registry_gen.settings import Settings

log = logging.getLogger(__name__)

# Reading an archive opens it too: only events that can mean "the bytes changed" count,
# or every build would trigger the next one.
CHANGE_EVENTS = frozenset(
    {EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED, EVENT_TYPE_DELETED, EVENT_TYPE_CLOSED, EVENT_TYPE_ATTRIB}
)
DEFAULT_SETTLE_SECONDS = 1.0
DEFAULT_MAX_WAIT_SECONDS = 30.0
RETRY_SECONDS = 5.0
MAX_HINTED_PATHS = 10_000  # past this many changed files one full look is cheaper
# File system events can be lost (inotify queue overflow, network shares): now and then a build
# looks at all of content/ anyway.
FULL_SCAN_AFTER_SECONDS = 300.0

Snapshot = dict[str, tuple[int, int]]


# ---------------------------------------------------------------- pure parts


def is_relevant_path(path: Path, root: Path, *, is_directory: bool = False) -> bool:
    """Whether a change at `path` (inside `root`) can change the tree.

    Hidden files and folders and temporary names (`x.tgz.part`, `~`, `.tmp`) never count, the
    same rule the build's scan applies. Folders count (a folder of archives moved in or out);
    files only when they are archives or registry-meta.json.
    """
    try:
        relative = path.relative_to(root)
    except ValueError:
        return False
    if not relative.parts or not all(is_candidate(part) for part in relative.parts):
        return False
    if is_directory:
        return True
    return content_kind(relative.name) is not None


def content_snapshot(content_dir: Path) -> Snapshot:
    """Size and mtime of every archive and meta file: two equal snapshots mean nothing is moving."""
    archives, metas = scan_content(content_dir)
    return {**archives, **metas}


def wait_until_settled(
    snapshot: Callable[[], object],
    pause: Callable[[float], bool],
    *,
    settle_seconds: float,
    max_wait_seconds: float,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Pauses until two snapshots taken `settle_seconds` apart are equal.

    `snapshot` must change whenever anything changed (file stats plus an event counter);
    `pause(seconds)` returns True when the watcher is stopping. Returns False when stopped or
    when `max_wait_seconds` passed with things still changing (build anyway: a folder that never
    stops changing must still be published, and a half-written archive fails to read).
    """
    deadline = clock() + max_wait_seconds
    before = snapshot()
    while True:
        if pause(settle_seconds):
            return False
        after = snapshot()
        if after == before:
            return True
        if clock() >= deadline:
            log.info("content still changing after %.0fs; building anyway", max_wait_seconds)
            return False
        before = after


def _stat_key(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _issue_keys(issues: list[BuildIssue]) -> dict[str, BuildIssue]:
    return {f"{issue.path}\0{issue.reason}": issue for issue in issues}


# ---------------------------------------------------------------- the watcher


@dataclass
class BuildReport:
    """What one watch build did, for the CLI and for tests."""

    number: int
    reason: str
    result: BuildResult | None
    new_errors: list[BuildIssue] = field(default_factory=list)
    resolved_errors: list[BuildIssue] = field(default_factory=list)
    failure: str | None = None  # the build itself failed (lock timeout, template error, ...)


@dataclass
class WatchStats:
    builds: int = 0
    failed_builds: int = 0
    events: int = 0
    phase: str = "starting"  # starting, idle, settling, building, waiting for the build lock, stopped
    errors: list[BuildIssue] = field(default_factory=list)
    last_report: BuildReport | None = None


class _EventSink(FileSystemEventHandler):
    def __init__(self, watcher: Watcher):
        self._watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in CHANGE_EVENTS:
            return
        if event.is_directory and event.event_type in (EVENT_TYPE_MODIFIED, EVENT_TYPE_ATTRIB, EVENT_TYPE_CLOSED):
            return  # a folder's own "modified" only echoes a change to a child, reported on its own
        paths = [Path(os.fsdecode(p)) for p in (event.src_path, getattr(event, "dest_path", "") or "") if p]
        kinds = {path: self._watcher.classify(path, event.is_directory) for path in paths}
        relevant = {path: kind for path, kind in kinds.items() if kind}
        if relevant:
            # A folder event (a folder of archives moved in or out) or a template change needs a
            # full look; a file event names exactly what to look at.
            full = event.is_directory or any(kind == "template" for kind in relevant.values())
            self._watcher.notify_change([str(path) for path in relevant], full=full)


class Watcher:
    """Watches settings.content_dir (and a custom template_dir) and keeps settings.out_dir current."""

    def __init__(
        self,
        settings: Settings,
        *,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
        max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
        poll: bool = False,
        initial_build: bool = True,
        on_build: Callable[[BuildReport], None] | None = None,
    ):
        check_layout(settings)
        self.settings = settings
        self.settle_seconds = settle_seconds
        self.max_wait_seconds = max_wait_seconds
        self.poll = poll
        self.initial_build = initial_build
        self.on_build = on_build
        self.stats = WatchStats()
        self._content = settings.content_dir.resolve()
        self._templates = settings.template_dir.resolve() if settings.template_dir else None
        self._out = settings.out_dir.resolve()
        self._changed = threading.Condition()
        self._dirty = False
        # What the next build must look at: these files, or all of content/ (first build, a folder
        # event, a template change, a failed build).
        self._touched: set[str] = set()
        self._full_scan = True
        self._last_full_scan = float("-inf")
        self._stopping = threading.Event()
        self._observer: BaseObserver | None = None
        self._worker: threading.Thread | None = None
        # Builds from hinted paths leave -/all and -/search.json to it (registry_gen.refresher).
        self.refresher = IndexRefresher(settings) if settings.index_refresh_seconds else None
        self.purger = purger_for(settings)  # the caches in front learn what each build changed

    # -- observer side (watchdog's thread)

    def classify(self, path: Path, is_directory: bool) -> str | None:
        """"content", "template", or None for a change that cannot change the tree."""
        if path == self._out or self._out in path.parents:
            return None
        if self._templates and (path == self._templates or self._templates in path.parents):
            return "template" if is_candidate(path.name) else None
        return "content" if is_relevant_path(path, self._content, is_directory=is_directory) else None

    def notify_change(self, paths: list[str], *, full: bool = False) -> None:
        with self._changed:
            self.stats.events += 1
            self._touched.update(paths)
            self._full_scan = self._full_scan or full or len(self._touched) > MAX_HINTED_PATHS
            self._dirty = True
            self._changed.notify_all()

    # -- lifecycle

    def start(self) -> Watcher:
        """Starts watching, then the first build (in the worker), and returns at once."""
        self._observer = self._start_observer()
        self._worker = threading.Thread(target=self._run, name="registry-gen-watch", daemon=True)
        self._worker.start()
        return self

    def stop(self, timeout: float | None = 60) -> None:
        """Stops watching; a build under way is finished first (its writes are atomic anyway)."""
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
        if self._worker is not None and self._worker is not threading.current_thread():
            self._worker.join(timeout)
        if self.refresher is not None:
            self.refresher.flush()
        self.stats.phase = "stopped"

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def wait_for_builds(self, count: int, timeout: float) -> bool:
        """Blocks until at least `count` builds finished (True) or `timeout` passed (False)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.stats.builds < count:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping.is_set():
                    return self.stats.builds >= count
                self._changed.wait(min(left, 0.5))
        return True

    def _start_observer(self) -> BaseObserver:
        folders = [self._content] + ([self._templates] if self._templates and self._templates.is_dir() else [])
        if not self.poll:
            try:
                return self._schedule(Observer(), folders)
            except OSError as exc:
                # inotify limits (max_user_watches / instances) or a file system without events.
                log.warning("file system events unavailable (%s); polling instead", exc)
        return self._schedule(PollingObserver(timeout=min(1.0, self.settle_seconds)), folders)

    def _schedule(self, observer: BaseObserver, folders: list[Path]) -> BaseObserver:
        sink = _EventSink(self)
        for folder in folders:
            observer.schedule(sink, str(folder), recursive=True)
        observer.start()
        return observer

    # -- worker side

    def _run(self) -> None:
        if self.initial_build:
            self._build("initial build")
        while not self._stopping.is_set():
            with self._changed:
                self.stats.phase = "idle"
                while not self._dirty and not self._stopping.is_set():
                    self._changed.wait()
            if self._stopping.is_set():
                break
            self.stats.phase = "settling"
            wait_until_settled(
                self._snapshot,
                self._pause,
                settle_seconds=self.settle_seconds,
                max_wait_seconds=self.max_wait_seconds,
            )
            if self._stopping.is_set():
                break
            self._build("content changed")

    def _snapshot(self) -> object:
        with self._changed:
            self._dirty = False
            events = self.stats.events
            touched = None if self._full_scan else sorted(self._touched)
        if touched is None:
            return events, content_snapshot(self._content)
        return events, [_stat_key(Path(path)) for path in touched]

    def _take_hints(self) -> list[str] | None:
        """The changed paths for run_build(changed=...), or None for a full look; then forgets them."""
        with self._changed:
            overdue = time.monotonic() - self._last_full_scan > FULL_SCAN_AFTER_SECONDS
            hints = None if self._full_scan or overdue else sorted(self._touched)
            self._touched = set()
            self._full_scan = False
            if hints is None:
                self._last_full_scan = time.monotonic()
        return hints

    def _pause(self, seconds: float) -> bool:
        return self._stopping.wait(seconds)

    def _build(self, reason: str) -> None:
        self.stats.phase = "building"
        number = self.stats.builds + 1
        hints = self._take_hints()
        defer = self.refresher is not None and hints is not None
        try:
            result = run_build(self.settings, changed=hints, on_lock_wait=self._waiting_for_lock, defer_whole=defer)
            if self.purger is not None:
                self.purger.after_build(result.written, result.removed)
            if defer and self.refresher is not None:
                self.refresher.schedule()
        except Exception as exc:  # noqa: BLE001 - the watcher must outlive any one bad build
            log.error("watch build %d failed: %s", number, exc, exc_info=not isinstance(exc, ConfigError))
            report = BuildReport(number, reason, None, failure=str(exc) or type(exc).__name__)
            transient = isinstance(exc, (LockTimeout, OSError))
            with self._changed:
                self._full_scan = True  # what that build would have looked at is not recorded
                self.stats.failed_builds += 1
                # A busy lock or a full disk passes: try again. Anything else waits for a change.
                self._dirty = self._dirty or transient
            self._finish(report)
            if transient:
                self._pause(RETRY_SECONDS)
            return
        before, after = _issue_keys(self.stats.errors), _issue_keys(result.errors)
        report = BuildReport(
            number,
            reason,
            result,
            new_errors=[after[k] for k in after if k not in before],
            resolved_errors=[before[k] for k in before if k not in after],
        )
        for issue in report.new_errors:
            log.warning("%s (left out; fix or remove the file)", issue)
        log.info(
            "watch build %d (%s): %d packages rebuilt%s, %s",
            number,
            reason,
            result.rebuilt,
            (": " + ", ".join(result.rebuilt_packages[:10]) + (" ..." if result.rebuilt > 10 else ""))
            if result.rebuilt_packages
            else "",
            result.summary(),
        )
        self.stats.errors = list(result.errors)
        self._finish(report)

    def _waiting_for_lock(self) -> None:
        self.stats.phase = "waiting for the build lock"
        log.info("watch: another build holds %s; waiting for it", self.settings.lock_file)

    def _finish(self, report: BuildReport) -> None:
        with self._changed:
            self.stats.builds += 1
            self.stats.last_report = report
            self._changed.notify_all()
        if self.on_build is not None:
            try:
                self.on_build(report)
            except Exception:  # noqa: BLE001 - a reporting bug must not stop the watcher
                log.exception("on_build callback failed")


def check_layout(settings: Settings) -> None:
    """Refuses folder layouts watch mode cannot work with, naming the folder."""
    content = settings.content_dir.resolve()
    if not content.is_dir():
        raise ConfigError(f"content folder {settings.content_dir} does not exist")
    out = settings.out_dir.resolve()
    if out == content or (content in out.parents and all(is_candidate(p) for p in out.relative_to(content).parts)):
        # The build would read its own output tarballs as content, and every build would trigger the next.
        raise ConfigError(f"output folder {settings.out_dir} must not be inside content folder {settings.content_dir}")


def start_watcher(
    settings: Settings,
    *,
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
    poll: bool = False,
    initial_build: bool = True,
    on_build: Callable[[BuildReport], None] | None = None,
) -> Watcher:
    """For `serve --watch` and friends: a started Watcher (first build under way); call .stop()."""
    return Watcher(
        settings,
        settle_seconds=settle_seconds,
        max_wait_seconds=max_wait_seconds,
        poll=poll,
        initial_build=initial_build,
        on_build=on_build,
    ).start()
