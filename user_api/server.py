"""One WSGI app for `registry-gen serve`: the static tree for reads, the APIs for the rest.

GET/HEAD are answered from OUT as a static host would (npm's paths map to files; see
registry_gen.build for the layout), with the headers clients rely on: content types, strong
ETag + Last-Modified + 304, explicit Cache-Control (tarballs immutable, documents revalidated),
the abbreviated document for `Accept: application/vnd.npm.install-v1+json` (with Vary: Accept),
and the `.gz` siblings for gzip-capable clients. A few GET paths are dynamic (whoami, search, the
web login, user documents, tokens) and go to the registry app, like every other method;
`/user*` and `/-/user-api/*` go to the user app. `registry-gen api` uses the same dispatcher
without the static part, for deployments where nginx serves the files.
"""

from __future__ import annotations

import functools
import json
import mimetypes
import os
import stat
from collections.abc import Callable, Iterable
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from typing import Any, Final

from registry_gen.build import ABBREVIATED_FILE, PACKUMENT_FILE
from registry_gen.layout import (
    ABBREVIATED_TYPE,
    API_READ_PREFIXES,
    DOCUMENT_CACHE,
    IMMUTABLE_CACHE,
    JSON_TYPE,
    USER_API_PREFIXES,
)
from registry_gen.hosting import document_cache
from registry_gen.objectstore import ObjectStore
from registry_gen.ownership import erase_maintainer_email
from registry_gen.purge import cache_key, shared_cache
from registry_gen.refresher import IndexRewrites
from registry_gen.settings import Settings
from registry_gen.signing import KEYS_DOCUMENT
from user_api.app import create_user_app
from user_api.mirror_gate import MirrorGate
from user_api.negotiation import parse_accept
from user_api.read_access import READ_CHECK_PATH, ReadGuard, allow_all, signing
from user_api.registry_context import CONTEXT_KEY
from user_api.registry_routes import create_registry_app
from user_api.store import UserStore
from user_api import store_audit
from user_api.web import client_address, etag_matches, wsgi_path

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

TARBALL_CACHE: Final = IMMUTABLE_CACHE
# GET paths whose answer depends on the caller or the query: never files (registry_gen.layout).
DYNAMIC_GET_PREFIXES: Final = API_READ_PREFIXES
USER_APP_PREFIXES: Final = USER_API_PREFIXES
# Files of the tree below a dynamic prefix: the registry's public signing keys.
STATIC_UNDER_DYNAMIC: Final = ("/" + KEYS_DOCUMENT,)
SEARCH_PATH: Final = "/-/v1/search"
STREAM_THRESHOLD: Final = 256 * 1024


def is_user_app_path(path: str) -> bool:
    return path == "/user" or path.startswith(USER_APP_PREFIXES)


def is_dynamic_get(path: str) -> bool:
    return path.startswith(DYNAMIC_GET_PREFIXES) and path not in STATIC_UNDER_DYNAMIC


def _json_reply(start_response: StartResponse, status: str, data: Any, head: bool = False) -> list[bytes]:
    body = json.dumps(data).encode("utf-8")
    start_response(status, [
        ("Content-Type", JSON_TYPE), ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
    ])
    return [] if head else [body]


def _wants_abbreviated(accept: str) -> bool:
    return any(media == ABBREVIATED_TYPE and quality > 0 for media, quality in parse_accept(accept))


