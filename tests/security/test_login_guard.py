"""Login limits shared by every login path, keyed so a guesser cannot lock the owner out (issue 13)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.registry_api.helpers import RegistryProcess, add_user
from user_api.ratelimit import LoginGuard, shared_login_guard


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_guesses_from_many_addresses_share_one_account_bucket() -> None:
    guard = LoginGuard(clock=Clock())
    results = [guard.admit("victim", f"10.0.{i // 250}.{i % 250}")[0] for i in range(200)]
    assert results.count(True) == 10 and results[10:] == [False] * 190


def test_the_owners_usual_address_is_not_locked_out_by_a_campaign() -> None:
    guard = LoginGuard(clock=Clock())
    assert guard.admit("victim", "192.0.2.7")[0]
    guard.succeeded("victim", "192.0.2.7")
    for i in range(50):
        guard.admit("victim", f"198.51.100.{i}")
    assert guard.admit("victim", "198.51.100.99") == (False, 6)
    assert guard.admit("Victim", "192.0.2.7")[0]


def test_the_owners_address_is_still_limited() -> None:
    guard = LoginGuard(clock=Clock())
    guard.succeeded("victim", "192.0.2.7")
    assert [guard.admit("victim", "192.0.2.7")[0] for _ in range(12)].count(True) == 10


def test_one_guard_per_store() -> None:
    store_a, store_b = object(), object()
    assert shared_login_guard(store_a) is shared_login_guard(store_a)
    assert shared_login_guard(store_a) is not shared_login_guard(store_b)


# ---------------------------------------------------------------- against a real serve



@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    process = RegistryProcess(tmp_path_factory.mktemp("guard")).start()
    try:
        add_user(process.base, "victim", "victim-password-1")
        yield process
    finally:
        process.stop()


def _login_from(base: str, source: str) -> int:
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(str(parts.hostname), parts.port, timeout=30, source_address=(source, 0))
    try:
        connection.request("POST", "/-/user-api/tokens", json.dumps({"username": "victim", "password": "wrong-guess-123"}),
                           {"Content-Type": "application/json"})
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.slow
def test_user_api_login_guesses_from_many_addresses_hit_the_account_limit(served: RegistryProcess) -> None:
    statuses = [_login_from(served.base, f"127.0.1.{i}") for i in range(1, 21)]
    assert 429 in statuses
