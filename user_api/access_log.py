"""One access-log line per request, in the Combined Log Format with the duration appended:

    127.0.0.1 - alice [25/Nov/2026:14:40:01 +0000] "PUT /demo HTTP/1.1" 201 42 "-" "npm/11.6.2 node/v22" 0.153

client address (what waitress took as REMOTE_ADDR: behind `--trusted-proxy`, the forwarded one),
`-` (identd), the authenticated user or `-`, the time the request arrived, the request line, the
status, the bytes of the body sent (`-` for none), Referer, User-Agent, and seconds from arrival
to the last byte handed to the server (nginx's `$request_time`). Tools that read Apache or nginx
logs (GoAccess, awstats, lnav) read the first nine fields as they are.

The user comes from the one place that authenticates (`user_api.web.authenticate`), which notes
it in the WSGI environ; a request nobody authenticated shows `-`. The token npm's logout puts in
the path is blanked (`user_api.web.loggable_path`).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, TextIO

from user_api.web import ACCESS_USER_KEY, loggable_path

ACCESS_LOGGER: Final = "registry_gen.access"

log = logging.getLogger(ACCESS_LOGGER)
StartResponse = Callable[..., Any]
_sink: Callable[[str], None] | None = None  # set by configure_server_logging: the writer thread's queue


_PLAIN: Final = re.compile(r'[ !#-\[\]-~]*')  # printable ASCII but quote and backslash: nothing to escape


def _field(value: object) -> str:
    """A quoted field as Apache writes it: quotes and backslashes escaped, controls as \\xHH."""
    text = str(value)
    if _PLAIN.fullmatch(text):
        return text
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


def _token(value: object) -> str:
    """An unquoted field: no spaces or controls (a username is URL-safe already), `-` when empty."""
    text = _field(value).replace(" ", "\\x20")
    return text or "-"


def request_line(environ: Mapping[str, Any]) -> str:
    # npm logout carries the token in the path (by protocol): blanked, as in every log line.
    path = str(environ.get("SCRIPT_NAME", "")) + loggable_path(environ.get("PATH_INFO", ""))
    query = environ.get("QUERY_STRING")
    target = path + ("?" + str(query) if query else "")
    # PEP 3333 strings are latin-1 decoded bytes: show the UTF-8 a client sent.
    try:
        target = target.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        pass
    return f"{environ.get('REQUEST_METHOD', '-')} {target} {environ.get('SERVER_PROTOCOL', 'HTTP/1.1')}"


@functools.lru_cache(maxsize=4)
def _stamp(second: int) -> str:
    """The time field: formatted once per second, however many lines share it."""
    return time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(second))


def access_line(environ: Mapping[str, Any], status: str, size: int | None, arrived: float, seconds: float) -> str:
    stamp = _stamp(int(arrived))
    return (
        f"{_token(environ.get('REMOTE_ADDR') or '-')} - {_token(environ.get(ACCESS_USER_KEY) or '-')} [{stamp}] "
        f'"{_field(request_line(environ))}" {status} {size if size else "-"} '
        f'"{_field(environ.get("HTTP_REFERER") or "-")}" "{_field(environ.get("HTTP_USER_AGENT") or "-")}" {seconds:.3f}'
    )


class _Response:
    """What the app answered, filled in by `start_response`, then by the body as it is sent."""

    def __init__(self, environ: dict[str, Any]):
        self.environ = environ
        self.arrived = time.time()
        self.started = time.perf_counter()
        self.status = "-"
        self.sent = 0
        self.declared: int | None = None
        self.logged = False

    def start(self, start_response: StartResponse, status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
        self.status = status.split(" ", 1)[0]
        length = next((v for k, v in headers if k.lower() == "content-length"), None)
        self.declared = int(length) if length and length.isdigit() else None
        return start_response(status, headers, *exc)

    def done(self, size: int | None = None) -> None:
        if self.logged:
            return
        self.logged = True
        if self.environ.get("REQUEST_METHOD") == "HEAD":
            size = 0
        seconds = time.perf_counter() - self.started
        line = access_line(self.environ, self.status, self.sent if size is None else size, self.arrived, seconds)
        if _sink is not None:
            _sink(line)
        else:  # an embedding application's own logging setup
            log.info("%s", line)


class _CountedBody:
    """The app's body, counted as the server takes it; the line is logged when the server closes it."""

    def __init__(self, body: Iterable[bytes], response: _Response):
        self.body = body
        self.response = response

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.body:
            self.response.sent += len(chunk)
            yield chunk

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.response.done()