class StaticTree:
    """Serves OUT like a careful static host (the same rules the nginx config encodes).

    Every read of `serve` comes through here, so the path is kept lean (issue 15, goal 5): string
    paths and `os.stat` rather than pathlib objects (their parsing and `str()` were most of a
    request's cost), one `open` + `fstat` for the file sent, and Last-Modified values remembered."""

    def __init__(self, root: Path, *, document_cache: str = DOCUMENT_CACHE, cache_key_header: str | None = None):
        self.root = os.fspath(root).rstrip("/") or "/"
        self.document_cache = document_cache  # with s-maxage when a cache in front is purged (registry_gen.purge)
        self.cache_key_header = cache_key_header  # the surrogate-key header that cache reads, if any

    def _locate(self, path: str) -> list[str] | None:
        segments = [s for s in path.split("/") if s]
        # Hidden names (temp files, an old tree's .registry-gen/) and climbing out are never served.
        if any(s.startswith(".") or "\\" in s or "\x00" in s for s in segments):
            return None
        return segments

    def _pick(self, segments: list[str], environ: dict[str, Any]) -> tuple[str, str, bool, bool] | None:
        """(file, content type, varies by Accept, the request named a folder) for a request, or None."""
        target = "/".join([self.root, *segments]) if segments else self.root
        mode = _mode(target)
        is_web = segments[:2] == ["-", "web"]
        if stat.S_ISDIR(mode):
            abbreviated = target + "/" + ABBREVIATED_FILE
            if not is_web and stat.S_ISREG(_mode(abbreviated)):
                if _wants_abbreviated(str(environ.get("HTTP_ACCEPT") or "")):
                    return abbreviated, ABBREVIATED_TYPE, True, True
                return target + "/" + PACKUMENT_FILE, JSON_TYPE, True, True
            target = target + "/" + PACKUMENT_FILE
            if not stat.S_ISREG(_mode(target)):
                return None
            return target, ("text/html; charset=utf-8" if is_web else JSON_TYPE), False, True
        if not stat.S_ISREG(mode):
            return None
        name = segments[-1]
        if name.endswith(".tgz"):
            return target, "application/octet-stream", False, False
        if is_web or ("." in name and not name.endswith((".html", ".json"))):
            return target, _guessed_type(name), False, False
        return target, (ABBREVIATED_TYPE if name == ABBREVIATED_FILE else JSON_TYPE), False, False

    def locate(self, path: str, environ: dict[str, Any]) -> str | None:
        """The file a GET of `path` (decoded) would send, relative to the tree; None: none."""
        segments = self._locate(path)
        picked = None if segments is None else self._pick(segments, environ)
        if picked is None:
            return None
        return picked[0][len(self.root) :].lstrip("/")

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        head = environ.get("REQUEST_METHOD") == "HEAD"
        path = wsgi_path(environ)
        if path == "/":
            start_response("302 Found", [("Location", "/-/web/"), ("Content-Length", "0")])
            return []
        segments = self._locate(path)
        picked = None if segments is None else self._pick(segments, environ)
        if picked is None or segments is None:
            return _json_reply(start_response, "404 Not Found", {"error": "not found"}, head)
        target, content_type, varies, asked_for_folder = picked
        if segments[:2] == ["-", "web"] and asked_for_folder and not path.endswith("/"):
            # HTML pages use relative links: give a folder its trailing slash, as static hosts do
            # (a request naming the file itself, .../index.html, is served as it is).
            query = environ.get("QUERY_STRING")
            start_response("301 Moved Permanently", [("Location", path + "/" + ("?" + query if query else "")), ("Content-Length", "0")])
            return []
        return self._send(environ, start_response, target, content_type, varies, head)

    def _send(
        self, environ: dict[str, Any], start_response: StartResponse, target: str, content_type: str, varies: bool, head: bool
    ) -> Iterable[bytes]:
        vary = ["Accept"] if varies else []
        encoding = None
        identity = target
        is_tarball = target.endswith(".tgz")
        if not is_tarball and not target.endswith(".gz") and stat.S_ISREG(_mode(target + ".gz")):
            vary.append("Accept-Encoding")
            if "gzip" in str(environ.get("HTTP_ACCEPT_ENCODING") or "").lower():
                target, encoding = target + ".gz", "gzip"
        try:
            handle = open(target, "rb")
        except (FileNotFoundError, IsADirectoryError):
            return _json_reply(start_response, "404 Not Found", {"error": "not found"}, head)
        sent = os.fstat(handle.fileno())
        etag, other_coding = _etags(identity, sent, gzip=encoding is not None)
        headers = [
            ("ETag", etag),
            ("Last-Modified", _http_date(sent.st_mtime)),
            ("Cache-Control", TARBALL_CACHE if is_tarball else self.document_cache),
            ("X-Content-Type-Options", "nosniff"),
        ]
        if self.cache_key_header is not None:
            headers.append((self.cache_key_header, cache_key(target[len(self.root) :].lstrip("/"))))
        if vary:
            headers.append(("Vary", ", ".join(vary)))
        if self._not_modified(environ, (etag, other_coding), sent.st_mtime):
            handle.close()
            start_response("304 Not Modified", headers)
            return []
        headers += [("Content-Type", content_type), ("Content-Length", str(sent.st_size))]
        if encoding:
            headers.append(("Content-Encoding", encoding))
        start_response("200 OK", headers)
        if head:
            handle.close()
            return []
        if sent.st_size > STREAM_THRESHOLD and "wsgi.file_wrapper" in environ:
            return environ["wsgi.file_wrapper"](handle, 64 * 1024)  # type: ignore[no-any-return]
        with handle:
            return [handle.read()]

    @staticmethod
    def _not_modified(environ: dict[str, Any], etags: tuple[str, str], mtime: float) -> bool:
        if_none_match = environ.get("HTTP_IF_NONE_MATCH")
        if if_none_match is not None:
            # If-Modified-Since is ignored then (RFC 9110). Either coding's tag revalidates: both
            # name the same document, and a client may drop Accept-Encoding between requests.
            return any(etag_matches(str(if_none_match), etag, weak=True) for etag in etags)
        since = environ.get("HTTP_IF_MODIFIED_SINCE")
        if not since:
            return False
        try:
            return int(mtime) <= parsedate_to_datetime(str(since)).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return False


def _mode(path: str) -> int:
    """The file type bits of `path` (following links), 0 when it cannot be stat'ed: what
    `Path.is_file()`/`is_dir()` answer, without building a Path."""
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):
        return 0


