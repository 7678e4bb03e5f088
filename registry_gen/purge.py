"""Purging the caches in front (a CDN, Varnish, nginx proxy_cache) after each render.

Package documents go out with `max-age=0, must-revalidate` for clients and, once a `purge:` is
configured, a long shared-cache lifetime (`s-maxage`) that the purge ends. After every build of a
write (registry_gen.writes) and every rewrite of the registry-wide files (registry_gen.refresher),
`Purger.after_build` tells the cache exactly which files changed: one request per changed URL
(`url` with `{path}`), one request carrying the changed packages' surrogate keys (`key_header`,
e.g. Varnish xkey), and/or a command. A purge never fails a write: one attempt is bounded by
`timeout_seconds`, a failure is logged and retried from a background thread
(docs/deploying/caches.md).

The pure half (settings, URL paths and keys of tree files, the requests) is tested on its own;
`Purger` does the I/O.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from registry_gen.errors import ConfigError
from registry_gen.layout import ABBREVIATED_DOCUMENT, PACKAGE_DOCUMENT, PAGES_NOT_FOUND

if TYPE_CHECKING:
    from registry_gen.state.ledger import Journal

log = logging.getLogger(__name__)

SITE_KEY: Final = "-"  # the surrogate key of every file under /-/ (search, -/all, the HTML site)
RETRY_DELAYS: Final = (1.0, 5.0, 30.0, 120.0, 600.0)  # after a failed attempt (the last one repeats while a ledger keeps it)
OWED_SETTLE_SECONDS: Final = 5.0  # a write's own purge is due this long after it is recorded; then anyone's retry sends it
_TOKEN = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")  # an HTTP method or header name


@dataclass(frozen=True)
class SharedCache:
    """A cache in front that the registry purges (registry.yaml `purge:`, registry_gen.purge): it may
    keep documents `max_age` seconds, and `key_header` (xkey, Surrogate-Key…) tags each answer."""

    max_age: int
    key_header: str | None = None


@dataclass(frozen=True)
class PurgeSettings:
    """The caches in front (a CDN, Varnish, nginx proxy_cache), purged after each write's build and
    each rewrite of the registry-wide files with exactly the changed files (docs/deploying/caches.md);
    off without a url or a command (then documents carry no shared-cache lifetime)."""

    url: str | None = None
    method: str = "PURGE"
    key_header: str | None = None
    command: tuple[str, ...] = ()
    timeout_seconds: float = 2.0
    shared_max_age: int = 31536000

    @property
    def enabled(self) -> bool:
        """Off (the default) without a url or a command: nothing is purged, and documents carry no
        shared-cache lifetime."""
        return self.url is not None or bool(self.command)


def parse_purge(value: Any) -> PurgeSettings:
    """`purge:` from registry.yaml, checked (ConfigError naming the key); null: no purge."""
    if value is None:
        return PurgeSettings()
    if not isinstance(value, dict):
        raise ConfigError(f"purge must be a mapping (url, method, key_header, command, timeout_seconds, shared_max_age), got {value!r}")
    known = {f for f in PurgeSettings.__dataclass_fields__}
    unknown = sorted(str(key) for key in value if key not in known)
    if unknown:
        raise ConfigError(f"unknown key purge.{unknown[0]} (known: {', '.join(sorted(known))})")
    checked = {key: _purge_value(str(key), item) for key, item in value.items()}
    settings = PurgeSettings(**checked)
    if settings.url is not None and "{path}" not in settings.url and settings.key_header is None:
        raise ConfigError("purge.url needs {path} (one request per changed path) or purge.key_header (the changed keys in one request)")
    return settings


def _purge_value(key: str, item: Any) -> Any:
    if item is None and key in ("url", "key_header"):
        return None
    if key == "url":
        return _purge_url(item)
    if key in ("method", "key_header"):
        if not isinstance(item, str) or not _TOKEN.match(item):
            raise ConfigError(f"purge.{key} must be a single word such as PURGE, BAN or xkey; got {item!r}")
        return item.upper() if key == "method" else item
    if key == "command":
        if not isinstance(item, list) or not all(isinstance(part, str) and part for part in item):
            raise ConfigError(f"purge.command must be a list of words (the program, then its arguments); got {item!r}")
        return tuple(item)
    wanted, low, high = {"timeout_seconds": ("a number of seconds from 0.1 to 30", 0.1, 30), "shared_max_age": ("a number of seconds from 1 to 31536000", 1, 31536000)}[key]
    if isinstance(item, bool) or not isinstance(item, (int, float)) or not low <= item <= high:
        raise ConfigError(f"purge.{key} must be {wanted}; got {item!r}")
    return int(item) if key == "shared_max_age" else float(item)


def _purge_url(item: Any) -> str:
    parts = urlsplit(str(item).replace("{path}", "/"))
    if not isinstance(item, str) or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"purge.url must be an http(s) URL such as http://127.0.0.1:6081{{path}}; got {item!r}")
    if item.replace("{path}", "").count("{") or any(ch in item for ch in " \r\n"):
        raise ConfigError(f"purge.url may hold only the placeholder {{path}}; got {item!r}")
    return item


# ---------------------------------------------------------------- what a build changed, as a cache sees it


def cache_key(relative: str) -> str:
    """The surrogate key of a tree file: its package's name, or SITE_KEY for the registry's own
    files; a tarball's is its URL path (it never changes: a purge of its package's documents
    leaves it cached; only its removal purges it)."""
    parts = relative.split("/")
    if len(parts) >= 3 and parts[-2] == "-" and parts[-1].endswith(".tgz"):
        return "/" + relative
    if parts[0] == "-" or relative == PAGES_NOT_FOUND or len(parts) < 2:
        return SITE_KEY
    return "/".join(parts[:2]) if parts[0].startswith("@") else parts[0]


def url_paths(relative: str) -> list[str]:
    """The URL paths a cache may hold a tree file under: the file's own path, its folder's (a
    document is served for `/<name>`, with or without a slash), and a scoped name's encoded spellings
    (a cache keys on the URL as the client sent it; nginx decodes `%2f` only behind the cache)."""
    if relative.endswith(".gz"):  # a gzip sibling is the same URL (Vary: Accept-Encoding)
        relative = relative[: -len(".gz")]
    if not relative or any(part.startswith(".") for part in relative.split("/")):
        return []
    paths = ["/" + relative]
    folder, _, filename = relative.rpartition("/")
    if folder and filename in (PACKAGE_DOCUMENT, ABBREVIATED_DOCUMENT):
        paths += ["/" + folder, "/" + folder + "/"]
    if relative.startswith("@"):
        paths += [_scope_encoded(path, spelling) for path in list(paths) for spelling in ("%2f", "%2F")]
    return list(dict.fromkeys(paths))


def _scope_encoded(path: str, spelling: str) -> str:
    """'/@scope/name/…' with the scope's slash spelled `spelling` ('/@scope%2fname/…')."""
    scope, _, rest = path[1:].partition("/")
    return "/" + scope + spelling + rest


