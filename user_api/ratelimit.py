"""A small in-process token-bucket limiter (per key: client address, username, token).

In-process on purpose: waitress is one process. Several gunicorn workers would each keep their own
buckets, which multiplies the limit by the worker count (docs/user-api.md §8.9).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """`rate_per_minute` tokens flow into a bucket of `burst`; each allowed call takes one."""

    def __init__(
        self,
        rate_per_minute: float,
        burst: int,
        *,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        if rate_per_minute <= 0 or burst < 1:
            raise ValueError("rate_per_minute must be > 0 and burst >= 1")
        self.rate_per_second = rate_per_minute / 60.0
        self.burst = burst
        self.max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str) -> tuple[bool, int]:
        """(True, 0) and one token spent, or (False, seconds until a token is back)."""
        now = self._clock()
        with self._lock:
            bucket = self._refill(key, now)
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return True, 0
            missing = 1.0 - bucket.tokens
            return False, max(1, math.ceil(missing / self.rate_per_second))

    def _refill(self, key: str, now: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(tokens=float(self.burst), updated=now)
            self._buckets[key] = bucket
            self._evict()
        else:
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate_per_second)
            bucket.updated = now
            self._buckets.move_to_end(key)
        return bucket

    def _evict(self) -> None:
        # Least recently used first; an evicted key restarts with a full bucket, which only errs lenient.
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