@functools.lru_cache(maxsize=256)
def _guessed_type(name: str) -> str:
    guessed = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if guessed.startswith("text/") or guessed in ("application/javascript", "image/svg+xml"):
        guessed += "; charset=utf-8"
    return guessed


@functools.lru_cache(maxsize=4096)
def _http_date(mtime: float) -> str:
    """Last-Modified of a file: the tree's files keep their times, so each is formatted once."""
    return formatdate(mtime, usegmt=True)


def _etags(identity: str, served: os.stat_result, *, gzip: bool) -> tuple[str, str]:
    """(the tag of what is sent, the tag of the other coding): both derive from the uncompressed
    file, so the plain and the gzip answer of one document differ only by "-gz"."""
    base = served
    if gzip:
        try:
            base = os.stat(identity)
        except OSError:  # a rebuild between the two opens: the gzip file's own stat still names it
            base = served
    plain = f'"{base.st_size:x}-{base.st_mtime_ns:x}"'
    zipped = plain[:-1] + '-gz"'
    return (zipped, plain) if gzip else (plain, zipped)


STARTING_RETRY_AFTER: Final = "5"


def starting(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """What `registry-gen api` answers while it starts (the sync from the bucket, the build, the
    upload): a 503 problem with Retry-After, so a client or a balancer tries again or elsewhere."""
    import uuid

    from user_api import errors
    from user_api.negotiation import JSON
    from user_api.problems import PROBLEM_TYPES_BY_ERROR, encode_problem, problem_document

    detail = "this instance is starting (bringing its work folder and the tree up to date); retry shortly"
    document = problem_document(PROBLEM_TYPES_BY_ERROR[errors.StoreUnavailable], detail=detail, request_id=str(uuid.uuid4()))
    body, content_type = encode_problem(document, JSON)
    start_response("503 Service Unavailable", [
        ("Content-Type", content_type), ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
        ("Retry-After", STARTING_RETRY_AFTER),
    ])  # fmt: skip
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]


def create_server_app(
    settings: Settings, store: UserStore, *, static: bool = True, refresher: IndexRewrites | None = None,
    after_write: Callable[[], None] | None = None, objects: ObjectStore | None = None,
) -> WsgiApp:
    """The combined app; `static=False` for `registry-gen api` behind a static host. `after_write`
    is called after each request of a writing method to the registry app (it wakes the hooks'
    deliverer: the reply is made already, so the write never waits on a delivery). `objects`:
    content and tree in buckets (`registry-gen api` with `storage:`, registry_gen.objectstore)."""
    registry_app = create_registry_app(settings, store, refresher=refresher, objects=objects)
    writes = registry_app.config[CONTEXT_KEY].writes
    # A deleted account's email leaves the packages through the registry's own writes (its locks,
    # journal, build, tree bucket and purge), one service for every request.
    forget_maintainer = functools.partial(erase_maintainer_email, settings, service=writes)
    user_app = create_user_app(settings, store, forget_maintainer=forget_maintainer)
    shared = shared_cache(settings.purge)
    plain_tree = StaticTree(
        settings.out_dir, document_cache=document_cache(0, shared), cache_key_header=shared.key_header if shared else None
    )
    tree: WsgiApp | None = plain_tree if static else None
    # Read rules (registry.yaml `packages:`): checked here for `serve`, asked by nginx otherwise.
    guard = ReadGuard(settings, store) if settings.packages.in_force else None
    if tree is not None and guard is not None:
        tree = guard.protect(tree)
    read_check = signing(guard.decision if guard is not None else allow_all, objects.signer if objects is not None else None)
    # Proxied names (`proxy:` in `packages:`): their reads go through the mirror first.
    mirror = MirrorGate(settings, writes, plain_tree, guard) if settings.packages.proxies else None

    def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        with store_audit.during_request(environ, client_address(environ)):
            return route(environ, start_response)

    def route(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = wsgi_path(environ)
        method = environ.get("REQUEST_METHOD")
        if is_user_app_path(path):
            answer = user_app(environ, start_response)
            if after_write is not None and method not in ("GET", "HEAD"):
                after_write()  # a redeliver (POST /-/user-api/hooks/...) is attempted now, not at the next timer
            return answer  # type: ignore[no-any-return]
        if path == READ_CHECK_PATH:
            return read_check(environ, start_response)
        if guard is not None and path == SEARCH_PATH:
            return guard.search(environ, start_response)  # each caller sees what they may read
        if mirror is not None and method in ("GET", "HEAD") and mirror.claims(path):
            return mirror(environ, start_response)
        if tree is not None and method in ("GET", "HEAD") and not is_dynamic_get(path):
            return tree(environ, start_response)
        reply = registry_app(environ, start_response)
        if after_write is not None and method not in ("GET", "HEAD"):
            after_write()
        return reply  # type: ignore[no-any-return]

    return application
