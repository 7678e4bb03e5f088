"""A small in-process token-bucket limiter (per key: client address, username, token).

In-process on purpose: waitress is one process. Several gunicorn workers would each keep their own
buckets, which multiplies the limit by the worker count (docs/user-api.md §8.9).
"""

from __future__ import annotations

import math
import threading
import time
import weakref
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


class LoginGuard:
    """The login limits every login path shares (user API, npm login, Basic auth, web login).

    - per address: `per_address` attempts a minute from one address, whatever the account;
    - per account: attempts from addresses that never logged in to that account share one bucket
      (`per_account`), so 200 addresses get 10 guesses a minute between them, not 2,000;
    - an address that has logged in to the account before gets its own bucket of the same size,
      so a guessing campaign from elsewhere never locks the owner out of their usual machine.
    Every attempt counts, right or wrong: `admit` is called before the password is checked.
    """

    def __init__(self, per_address: tuple[float, int] = (30, 30), per_account: tuple[float, int] = (10, 10), *,
                 max_keys: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.addresses = RateLimiter(*per_address, max_keys=max_keys, clock=clock)
        self.accounts = RateLimiter(*per_account, max_keys=max_keys, clock=clock)
        self._known: OrderedDict[str, None] = OrderedDict()  # "account|address" that succeeded
        self._max_keys = max_keys
        self._lock = threading.Lock()

    def admit(self, username: str | None, address: str) -> tuple[bool, int]:
        allowed, retry_after = self.addresses.allow("addr:" + address)
        if not allowed or not username:
            return allowed, retry_after
        account = username.lower()
        with self._lock:
            known = f"{account}|{address}" in self._known
        return self.accounts.allow(f"known:{account}|{address}" if known else "user:" + account)

    def succeeded(self, username: str, address: str) -> None:
        key = f"{username.lower()}|{address}"
        with self._lock:
            self._known[key] = None
            self._known.move_to_end(key)
            while len(self._known) > self._max_keys:
                self._known.popitem(last=False)


# Keyed weakly by the store, so a closed store's guard goes with it (an id() could be reused by a
# new store, which would then inherit old buckets). Every store takes weak references.
_SHARED: weakref.WeakKeyDictionary[object, LoginGuard] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def shared_login_guard(store: object, *, per_address: tuple[float, int] = (30, 30),
                       per_account: tuple[float, int] = (10, 10)) -> LoginGuard:
    """One LoginGuard per user store in this process: the user API and the npm login paths both
    take theirs from here, so guesses through one count against the other. The rates are those of
    the first caller for that store (the server builds both apps from one limits object)."""
    with _SHARED_LOCK:
        found = _SHARED.get(store)
        if found is None:
            found = _SHARED[store] = LoginGuard(per_address, per_account)
        return found
