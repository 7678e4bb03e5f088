"""Helpers the mirror tests share: a registry folder whose registry.yaml proxies to an upstream, and a
real `registry-gen serve` over it."""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from registry_gen.settings import Settings
from registry_gen.state import JournalEntry, open_state
from tests.importers.upstream_server import Route, Upstream
from tests.registry_api.helpers import RegistryProcess, http
from tests.support import poll


def write_config(root: Path, upstream: str, packages: str = "  '**': {proxy: up}\n", uplink: str = "") -> Path:
    """registry.yaml: open sign-up, one uplink `up` (extra keys in `uplink`), the `packages:` lines."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "content").mkdir(exist_ok=True)
    config = root / "registry.yaml"
    config.write_text(f"signup: open\nuplinks:\n  up:\n    url: {upstream}\n{uplink}packages:\n{packages}")
    return config


def journal_entries(root: Path) -> list[JournalEntry]:
    """The change journal of the registry in `root` (its state beside root/public)."""
    with open_state(Settings(content_dir=root / "content", out_dir=root / "public")).journal() as journal:
        return journal.since(0, 1000)


@contextmanager
def mirror_serve(root: Path) -> Iterator[RegistryProcess]:
    process = RegistryProcess(root).start()
    try:
        yield process
    finally:
        process.stop()


@contextmanager
def mirroring(tmp_path: Path, upstream: Upstream, uplink: str = "") -> Iterator[tuple[Path, RegistryProcess]]:
    """A registry in `tmp_path/registry` proxying every name to `upstream` (extra uplink keys in
    `uplink`), served by a real `registry-gen serve`: its folder and the server."""
    root = tmp_path / "registry"
    write_config(root, upstream.base, uplink=uplink)
    with mirror_serve(root) as server:
        yield root, server


def registry_gen(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in its own process, in the registry's folder (its registry.yaml)."""
    return subprocess.run([sys.executable, "-m", "registry_gen", *args], cwd=root, capture_output=True, text=True, timeout=300)


def built(root: Path, relative: str) -> Path:
    """Waits until the tree holds `relative` (landings are built in the background); its path."""
    path = root / "public" / relative
    poll(path.is_file, f"{relative} in the tree", timeout=60)
    return path


def document(base: str, name: str) -> dict[str, Any]:
    reply = http("GET", base + name.replace("/", "%2f"))
    assert reply.status == 200, (reply.status, reply.body)
    return reply.json  # type: ignore[no-any-return]


def conditional(upstream: Upstream, name: str, seen: list[str | None]) -> Route:
    """`name`'s document with an ETag, answering 304 to a request that sends it back; records
    each request's If-None-Match in `seen`."""

    def route(handler: http.server.BaseHTTPRequestHandler) -> None:
        body = json.dumps(upstream.documents[name]).encode()
        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        seen.append(handler.headers.get("If-None-Match"))
        handler.send_response(304 if handler.headers.get("If-None-Match") == etag else 200)
        handler.send_header("ETag", etag)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "0" if handler.headers.get("If-None-Match") == etag else str(len(body)))
        handler.end_headers()
        if handler.headers.get("If-None-Match") != etag:
            handler.wfile.write(body)

    return route


def answering(status: int) -> Route:
    def route(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return route