class AccessLog:
    """WSGI middleware: the whole `serve`/`api` app, wrapped once."""

    def __init__(self, app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]):
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        response = _Response(environ)

        def recorded_start(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            return response.start(start_response, status, headers, *exc)

        try:
            body = self.app(environ, recorded_start)
        except BaseException:
            response.status = "500"
            response.done(0)
            raise
        wrapper = environ.get("wsgi.file_wrapper")
        if isinstance(wrapper, type) and isinstance(body, wrapper):
            # The server sends a file wrapper from the file itself (no Python loop): keep that, and
            # log now with the length the response declared.
            response.done(response.declared)
            return body
        return _CountedBody(body, response)


SERVER_LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_server_logging() -> None:
    """The server's log on stderr: access lines as they are (one shape for log tools), every other
    line (the writes, errors, waitress) with a UTC timestamp, its level and its source."""
    import sys

    stamped = logging.Formatter(SERVER_LOG_FORMAT, "%Y-%m-%dT%H:%M:%SZ")
    stamped.converter = time.gmtime
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler(sys.stderr))
        root.setLevel(logging.INFO)
    for handler in root.handlers:
        handler.setFormatter(stamped)
    global _sink
    access = logging.getLogger(ACCESS_LOGGER)
    if not access.handlers and _sink is None:
        _sink = _start_writer(lambda: sys.stderr)  # the lines as they are, bypassing logging (see _start_writer)
    access.setLevel(logging.INFO)
    access.propagate = False


def _start_writer(stream: Callable[[], TextIO]) -> Callable[[str], None]:
    """The process's access-line writer (`LineWriter`), its queued lines written when the process
    ends cleanly (SIGTERM runs this too: `serve_cli._stop_on_sigterm`)."""
    import atexit

    writer = LineWriter(stream)
    atexit.register(writer.close)
    return writer.put


BATCH_INTERVAL: Final = 0.2  # seconds a line may wait for others before the writer wakes for them
BATCH_LINES: Final = 512  # a batch this long is written without waiting for the interval


class LineWriter:
    """One thread writes the access lines, all that have gathered in one write; request threads
    only queue theirs. A write (and Python logging's record, caller lookup and lock) in each request
    thread cost most of the throughput: measured here 2,250 requests/s without the log, 800 with
    it written from the request threads.

    The writer wakes once per batch, not once per line: the first line after a write wakes it, it
    then gathers for `interval` (cut short by a full batch or `close`) and writes them all. Woken
    per line, it cost each fresh document read ~7 futex calls and a `write` (bench/PROFILE.md,
    freshbase). `close` writes what is queued; a killed process loses at most the lines of the
    last `interval` (a clean stop loses none)."""

    def __init__(self, stream: Callable[[], TextIO], *, interval: float = BATCH_INTERVAL, size: int = BATCH_LINES):
        import collections
        import threading

        self.stream = stream  # called each time: whoever holds stderr now (a test may swap it)
        self.interval, self.size = interval, size
        self.lines: collections.deque[str] = collections.deque()
        self.waiting = threading.Event()  # set by the first line of a batch: the writer wakes
        self.due = threading.Event()  # set by a full batch or close: the writer stops gathering
        self.closing = False
        self.thread = threading.Thread(target=self._write_batches, name="access-log", daemon=True)
        self.thread.start()

    def put(self, line: str) -> None:
        # deque.append is atomic; an Event already set is only read (no lock, no wake-up).
        self.lines.append(line)
        if not self.waiting.is_set():
            self.waiting.set()
        if len(self.lines) >= self.size and not self.due.is_set():
            self.due.set()

    def close(self, timeout: float = 5.0) -> None:
        """Writes the lines still queued, then ends the thread (lines put later are not written)."""
        self.closing = True
        self.due.set()
        self.waiting.set()
        self.thread.join(timeout=timeout)

    def _write_batches(self) -> None:
        # `close` sets `closing` before the events, so this loop never waits past a close.
        while not self.closing:
            self.waiting.wait()
            self.due.wait(self.interval)
            self.due.clear()
            self.waiting.clear()  # before the drain: a line put after it sets it again, never lost
            self._write(self._drain())
        self._write(self._drain())

    def _drain(self) -> list[str]:
        batch = []
        while True:
            try:
                batch.append(self.lines.popleft())
            except IndexError:
                return batch

    def _write(self, batch: list[str]) -> None:
        if not batch:
            return
        try:
            out = self.stream()
            out.write("\n".join(batch) + "\n")
            out.flush()
        except (OSError, ValueError):
            pass  # a closed or full stderr loses these lines, never the writer (nor a request)