@dataclass(frozen=True)
class PurgeTargets:
    """What to purge after one build: URL paths and surrogate keys, each once, in order."""

    paths: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.paths or self.keys)

    def merged(self, other: PurgeTargets) -> PurgeTargets:
        return PurgeTargets(tuple(dict.fromkeys(self.paths + other.paths)), tuple(dict.fromkeys(self.keys + other.keys)))


def purge_targets(changed: Iterable[str]) -> PurgeTargets:
    """The paths and keys of the tree files a build wrote or removed (private files skipped)."""
    paths: dict[str, None] = {}
    keys: dict[str, None] = {}
    for relative in changed:
        found = url_paths(relative)
        if found:
            paths.update(dict.fromkeys(found))
            keys[cache_key(relative)] = None
    return PurgeTargets(tuple(paths), tuple(keys))


@dataclass(frozen=True)
class PurgeRequest:
    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


def purge_requests(settings: PurgeSettings, targets: PurgeTargets, host: str | None) -> list[PurgeRequest]:
    """The HTTP requests of one purge. `host`: the public host (from base_url), sent as Host so a
    cache that hashes on it (Varnish does) finds what the clients' requests stored."""
    if settings.url is None or not targets:
        return []
    base = {"Host": host} if host else {}
    if "{path}" in settings.url:
        by_key = [_key_request(settings, targets, base)] if settings.key_header is not None and targets.keys else []
        return by_key + [PurgeRequest(settings.method, settings.url.replace("{path}", path), base) for path in targets.paths]
    return [_key_request(settings, targets, base)] if targets.keys else []


def _key_request(settings: PurgeSettings, targets: PurgeTargets, base: Mapping[str, str]) -> PurgeRequest:
    url = (settings.url or "").replace("{path}", "/")
    return PurgeRequest(settings.method, url, {**base, str(settings.key_header): " ".join(targets.keys)})


