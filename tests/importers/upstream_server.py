"""A hostile npm-protocol registry for the import tests: a real HTTP server on 127.0.0.1 (a thread,
ephemeral port) serving the package documents and tarballs a test composes, recording every
request, and answering chosen paths with whatever a hostile server does (`routes`)."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from registry_gen.importers.integrity import sri_sha512
from registry_gen.names import split_name
from tests.registry_api.helpers import tarball

Route = Callable[[http.server.BaseHTTPRequestHandler], None]


@dataclass
class Hit:
    path: str
    headers: dict[str, str]


@dataclass
class Upstream:
    base: str = ""
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    routes: dict[str, Route] = field(default_factory=dict)
    hits: list[Hit] = field(default_factory=list)

    def tarball_path(self, name: str, version: str) -> str:
        return f"/{name}/-/{split_name(name)[1]}-{version}.tgz"

    def publish(self, name: str, version: str, *, inside: dict[str, Any] | None = None, entry: dict[str, Any] | None = None,
                tag: str | None = "latest", time: str = "2015-06-01T00:00:00.000Z", **fields: Any) -> bytes:  # fmt: skip
        """Adds name@version: a real tarball (whose package.json is `inside`, by default name,
        version and `fields`) and its version entry (`entry` overrides its fields)."""
        manifest = {"name": name, "version": version, **fields}
        data = tarball(**{"name": name, "version": version, **fields, **(inside or {})})
        path = self.tarball_path(name, version)
        self.files[path] = data
        doc = self.documents.setdefault(name, {"name": name, "versions": {}, "time": {"created": time}, "dist-tags": {}})
        dist = {"tarball": self.base.rstrip("/") + path, "integrity": sri_sha512(data), "shasum": hashlib.sha1(data).hexdigest()}
        doc["versions"][version] = {**manifest, "dist": dist, **(entry or {})}
        doc["time"][version] = doc["time"]["modified"] = time
        if tag:
            doc["dist-tags"][tag] = version
        return data

    def hits_of(self, path: str) -> list[Hit]:
        return [hit for hit in self.hits if hit.path == path]


class _Handler(http.server.BaseHTTPRequestHandler):
    upstream: Upstream

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self.upstream.hits.append(Hit(self.path, {k.lower(): v for k, v in self.headers.items()}))
        path = unquote(self.path.split("?")[0])
        if path in self.upstream.routes:
            self.upstream.routes[path](self)
        elif path in self.upstream.files:
            self.reply(200, self.upstream.files[path], "application/octet-stream")
        elif path.lstrip("/") in self.upstream.documents:
            self.reply(200, json.dumps(self.upstream.documents[path.lstrip("/")]).encode(), "application/json")
        else:
            self.reply(404, b'{"error": "not found"}', "application/json")

    def reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass  # the client hung up (a refused download): nothing to tell it

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@contextmanager
def hostile_upstream(keep_alive: bool = False) -> Iterator[Upstream]:
    """`keep_alive`: HTTP/1.1, connections kept between requests (every answer of its own has a
    Content-Length), as the public registry keeps them; else one connection per request."""
    upstream = Upstream()
    attributes = {"upstream": upstream, "protocol_version": "HTTP/1.1" if keep_alive else "HTTP/1.0"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Handler,), attributes))
    server.daemon_threads = True
    upstream.base = f"http://127.0.0.1:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield upstream
    finally:
        server.shutdown()
        server.server_close()


def redirect_to(location: str) -> Route:
    def route(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return route


def make_root(tmp_path: Path, extra: str = "") -> tuple[Path, Path]:
    """A registry folder (content/, public/, data/) and its registry.yaml."""
    root = tmp_path / "registry"
    root.mkdir(parents=True)
    config = root / "registry.yaml"
    config.write_text(f"content_dir: {root / 'content'}\nout_dir: {root / 'public'}\ndata_dir: {root / 'data'}\n{extra}")
    return root, config


def served(root: Path, name: str) -> dict[str, Any] | None:
    path = root / "public" / name / "index.html"
    return json.loads(path.read_bytes()) if path.is_file() else None
