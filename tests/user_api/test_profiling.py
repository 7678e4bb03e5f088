"""REGISTRY_GEN_PROFILE: `serve` and `api` profile each request in the thread serving it and write
the summed statistics when they stop; without the variable the app is not wrapped at all."""

from __future__ import annotations

import pstats
import threading
from pathlib import Path
from typing import Any

import pytest

from user_api.profiling import PROFILE_VARIABLE, dump_profile, profiled


def busy_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(sum(range(1000))).encode()]


def test_requests_in_several_threads_are_summed_into_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "api.prof"
    monkeypatch.setenv(PROFILE_VARIABLE, str(target))
    app = profiled(busy_app)
    calls = [threading.Thread(target=app, args=({}, lambda *_: None)) for _ in range(3)]  # as waitress's threads would
    for call in calls:
        call.start()
    for call in calls:
        call.join(timeout=30)
    assert not target.exists()  # written when the server stops
    dump_profile(app)
    counted = {func[2]: stats[1] for func, stats in pstats.Stats(str(target)).stats.items()}  # type: ignore[attr-defined]
    assert counted["busy_app"] == 3


def test_without_the_variable_nothing_is_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_VARIABLE, raising=False)
    assert profiled(busy_app) is busy_app
    dump_profile(busy_app)  # nothing to write, no error