def shared_cache(purge: PurgeSettings) -> SharedCache | None:
    """What the headers promise a cache in front: only a purged cache keeps documents long."""
    return SharedCache(purge.shared_max_age, purge.key_header) if purge.enabled else None


# ---------------------------------------------------------------- the I/O


class PurgeFailed(Exception):
    """One purge attempt did not go through (an answer other than 2xx, a timeout, a command's exit)."""


def send_requests(requests: list[PurgeRequest], deadline: float) -> None:
    """Sends the requests (one connection per host, reused), all before `deadline` (monotonic)."""
    import http.client

    connections: dict[tuple[str, str], http.client.HTTPConnection] = {}
    try:
        for request in requests:
            parts = urlsplit(request.url)
            left = deadline - time.monotonic()
            if left <= 0:
                raise PurgeFailed(f"timed out after {len(connections)} host(s)")
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            connection = connections.setdefault((parts.scheme, parts.netloc), cls(parts.netloc, timeout=left))
            connection.timeout = left
            if connection.sock is not None:
                connection.sock.settimeout(left)
            target = parts.path + ("?" + parts.query if parts.query else "") or "/"
            connection.request(request.method, target, headers=dict(request.headers))
            answer = connection.getresponse()
            answer.read()
            if not 200 <= answer.status < 300:
                raise PurgeFailed(f"{request.method} {request.url} answered {answer.status} {answer.reason}")
    except (OSError, http.client.HTTPException) as exc:
        raise PurgeFailed(f"{type(exc).__name__}: {exc}") from exc
    finally:
        for connection in connections.values():
            connection.close()


