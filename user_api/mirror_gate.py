"""Reads of proxied names (`proxy:` under `packages:`), in front of the static tree.

A package document of a proxied name is answered here on every read: the mirror makes it fresh
(at most one upstream request per `maxage`), then the tree's file is sent — by `serve` itself, or
behind nginx by an `X-Accel-Redirect` to an internal location over the same file, so nginx still
sends it (gzip sibling, ETag, 304s). A tarball the tree lacks comes here too (nginx's `try_files`
falls back to the API) and is fetched, checked and landed before it is sent.

The read rules are checked first, here, whatever the host: a denied read never reaches an uplink.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import quote

from registry_gen.access import package_of_served_path
from registry_gen.hosting import tag_documents
from registry_gen.layout import (
    ABBREVIATED_DOCUMENT,
    ABBREVIATED_TYPE,
    DOCUMENT_CACHE,
    IMMUTABLE_CACHE,
    JSON_TYPE,
    PACKAGE_DOCUMENT,
    TARBALL_TYPE,
)
from registry_gen.mirror.service import MirrorService, version_of
from registry_gen.packument import abbreviate, dumps
from registry_gen.settings import Settings
from registry_gen.writes import WriteService
from user_api.held_answers import answer_body
from user_api.negotiation import parse_accept
from user_api.read_access import ReadGuard
from user_api.web import error_status, is_expected_outage, loggable_path, wsgi_path

StartResponse = Callable[..., Any]
log = logging.getLogger(__name__)
# nginx's own locations over the tree's files (registry_gen/templates/nginx_site.conf.j2), and the
# header through which it asks for them (a request without it is answered with the file itself).
ACCEL_DOCUMENTS: Final = "/-/registry-gen/mirror-documents/"
ACCEL_TARBALLS: Final = "/-/registry-gen/mirror-tarballs/"
ACCEL_HEADER: Final = "HTTP_X_REGISTRY_GEN_ACCEL"
_REPLIES: Final = {400: "400 Bad Request", 401: "401 Unauthorized", 403: "403 Forbidden", 404: "404 Not Found",
                   409: "409 Conflict", 500: "500 Internal Server Error", 502: "502 Bad Gateway",
                   503: "503 Service Unavailable", 504: "504 Gateway Timeout"}  # fmt: skip


class Tree(Protocol):
    def locate(self, path: str, environ: dict[str, Any]) -> str | None: ...

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]: ...


class MirrorGate:
    def __init__(self, settings: Settings, writes: WriteService, tree: Tree, guard: ReadGuard | None):
        self.settings = settings
        self.service = MirrorService(settings, writes)
        self.tree = tree
        self.guard = guard
        # What was fetched lands before the process goes; verdicts whose inputs changed while it
        # was down (registry.yaml, advisories) are made again at once, not at the next read.
        atexit.register(self.service.settle)
        threading.Thread(target=self._reconcile, name="mirror-reconcile", daemon=True).start()

    def _reconcile(self) -> None:
        try:
            changed = self.service.reconcile()
        except Exception:  # noqa: BLE001 - a failed sweep leaves the per-read checks to do it
            log.exception("mirror: deciding again what changed policies hold back failed")
            return
        if changed:
            log.info("mirror: verdicts made again for %d packages whose policy changed", len(changed))

    def claims(self, path: str) -> bool:
        """A read of a proxied package's document or tarball (its HTML pages stay static)."""
        if path.startswith("/-/web/"):
            return False
        name = package_of_served_path(path)
        return name is not None and self.service.proxied(name) is not None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            return self._serve(environ, start_response)
        except Exception as error:  # noqa: BLE001 - the gate's edge: every error becomes its JSON reply (one table)
            status, message, headers = error_status(error)
            if status >= 500 and not is_expected_outage(error):
                log.exception("mirror: GET %s failed", loggable_path(environ.get("PATH_INFO")))
            return _reply(start_response, status, message, environ.get("REQUEST_METHOD") == "HEAD", headers, sys.exc_info())

    def _serve(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = wsgi_path(environ)
        name = str(package_of_served_path(path))
        head = environ.get("REQUEST_METHOD") == "HEAD"
        status = self.guard.status(name, environ) if self.guard is not None else 200
        if status != 200:
            return _reply(start_response, status, "log in to read this package (npm login)" if status == 401 else "not found", head)
        tarball = _tarball_file(path, name)
        if tarball is not None:
            in_tree = self.tree.locate(path, environ) is not None
            outcome = self.service.held_back(name, version_of(name, tarball)) if in_tree else self.service.tarball(name, tarball)
        else:
            outcome = self.service.document(name)
        if outcome is not None and not outcome.ok:
            return _reply(start_response, outcome.status, outcome.message, head)
        if outcome is not None and outcome.document is not None:
            return _send_document(outcome.document, path, name, environ, start_response)
        if outcome is not None and outcome.file is not None:
            sent = _send_file(outcome.file, environ, start_response)
            if sent is not None:
                return sent  # else it landed meanwhile: the tree has it
        if environ.get(ACCEL_HEADER):
            return self._accelerated(self._located(path, name, environ, tarball is None), environ, start_response, tarball is not None)
        if tarball is None:
            self.service.ensure_built(name)
        return self.tree(environ, start_response)

    def _located(self, path: str, name: str, environ: dict[str, Any], document: bool) -> str | None:
        """The tree's file for this read, looked up once (a fresh document read costs its freshness
        row and this lookup); a document the tree lacks is built first, when it is mirrored."""
        relative = self.tree.locate(path, environ)
        if relative is None and document and self.service.ensure_built(name):
            relative = self.tree.locate(path, environ)
        return relative

    def _accelerated(self, relative: str | None, environ: dict[str, Any], start_response: StartResponse, tarball: bool) -> Iterable[bytes]:
        """nginx sends the file: its location over the tree, the file this request resolves to."""
        if relative is None:
            return _reply(start_response, 404, "not found", environ.get("REQUEST_METHOD") == "HEAD")
        prefix = ACCEL_TARBALLS if tarball else ACCEL_DOCUMENTS
        start_response("200 OK", [("X-Accel-Redirect", prefix + quote(relative, safe="/@")), ("Content-Length", "0")])
        return []


def _send_document(packument: dict[str, Any], path: str, name: str, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """A document not built into the tree yet, as the tree will serve it: the full or abbreviated
    form (by Accept), a tag's version (`/<name>/<tag>`), or the dist-tags."""
    rest = path.strip("/").removeprefix("-/package/")[len(name) :].strip("/")
    content_type = JSON_TYPE
    if rest == "dist-tags":
        body: Any = packument["dist-tags"]
    elif rest and rest not in (PACKAGE_DOCUMENT, ABBREVIATED_DOCUMENT):
        body = tag_documents(packument).get(rest)
        if body is None:
            return _reply(start_response, 404, "not found", environ.get("REQUEST_METHOD") == "HEAD")
    elif rest == ABBREVIATED_DOCUMENT or any(m == ABBREVIATED_TYPE and q > 0 for m, q in parse_accept(str(environ.get("HTTP_ACCEPT") or ""))):
        body, content_type = abbreviate(packument), ABBREVIATED_TYPE
    else:
        body = packument
    data = dumps(body)
    headers = [("Content-Type", content_type), ("Content-Length", str(len(data))), ("Cache-Control", DOCUMENT_CACHE),
               ("Vary", "Accept"), ("ETag", f'"{hashlib.sha256(data).hexdigest()[:32]}"')]  # fmt: skip
    start_response("200 OK", headers)
    # A full document is often over waitress's 1 MB spool: sent from memory, not a temporary file.
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else answer_body(data, environ)


def _send_file(path: Path, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes] | None:
    """A tarball fetched and checked, not built into the tree yet; None when it is gone (landed)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - handed to the server, which closes it
    except FileNotFoundError:
        return None
    size = os.fstat(handle.fileno()).st_size
    start_response("200 OK", [("Content-Type", TARBALL_TYPE), ("Content-Length", str(size)), ("Cache-Control", IMMUTABLE_CACHE)])
    if environ.get("REQUEST_METHOD") == "HEAD":
        handle.close()
        return []
    if "wsgi.file_wrapper" in environ:
        return environ["wsgi.file_wrapper"](handle, 64 * 1024)  # type: ignore[no-any-return]
    with handle:
        return [handle.read()]


def _tarball_file(path: str, name: str) -> str | None:
    """The file name of a tarball request (`/<name>/-/<file>.tgz`), or None for a document."""
    if path.startswith("/-/"):
        return None  # /-/package/<name>/dist-tags
    rest = path.lstrip("/")[len(name) :]
    parts = rest.strip("/").split("/")
    return parts[1] if len(parts) == 2 and parts[0] == "-" and parts[1].endswith(".tgz") else None


def _reply(
    start_response: StartResponse, status: int, message: str, head: bool, extra: dict[str, str] | None = None, exc_info: Any = None
) -> list[bytes]:  # fmt: skip
    body = json.dumps({"error": message}).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
    if status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="registry"'))
    headers += list((extra or {}).items())
    start_response(_REPLIES.get(status, f"{status} Error"), headers, exc_info)
    return [] if head else [body]
