"""A large document answered by the mirror before it is built (a cold install's every read): sent
from memory, not spooled by waitress to a temporary file over its 1 MB `outbuf_overflow`. The app
is `registry-gen api`'s (access log included) on a real waitress server, over an upstream on
loopback; temporary files are counted, not timed."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from registry_gen.settings import load_settings
from tests.importers.upstream_server import hostile_upstream
from tests.mirror.helpers import write_config
from tests.user_api.live_server import serve
from user_api.access_log import AccessLog
from user_api.held_answers import AnswerBudget, answer_body
from user_api import server
from user_api.mirror_gate import MirrorGate
from user_api.store import open_user_store

LARGE: int = 2 * 1024 * 1024


def test_a_2mb_document_miss_is_sent_without_a_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("big-doc", "1.0.0", entry={"description": "d" * LARGE})
        config = write_config(tmp_path / "registry", upstream.base)
        monkeypatch.chdir(config.parent)
        settings = load_settings(config)
        gates: list[MirrorGate] = []
        monkeypatch.setattr(server, "MirrorGate", lambda *args: gates.append(MirrorGate(*args)) or gates[-1])
        app = AccessLog(server.create_server_app(settings, open_user_store(settings), static=False))
        made: list[Any] = []
        real = tempfile.TemporaryFile

        def counted(*args: Any, **kwargs: Any) -> Any:
            made.append(args)
            return real(*args, **kwargs)

        with serve(app) as base:
            with mock.patch.object(tempfile, "TemporaryFile", counted):  # waitress's spool imports it per use
                with urllib.request.urlopen(base + "/big-doc", timeout=60) as reply:
                    body = reply.read()
        gates[0].service.settle()  # the landing and its build end in the registry's folder, before the test does
        assert len(body) > LARGE and int(reply.headers["Content-Length"]) == len(body)
        assert json.loads(body)["versions"]["1.0.0"]["description"] == "d" * LARGE
        assert made == []


def test_held_answers_are_bounded_and_given_back_when_closed() -> None:
    data = b"x" * LARGE
    environ = {"wsgi.file_wrapper": lambda handle, size: handle}
    budget = AnswerBudget(LARGE + 10)
    held = answer_body(data, environ, budget)
    assert not isinstance(held, list) and budget.left == 10
    assert answer_body(data, environ, budget) == [data]  # over the bound: the server's usual way
    assert answer_body(b"small", environ, budget) == [b"small"]
    held.close()  # type: ignore[attr-defined]
    held.close()  # type: ignore[attr-defined]  # closed twice (the server and the app's close): given back once
    assert budget.left == LARGE + 10
