"""Issue 28, caches in front: what the purge sends, its bounds, its config, and nginx's API failover.

The cache itself is real in test_cache_purge.py (Varnish + xkey); here the purge endpoint is a
recording or hostile server on loopback, so each request of a purge can be checked.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from registry_gen.cli import main as registry_gen
from registry_gen.purge import PurgeSettings, Purger, purge_targets
from registry_gen.settings import Settings
from registry_gen.state import open_state
from tests.hosts.servers import Recorded, free_port, nginx_server, recording_upstream
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball

NAME = "@purge/demo"


def _wait_for(condition, seconds: float, what: str) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds}s: {what}")
        time.sleep(0.02)


def test_serve_purges_exactly_what_a_publish_changed_and_tags_its_answers(tmp_path: Path) -> None:
    with recording_upstream() as (purge_port, records):
        (tmp_path / "registry.yaml").write_text(
            f"signup: open\nindex_refresh_seconds: 0.5\npurge:\n  url: http://127.0.0.1:{purge_port}{{path}}\n  key_header: xkey\n"
            # The test reads what the publish purged before its 201: the attempt gets the longest
            # budget, not the default 2 s a loaded machine's round trips to this Python server can
            # outlast (the purge is then owed, and sent after the 201).
            "  timeout_seconds: 30\n"
        )
        registry = RegistryProcess(tmp_path).start()
        try:
            token = add_user(registry.base, "purger")
            data = tarball(NAME, "1.0.0")
            assert http("PUT", registry.base + "@purge%2fdemo", body=publish_body(NAME, "1.0.0", data), token=token).status == 201
            purges = [r for r in list(records) if r.method == "PURGE"]  # sent before the 201
            _check_publish_purge(purges, urlsplit(registry.base).netloc)
            # The refresher's rewrite of -/all a little later is purged too.
            _wait_for(lambda: any(r.path == "/-/all" for r in list(records)), 20, "the refresher's purge of /-/all")
            document = http("GET", registry.base + "@purge%2fdemo")
            assert document.headers["cache-control"] == "public, max-age=0, must-revalidate, s-maxage=31536000"
            assert document.headers["xkey"] == NAME and document.headers["etag"]
            archive = http("GET", registry.base + f"{NAME}/-/demo-1.0.0.tgz")
            assert archive.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert archive.headers["xkey"] == f"/{NAME}/-/demo-1.0.0.tgz"  # its own key: a package purge leaves it
        finally:
            registry.stop()


def _check_publish_purge(purges: list[Recorded], host: str) -> None:
    assert purges, "the publish was answered before any purge"
    assert {r.headers["host"] for r in purges} == {host}  # the public host: the cache hashed on it
    by_key = [r for r in purges if "xkey" in r.headers]
    assert len(by_key) == 1 and NAME in by_key[0].headers["xkey"].split()
    paths = {r.path for r in purges if "xkey" not in r.headers}
    assert {"/@purge/demo", "/@purge%2fdemo", "/@purge%2Fdemo", "/@purge/demo/-/demo-1.0.0.tgz"} <= paths
    assert all(p.startswith(("/@purge/demo", "/@purge%2fdemo", "/@purge%2Fdemo", "/-/")) for p in paths), paths
    assert not any(".gz" in p or "/." in p for p in paths)


@contextmanager
def _silent_then_answering() -> Iterator[tuple[int, threading.Event, list[bytes]]]:
    """A purge endpoint that accepts and says nothing until `answer` is set, then answers 200."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    answer, stop, seen = threading.Event(), threading.Event(), []

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                seen.append(connection.recv(65536))
                if answer.is_set():
                    connection.sendall(b"HTTP/1.1 200 Purged\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                else:
                    stop.wait(5)  # holds the connection silent

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1]), answer, seen
    finally:
        stop.set()
        thread.join(10)
        server.close()


def test_a_silent_cache_holds_a_purge_for_its_timeout_only_and_the_purge_is_retried() -> None:
    with _silent_then_answering() as (port, answer, seen):
        purger = Purger(PurgeSettings(url=f"http://127.0.0.1:{port}/", key_header="xkey", timeout_seconds=0.5), "registry.example")
        try:
            start = time.monotonic()
            purger.after_build(["demo/index.html", "demo/abbreviated.json"], [])  # never raises
            assert time.monotonic() - start < 1.5
            assert (purger.purged, purger.failed) == (0, 1)
            start = time.monotonic()
            purger.after_build(["other/index.html"], [])  # joins the waiting retry: no second wait on the cache
            assert time.monotonic() - start < 0.3
            answer.set()
            _wait_for(lambda: purger.purged == 1, 10, "the retry of the failed purge")
            assert b"xkey: demo other" in seen[-1] and b"Host: registry.example" in seen[-1]
        finally:
            purger.close()


class _HeldPurges(BaseHTTPRequestHandler):
    """A cache that counts PURGEs and holds the first one open until `release` is set."""

    purges: list[str]
    arrived: threading.Event
    release: threading.Event

    def do_PURGE(self) -> None:  # noqa: N802 - the HTTP method's name
        self.purges.append(self.headers.get("xkey", ""))
        if len(self.purges) == 1:
            self.arrived.set()
            self.release.wait(60)  # a bound for a broken test, not a synchronisation
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


class _SignalingLock:
    """The purger's retry lock, unchanged, but saying when the second retry waits on it."""

    def __init__(self, inner: threading.Lock, waiting: threading.Event) -> None:
        self.inner, self.waiting = inner, waiting

    def __enter__(self) -> None:
        if threading.current_thread().name == "second-retry":
            self.waiting.set()
        self.inner.acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


