"""Where a request's time goes, for the operator who asks: with `REGISTRY_GEN_PROFILE=FILE` in its
environment, `registry-gen serve` or `api` runs every request under cProfile (in the thread that
serves it: waitress's threads are invisible to a profiler started in the main one) and writes the
summed statistics to FILE when it stops (`python -m pstats FILE`). Off by default: a profiler
costs each call it sees."""

from __future__ import annotations

import cProfile
import os
import pstats
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROFILE_VARIABLE = "REGISTRY_GEN_PROFILE"


class RequestProfiler:
    """A WSGI wrapper summing one cProfile per request."""

    def __init__(self, app: Callable[..., Any], target: Path):
        self.app = app
        self.target = target
        self._lock = threading.Lock()
        self._stats: pstats.Stats | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        profile = cProfile.Profile()
        profile.enable()
        try:
            return self.app(environ, start_response)
        finally:
            profile.disable()
            with self._lock:
                if self._stats is None:
                    self._stats = pstats.Stats(profile)
                else:
                    self._stats.add(profile)

    def dump(self) -> None:
        with self._lock:
            if self._stats is not None:
                self._stats.dump_stats(str(self.target))


def profiled(app: Callable[..., Any]) -> Callable[..., Any]:
    """`app` itself, or wrapped in a RequestProfiler when REGISTRY_GEN_PROFILE names a file."""
    target = os.environ.get(PROFILE_VARIABLE)
    return RequestProfiler(app, Path(target)) if target else app


def dump_profile(app: Any) -> None:
    if isinstance(app, RequestProfiler):
        app.dump()
