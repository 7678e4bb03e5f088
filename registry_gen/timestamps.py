"""The registry's timestamps (npm's `time` fields), apart from publish.py so the build can stamp
versions without loading the publish path."""

from __future__ import annotations

import time


def iso_from_ns(ns: int) -> str:
    """The registry's timestamp format: UTC, milliseconds, `Z` (as npm's `time` fields).
    Integer arithmetic only: a float of ns since 1970 rounds …20.9999999 s up to the next second."""
    seconds, rest = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest // 1_000_000:03d}Z"


def now_iso() -> str:
    return iso_from_ns(time.time_ns())
