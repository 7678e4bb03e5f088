"""`registry-gen serve --watch`: the development server picks up archives dropped into content/."""

from __future__ import annotations

import time
from pathlib import Path

from tests.registry_api.helpers import RegistryProcess, http
from tests.support import make_tarball

DEADLINE_SECONDS = 60


def _wait_for_status(url: str, status: int) -> int:
    deadline = time.monotonic() + DEADLINE_SECONDS
    seen = -1
    while time.monotonic() < deadline:
        seen = http("GET", url).status
        if seen == status:
            return seen
        time.sleep(0.2)  # polling a server with a deadline, not synchronising on a guess
    return seen


def test_serve_watch_publishes_dropped_archives_and_drops_removed_ones(tmp_path: Path) -> None:
    server = RegistryProcess(tmp_path, extra_args=("--watch",)).start()
    try:
        assert http("GET", server.base + "dropped-in").status == 404
        archive = make_tarball(server.content / "incoming", "dropped-in", "1.0.0")
        assert _wait_for_status(server.base + "dropped-in", 200) == 200
        assert server.packument("dropped-in")["dist-tags"]["latest"] == "1.0.0"
        archive.unlink()
        assert _wait_for_status(server.base + "dropped-in", 404) == 404
    finally:
        server.stop()