class _WatchedJournal:
    """The state's journal, saying when the second retry has read the owed purges."""

    def __init__(self, opened: Callable[[], object], read: threading.Event) -> None:
        self.journal, self.read = opened(), read

    def __enter__(self) -> "_WatchedJournal":
        self.journal.__enter__()  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        self.journal.__exit__(*exc)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.journal, name)

    def owed_purges(self, *args: object, **kwargs: object) -> object:
        found = self.journal.owed_purges(*args, **kwargs)  # type: ignore[attr-defined]
        if threading.current_thread().name == "second-retry":
            self.read.set()
        return found


def test_two_retries_at_once_send_an_owed_purge_once(tmp_path: Path) -> None:
    """The leader's tick and the purger's own timer may retry the owed purges at the same moment:
    the second retry starts while the first one's PURGE is in flight, and sends nothing (red without
    the purger's retry lock: it reads the same due row and sends the PURGE again)."""
    purges: list[str] = []
    arrived, release = threading.Event(), threading.Event()
    handler = type("Held", (_HeldPurges,), {"purges": purges, "arrived": arrived, "release": release})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    opened = open_state(Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data")).journal
    with opened() as journal:
        journal.owe_purge(("/demo",), ("demo",), time.time())  # due now
    purger = Purger(PurgeSettings(url=f"http://127.0.0.1:{server.server_address[1]}/", key_header="xkey", timeout_seconds=30), None, lambda: _WatchedJournal(opened, release))
    purger._retrying = _SignalingLock(purger._retrying, release)  # type: ignore[assignment] # the second retry's wait releases the first PURGE
    first = threading.Thread(target=purger.retry_owed, name="first-retry")
    second = threading.Thread(target=purger.retry_owed, name="second-retry")
    try:
        first.start()
        assert arrived.wait(60), "the first retry sent no PURGE"
        second.start()  # while the first PURGE is held open
        first.join(60)
        second.join(60)
        assert not first.is_alive() and not second.is_alive()
        assert purges == ["demo"], purges
        with opened() as journal:
            assert journal.owed_purges(math.inf) == []
    finally:
        release.set()
        purger.close()
        server.shutdown()
        server.server_close()


def test_purge_targets_name_every_spelling_and_skip_private_files() -> None:
    targets = purge_targets(["@s/n/index.html", "@s/n/index.html.gz", "@s/n/-/n-1.0.0.tgz", "public/.tmp-x", "-/all/index.html"])
    assert targets.keys == ("@s/n", "/@s/n/-/n-1.0.0.tgz", "-")
    assert {"/@s/n", "/@s/n/", "/@s%2fn", "/@s%2Fn", "/@s/n/index.html", "/-/all", "/@s/n/-/n-1.0.0.tgz"} <= set(targets.paths)
    assert not any(".tmp" in p or p.endswith(".gz") for p in targets.paths)


@pytest.mark.parametrize(
    ("purge", "named"),
    [
        ("purge:\n  url: ftp://cache/\n  key_header: xkey\n", "purge.url must be an http(s) URL"),
        ("purge:\n  url: http://cache/\n", "purge.url needs {path}"),
        ("purge:\n  url: http://cache{path}\n  timeout_seconds: 300\n", "purge.timeout_seconds must be"),
        ("purge:\n  url: http://cache{path}\n  method: PURGE ME\n", "purge.method must be a single word"),
        ("purge:\n  command: /bin/purge\n", "purge.command must be a list"),
        ("purge:\n  url: http://cache{path}\n  ttl: 5\n", "unknown key purge.ttl"),
    ],
)
def test_a_bad_purge_setting_is_one_error_line(purge: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text(purge)
    assert registry_gen(["host-config", "nginx", "--config", str(config), "--tree", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and named in err and str(config) in err and "Traceback" not in err


def test_nginx_skips_a_dead_api_instance(tmp_path: Path) -> None:
    """Two --api-upstream: the second refuses connections; every write reaches the first."""
    (tmp_path / "public").mkdir()
    dead = f"127.0.0.1:{free_port()}"
    with recording_upstream() as (live_port, records):
        upstreams = ["--api-upstream", f"127.0.0.1:{live_port}", "--api-upstream", dead]
        with nginx_server(tmp_path / "public", tmp_path / "nginx", free_port(), extra_args=upstreams) as base:
            conf = (tmp_path / "nginx" / "nginx.conf").read_text()
            assert f"server {dead} max_fails=1" in conf and f"server 127.0.0.1:{live_port} max_fails=1" in conf
            statuses = [http("PUT", base + f"pkg-{i}", body={"n": i}).status for i in range(4)]
    assert statuses == [201] * 4
    assert [r.path for r in records] == [f"/pkg-{i}" for i in range(4)]


def test_a_write_purges_at_once_while_a_retry_waits_only_for_purges_not_yet_due(tmp_path: Path) -> None:
    """A retry (the leader's tick) that finds purges owed by writes still in flight schedules
    itself again a second later; a write finishing meanwhile must still purge at once, not join
    that timer (the bench's 201-to-fresh-through-the-cache tail was up to ~1 s, at its goal)."""
    with recording_upstream() as (port, records):
        opened = open_state(Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data")).journal
        purger = Purger(PurgeSettings(url=f"http://127.0.0.1:{port}/", key_header="xkey", timeout_seconds=30), None, opened)
        try:
            purger.owe(["in-flight/index.html"])  # another write's purge, due in OWED_SETTLE_SECONDS
            purger.retry_owed()  # nothing due: it schedules its next look
            assert purger._timer is not None
            owed = purger.owe(["fresh-kit/index.html"])
            purger.after_build(["fresh-kit/index.html"], (), owed)
            assert [r.headers.get("xkey") for r in records] == ["fresh-kit"]  # sent before after_build returned
        finally:
            purger.close()
