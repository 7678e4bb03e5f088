"""What a fresh proxied document read costs the API behind nginx (the app `registry-gen api` runs,
in this process, over a registry proxying to an upstream the test starts on loopback): its
freshness row and one lookup of the tree's file, then the X-Accel-Redirect nginx serves. Every
document an install reads comes this way, so the work is counted, not timed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from registry_gen.settings import load_settings
from tests.importers.upstream_server import hostile_upstream
from tests.mirror.helpers import built, write_config
from tests.support import poll
from user_api.mirror_gate import ACCEL_DOCUMENTS
from user_api.server import create_server_app
from user_api.store import open_user_store


def read(app: Callable[..., Any], path: str) -> tuple[str, dict[str, str]]:
    """One GET as nginx forwards it (npm's Accept, the header that allows X-Accel-Redirect)."""
    answer: list[tuple[str, dict[str, str]]] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80",
               "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1", "wsgi.url_scheme": "http", "HTTP_HOST": "127.0.0.1",
               "HTTP_ACCEPT": "application/json", "HTTP_X_REGISTRY_GEN_ACCEL": "1"}  # fmt: skip
    b"".join(app(environ, lambda status, headers, exc_info=None: answer.append((status, dict(headers)))))
    return answer[0]


def test_a_fresh_document_read_looks_up_the_tree_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("pkg-a", "1.0.0")
        config = write_config(tmp_path / "registry", upstream.base)
        monkeypatch.chdir(config.parent)
        settings = load_settings(config)
        app = create_server_app(settings, open_user_store(settings), static=False)
        assert read(app, "/pkg-a")[0] == "200 OK"  # the miss: fetched, answered, landed in the background
        built(config.parent, "pkg-a/index.html")
        poll(lambda: "X-Accel-Redirect" in read(app, "/pkg-a")[1], "the landed document sent from the tree")
        asked = len(upstream.hits)
        stats: list[str] = []
        real_stat = os.stat

        def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            stats.append(os.fspath(path))
            return real_stat(path, *args, **kwargs)

        monkeypatch.setattr(os, "stat", counted)
        status, headers = read(app, "/pkg-a")
        monkeypatch.undo()
        assert status == "200 OK" and headers["X-Accel-Redirect"] == ACCEL_DOCUMENTS + "pkg-a/index.html"
        assert len(upstream.hits) == asked
        # The package's folder and the abbreviated sibling that picks the form (as nginx's try_files
        # does); the document's own existence is what that lookup already proved.
        assert len(stats) <= 2, stats
