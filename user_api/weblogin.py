"""npm's web login, bound to the terminal that started it (issue 13: pool exhaustion, phishing).

A replacement for registry_routes.WebLogins with the same calls plus:

- each session has a confirmation code, the address that started it and when; the login page
  shows all three (npm prints the login URL, which carries the code after `#`, so the terminal
  shows it too) and tells a visitor who did not just run `npm login` to close the page;
- at most `per_address` sessions in progress per starting address; when the pool is full the
  oldest session nobody has authenticated is evicted instead of refusing every new `npm login`;
- `origin_allowed`: the page's form post must come from the registry's own origin;
- `token_description`: the token is named after where and when the login started.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud and compared by eye


def confirmation_code() -> str:
    letters = "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))
    return f"{letters[:4]}-{letters[4:]}"


@dataclass
class BoundWebLogin:
    login_id: str
    done_id: str
    create: bool
    expires: float
    address: str
    started: str  # UTC, ISO 8601, shown on the page
    code: str
    token: str | None = None


class WebLoginPool:
    """Sessions in memory, expiring, capped per address, evicting the oldest unauthenticated."""

    def __init__(self, *, capacity: int = 1000, per_address: int = 5, lifetime_seconds: int = 600,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time):
        self.capacity, self.per_address, self.lifetime = capacity, per_address, lifetime_seconds
        self.clock, self.wall = clock, wall
        self._by_login: OrderedDict[str, BoundWebLogin] = OrderedDict()  # oldest first
        self._by_done: dict[str, BoundWebLogin] = {}
        self._lock = threading.Lock()

    def _drop(self, session: BoundWebLogin) -> None:
        self._by_login.pop(session.login_id, None)
        self._by_done.pop(session.done_id, None)

    def _expire(self) -> None:
        now = self.clock()
        for session in [s for s in self._by_login.values() if s.expires <= now]:
            self._drop(session)

    def _make_room(self, address: str) -> None:
        mine = [s for s in self._by_login.values() if s.address == address and s.token is None]
        for session in mine[: max(0, len(mine) - self.per_address + 1)]:
            self._drop(session)  # this address's oldest: a loop of `npm login` replaces its own
        waiting = (s for s in list(self._by_login.values()) if s.token is None)
        while len(self._by_login) >= self.capacity:
            oldest = next(waiting, None)
            if oldest is None:
                break
            self._drop(oldest)

    def start(self, create: bool, address: str) -> BoundWebLogin:
        with self._lock:
            self._expire()
            self._make_room(address)
            started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.wall()))
            session = BoundWebLogin(secrets.token_urlsafe(24), secrets.token_urlsafe(24), create,
                                    self.clock() + self.lifetime, address, started, confirmation_code())
            self._by_login[session.login_id] = session
            self._by_done[session.done_id] = session
            return session

    def by_login(self, login_id: str) -> BoundWebLogin | None:
        with self._lock:
            self._expire()
            session = self._by_login.get(login_id)
            return session if session is not None and session.token is None else None

    def complete(self, login_id: str, token: str) -> bool:
        with self._lock:
            session = self._by_login.get(login_id)
            if session is None or session.token is not None:
                return False
            session.token = token
            return True

    def poll(self, done_id: str) -> tuple[bool, str | None]:
        with self._lock:
            self._expire()
            session = self._by_done.get(done_id)
            if session is None:
                return False, None
            if session.token is not None:
                self._drop(session)
            return True, session.token

    def __len__(self) -> int:
        return len(self._by_login)


def login_url(base_url: str, session: BoundWebLogin) -> str:
    """The URL npm prints: the code after `#` never reaches a server log, and the terminal shows it."""
    return f"{base_url}-/v1/login/{session.login_id}#{session.code}"


def origin_allowed(origin: str | None, referer: str | None, base_url: str) -> bool:
    """The page's form post comes from the registry's own origin (a browser sends Origin on POST)."""
    own = urlsplit(base_url)
    for header in (origin, referer):
        if header:
            seen = urlsplit(header)
            return (seen.scheme, seen.netloc) == (own.scheme, own.netloc)
    return False


def token_description(session: BoundWebLogin) -> str:
    return f"npm web login started from {session.address} at {session.started} (code {session.code})"
