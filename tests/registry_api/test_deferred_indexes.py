"""A real `registry-gen serve`: a publish leaves -/all and -/search.json to the server's refresher
(registry.yaml `index_refresh_seconds`), while npm search and the site search see it at once."""

from __future__ import annotations

import json
import time
from pathlib import Path

from registry_gen.verify import verify_tree
from tests.hostile.harness import Server, request

DEADLINE = 60.0


def _listed_in_all(server: Server, name: str) -> bool:
    try:
        return name in json.loads((server.out / "-/all/index.html").read_bytes())
    except (FileNotFoundError, ValueError):
        return False


def _wait_for(condition: object, what: str) -> None:
    """Polls `condition` (a callable) until it holds, failing after DEADLINE seconds."""
    deadline = time.monotonic() + DEADLINE
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_publish_is_searchable_at_once_and_listed_in_all_after_the_refresh(tmp_path: Path) -> None:
    with Server(tmp_path / "registry", extra_config="index_refresh_seconds: 1\n") as server:
        token = server.add_user("alice")
        assert server.publish("deferred-one", "1.0.0", token).status == 201
        found = request("GET", f"{server.base}-/v1/search?text=deferred").json
        assert [o["package"]["name"] for o in found["objects"]] == ["deferred-one"]
        shard = json.loads((server.out / "-/web/search/de.json").read_bytes())
        assert [p["name"] for p in shard["packages"]] == ["deferred-one"]
        _wait_for(lambda: _listed_in_all(server, "deferred-one"), "the refresher to rewrite -/all")
        assert "deferred-one" in (server.out / "-/search.json").read_text()
        report = verify_tree(server.out)
        assert report.problems == [] and report.notes == []
        assert "Traceback" not in server.log()


def test_a_stopping_server_writes_what_its_refresher_still_owed(tmp_path: Path) -> None:
    server = Server(tmp_path / "registry", extra_config="index_refresh_seconds: 3600\n").start()
    try:
        token = server.add_user("alice")
        assert server.publish("owed-one", "1.0.0", token).status == 201
        assert not _listed_in_all(server, "owed-one")  # not due for an hour
    finally:
        server.stop()  # SIGTERM: the server flushes its refresher on the way out
    assert _listed_in_all(server, "owed-one")
    assert verify_tree(server.out).notes == []