def run_command(command: tuple[str, ...], targets: PurgeTargets, deadline: float) -> None:
    """Runs the purge command: the paths on stdin, one a line; the keys in $REGISTRY_PURGE_KEYS."""
    import os
    import subprocess

    env = {**os.environ, "REGISTRY_PURGE_KEYS": " ".join(targets.keys)}
    try:
        done = subprocess.run(
            list(command), input="".join(p + "\n" for p in targets.paths), text=True, env=env,
            capture_output=True, timeout=max(0.01, deadline - time.monotonic()), check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PurgeFailed(f"{command[0]}: {exc}") from exc
    if done.returncode != 0:
        raise PurgeFailed(f"{command[0]} exited with {done.returncode}: {done.stderr.strip()[-300:]}")


class Purger:
    """Purges after builds: one attempt at once (bounded), failures retried later on a thread.

    With `ledger` (the state's journal, registry_gen.state.ledger), what is owed is a row of the
    ledger, not of this process: a write records its purge before it stores anything
    (`owe`), and settles it once the cache answered; a failed attempt leaves it due again after
    a backoff. `retry_owed` sends what is due, from this process's timer, from the leader's tick
    on PostgreSQL (another instance's debts too), and at a start (`resume`: what a killed process
    left). One line is logged when purges start failing and one when the cache answers again."""

    def __init__(self, settings: PurgeSettings, host: str | None = None, ledger: Callable[[], Journal] | None = None):
        self.settings = settings
        self.host = host
        self.ledger = ledger
        self.purged = 0  # attempts that went through, for tests and the logs
        self.failed = 0
        self._lock = threading.Lock()
        self._backlog = PurgeTargets()
        self._attempt = 0
        self._timer: threading.Timer | None = None
        self._next_delay = RETRY_DELAYS[0]  # after the last failed attempt at the owed purges
        self._failing = False
        # One retry of the owed purges at a time in a process: the timer's and the leader's tick
        # would otherwise read the same due rows and send them twice.
        self._retrying = threading.Lock()

    def owe(self, changing: Iterable[str]) -> int | None:
        """Records, before a write stores anything, the purge of the tree files it will change
        (due OWED_SETTLE_SECONDS later, when its own attempt should be over); None without a ledger."""
        targets = purge_targets(changing)
        if self.ledger is None or not targets:
            return None
        with self.ledger() as journal:
            return journal.owe_purge(targets.paths, targets.keys, time.time() + OWED_SETTLE_SECONDS)

    def after_build(self, written: Iterable[str], removed: Iterable[str] = (), owed: int | None = None) -> None:
        """Purges what a build wrote and removed; never raises, returns within timeout_seconds.
        `owed`: the row `owe` recorded for this write, settled here."""
        targets = purge_targets([*written, *removed])
        if self.ledger is not None:
            self._after_build_owed(targets, owed)
            return
        if not targets:
            return
        with self._lock:
            if self._timer is not None:  # the cache failed a moment ago: join the retry rather than wait on it again
                self._backlog = self._backlog.merged(targets)
                return
        self._try(targets)

    def _after_build_owed(self, targets: PurgeTargets, owed: int | None) -> None:
        # Sent at once unless the cache is failing now. A timer waiting only for purges owed but
        # not due yet (other writes in flight, rescheduled by a retry) is no reason to wait: a
        # write that joined it was fresh through the cache up to RETRY_DELAYS[0] late.
        try:
            if not self._failing and targets:
                self.purge(targets)
                self.purged += 1
                self._settled([owed] if owed is not None else [], [], 0.0)
                return
            if not targets:
                self._settled([owed] if owed is not None else [], [], 0.0)
                return
            why = "a retry is waiting"
        except Exception as exc:  # noqa: BLE001 - a purge must never fail the write that called it
            self.failed += 1
            why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, PurgeFailed) else str(exc)
        try:
            with self.ledger() as journal:  # type: ignore[misc]
                kept = journal.owe_purge(targets.paths, targets.keys, time.time(), owed)
                journal.settle_purges([], [kept], time.time() + (0.0 if self._timer is not None else RETRY_DELAYS[0]))
        except Exception as exc:  # noqa: BLE001 - the ledger down too: the in-process retry keeps it
            log.warning("cache purge could not be recorded (%s: %s)", type(exc).__name__, exc)
            self._keep_for_later(targets, why)
            return
        self._failed_owed(why, RETRY_DELAYS[0])

    def _settled(self, done: list[int], retry: list[int], due: float) -> None:
        if (done or retry) and self.ledger is not None:
            with self.ledger() as journal:
                journal.settle_purges(done, retry, due)

    def retry_owed(self, *, everything: bool = False) -> int:
        """Sends the owed purges that are due (`everything`: all of them, at a start), as one
        attempt; returns how many it settled. Those older than shared_max_age are given up: the
        cache's own lifetime ended them."""
        if self.ledger is None:
            return 0
        with self._retrying:
            return self._retry_owed(everything)

    def send_owed_now(self, changed: Iterable[str]) -> str | None:
        """For a command that exits right after (`registry-gen build`): the purge of `changed` is
        recorded as owed, then everything owed is sent in one bounded attempt, with no retry
        thread. Returns why it failed (all of it kept owed in the ledger, for `registry-gen api`'s
        leader or the next build), or None."""
        if self.ledger is None:
            return None
        self.owe(changed)
        with self._retrying:
            _, failure = self._send_owed(everything=True)
        return failure

    def _retry_owed(self, everything: bool) -> int:
        sent, failure = self._send_owed(everything)
        if failure is not None:
            self._failed_owed(failure, self._next_delay)
            return sent
        with self.ledger() as journal:  # type: ignore[misc]  # owed but not due yet (a later write joined while this one was sent)
            if journal.owed_purges(float("inf"), limit=1):
                self._schedule(RETRY_DELAYS[0])
        return sent

    def _send_owed(self, everything: bool) -> tuple[int, str | None]:
        """One attempt at the owed purges (all of them, or those due): how many it settled, and why
        it failed (then they stay owed, due again after a backoff: `_next_delay`)."""
        now = time.time()
        with self.ledger() as journal:  # type: ignore[misc]
            owed = journal.owed_purges(float("inf") if everything else now)
        expired = [item.id for item in owed if now - item.since > self.settings.shared_max_age]
        live = [item for item in owed if item.id not in expired]
        if expired:
            log.error("cache purge: gave up on %d owed purge(s) older than shared_max_age (the cache's lifetime ended them)", len(expired))
        targets = PurgeTargets(tuple(dict.fromkeys(p for i in live for p in i.paths)), tuple(dict.fromkeys(k for i in live for k in i.keys)))
        try:
            if targets:
                self.purge(targets)
        except Exception as exc:  # noqa: BLE001 - retried later; never a traceback
            self.failed += 1
            self._next_delay = RETRY_DELAYS[min(min(i.attempts for i in live), len(RETRY_DELAYS) - 1)]
            self._settled(expired, [i.id for i in live], now + self._next_delay)
            return len(expired), str(exc) if isinstance(exc, PurgeFailed) else f"{type(exc).__name__}: {exc}"
        self._settled([*expired, *(i.id for i in live)], [], 0.0)
        if live:
            self.purged += 1
            if self._failing:
                log.warning("cache purge: the cache answers again; %d owed purge(s) sent", len(live))
            self._failing = False
        return len(owed), None

    def resume(self) -> None:
        """At a start: what a process killed before its purge (or given up with the cache down)
        left owed is sent from a background thread, whatever its due time."""
        if self.ledger is not None:
            self._schedule(0.0, everything=True)

    def _failed_owed(self, why: str, delay: float) -> None:
        if not self._failing:
            log.warning("cache purge failed (%s); the purge is owed (ledger) and retried with backoff until the cache answers", why)
        self._failing = True
        self._schedule(delay)

    def _schedule(self, delay: float, *, everything: bool = False) -> None:
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(delay, self._timed_retry, kwargs={"everything": everything})
            self._timer.daemon = True
            self._timer.start()

    def _timed_retry(self, everything: bool = False) -> None:
        with self._lock:
            self._timer = None
        try:
            self.retry_owed(everything=everything)
        except Exception as exc:  # noqa: BLE001 - a timer thread must not die with a traceback
            log.warning("cache purge: the owed purges could not be read (%s: %s); retrying in %.0f s", type(exc).__name__, exc, RETRY_DELAYS[1])
            self._schedule(RETRY_DELAYS[1])

    def _try(self, targets: PurgeTargets) -> None:
        try:
            self.purge(targets)
        except PurgeFailed as exc:
            self.failed += 1
            self._keep_for_later(targets, str(exc))
        except Exception as exc:  # noqa: BLE001 - a purge must never fail the write that called it
            self.failed += 1
            self._keep_for_later(targets, f"{type(exc).__name__}: {exc}")
        else:
            self.purged += 1

    def purge(self, targets: PurgeTargets) -> None:
        """One attempt, all of it within timeout_seconds (PurgeFailed otherwise)."""
        deadline = time.monotonic() + self.settings.timeout_seconds
        send_requests(purge_requests(self.settings, targets, self.host), deadline)
        if self.settings.command:
            run_command(self.settings.command, targets, deadline)

    def _keep_for_later(self, targets: PurgeTargets, why: str) -> None:
        with self._lock:
            self._backlog = self._backlog.merged(targets)
            if self._timer is not None:
                log.warning("cache purge failed (%s); %d path(s) wait for the next retry", why, len(self._backlog.paths))
                return
            if self._attempt >= len(RETRY_DELAYS):
                log.error("cache purge failed (%s); gave up on %d path(s): the cache serves them until its lifetime ends", why, len(self._backlog.paths))
                self._backlog, self._attempt = PurgeTargets(), 0
                return
            delay = RETRY_DELAYS[self._attempt]
            self._attempt += 1
            log.warning("cache purge failed (%s); retrying in %.0f s", why, delay)
            self._timer = threading.Timer(delay, self._retry)
            self._timer.daemon = True
            self._timer.start()

    def _retry(self) -> None:
        with self._lock:
            targets, self._backlog, self._timer = self._backlog, PurgeTargets(), None
        if not targets:
            return
        try:
            self.purge(targets)
        except Exception as exc:  # noqa: BLE001 - a timer thread must not die with a traceback
            self.failed += 1
            self._keep_for_later(targets, str(exc))
            return
        self.purged += 1
        with self._lock:
            self._attempt = 0

    def close(self) -> None:
        """Stops a pending retry (shutdown)."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


def purger_for(settings: Any) -> Purger | None:
    """The purger of a Settings (None without `purge:`), Host taken from its base_url, what it
    owes kept in the state's ledger."""
    purge: PurgeSettings = settings.purge
    if not purge.enabled:
        return None
    from registry_gen.state import open_state  # registry_gen.settings imports this module

    host = urlsplit(settings.base_url).netloc or None
    # One purger per registry in a process (the write service, the refresher, watch mode): one
    # retry timer, and one log line when purges start failing and one when the cache answers.
    where = (purge, host, settings.database_url or str(settings.state_folder))
    with _SHARED_LOCK:
        if where not in _SHARED:
            _SHARED[where] = Purger(purge, host, open_state(settings).journal)
        return _SHARED[where]


_SHARED: dict[tuple[Any, ...], Purger] = {}
_SHARED_LOCK = threading.Lock()
