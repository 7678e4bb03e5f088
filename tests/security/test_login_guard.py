"""Login limits shared by every login path, keyed so a guesser cannot lock the owner out (issue 13)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from registry_gen.settings import Settings, load_settings
from tests.registry_api.helpers import RegistryProcess, add_user
from tests.registry_api.helpers import http as send
from tests.user_api.pg_server import PostgresServer, start_postgres_or_skip
from user_api.ratelimit import LoginGuard, shared_login_guard
from user_api.store import open_user_store
from user_api.web import WebLimits, web_limits


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


def test_one_guard_per_store(tmp_path: Path) -> None:
    store_a, store_b = (open_user_store(Settings(data_dir=tmp_path / name)) for name in ("a", "b"))
    try:
        assert shared_login_guard(store_a) is shared_login_guard(store_a)
        assert shared_login_guard(store_a) is not shared_login_guard(store_b)
    finally:
        store_a.close()
        store_b.close()


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


# ---------------------------------------------------------------- one guard for both apps of a real serve

# Three guesses per account and no refill while the test runs: the fourth must be refused,
# whichever app it goes to.
SHARED_LIMITS = "auth_limits:\n  login_per_account_per_minute: 0.01\n  login_per_account_burst: 3\n"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = start_postgres_or_skip()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def two_apps(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    """A real serve on a real store holding two accounts, made by the CLI (no login counted yet)."""
    root = tmp_path_factory.mktemp(f"two-apps-{request.param}")
    database = f"database_url: {request.getfixturevalue('postgres').url()}\n" if request.param == "postgres" else ""
    (root / "registry.yaml").write_text(SHARED_LIMITS + database)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    for name in ("victim-npm-first", "victim-user-first"):
        subprocess.run([sys.executable, "-m", "registry_gen", "user", "add", name, "--password-stdin"], cwd=root, env=env,
                       input="the-right-password-1\n", capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    process = RegistryProcess(root).start()
    try:
        yield process
    finally:
        process.stop()


def _guess_through_npm_login(base: str, username: str) -> int:
    """npm's (and pnpm's, yarn 1's) login: the registry app, Basic credentials."""
    return send("PUT", f"{base}-/user/org.couchdb.user:{username}", body={"name": username, "password": "wrong-guess-1"},
                basic=(username, "wrong-guess-1")).status  # fmt: skip


def _guess_through_user_api(base: str, username: str) -> int:
    """The /user app's token login."""
    return send("POST", f"{base}-/user-api/tokens", body={"username": username, "password": "wrong-guess-1"}).status


@pytest.mark.slow
@pytest.mark.parametrize(
    ("username", "first", "then"),
    [("victim-npm-first", _guess_through_npm_login, _guess_through_user_api),
     ("victim-user-first", _guess_through_user_api, _guess_through_npm_login)],
    ids=["npm-then-user-api", "user-api-then-npm"],
)  # fmt: skip
def test_guesses_through_one_app_count_against_the_other(two_apps: RegistryProcess, username: str, first, then) -> None:  # type: ignore[no-untyped-def]
    """A guard per app would give an attacker the account's guesses once per app."""
    assert [first(two_apps.base, username) for _ in range(3)] == [401, 401, 401]
    assert then(two_apps.base, username) == 429
    assert first(two_apps.base, username) == 429


# ---------------------------------------------------------------- the limits in registry.yaml


def _first_429(base: str, attempts: int) -> int:
    """How many guesses (each from its own address) got through before the first 429."""
    statuses = [_login_from(base, f"127.0.2.{i}") for i in range(1, attempts + 1)]
    assert 429 in statuses, statuses
    return statuses.index(429)


def _guesses_before_429(root: Path, config: str) -> int:
    root.mkdir()
    (root / "registry.yaml").write_text(config)
    process = RegistryProcess(root).start()
    try:
        add_user(process.base, "victim", "victim-password-1")
        return _first_429(process.base, 16)
    finally:
        process.stop()


@pytest.mark.slow
def test_a_tight_per_account_limit_in_registry_yaml_answers_429_sooner(tmp_path: Path) -> None:
    tight = _guesses_before_429(tmp_path / "tight", "signup: open\nauth_limits:\n"
                                "  login_per_account_per_minute: 2\n  login_per_account_burst: 2\n")
    default = _guesses_before_429(tmp_path / "default", "signup: open\n")
    # Same server, same guesses: the configured burst (2) ends them 8 sooner than the default (10).
    assert tight <= 2 and default - tight == 8


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("login_per_account_burst: three", "auth_limits.login_per_account_burst must be a positive integer, got the string 'three'"),
        ("login_per_address_per_minute: true", "auth_limits.login_per_address_per_minute must be a positive number, got bool True"),
        ("web_login_per_address: 0", "auth_limits.web_login_per_address must be a positive integer, got 0"),
        ("login_tries: 3", "unknown key auth_limits.login_tries"),
    ],
)
def test_a_wrong_auth_limit_is_one_line_naming_the_key(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "registry.yaml").write_text(f"auth_limits:\n  {line}\n")
    (tmp_path / "content").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    result = subprocess.run(
        [sys.executable, "-m", "registry_gen", "serve", "content", "--host", "127.0.0.1", "--port", "0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "registry.yaml" in lines[0] and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_auth_limits_load_with_fractional_rates_and_keep_the_other_defaults(tmp_path: Path) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text("auth_limits:\n  login_per_account_per_minute: 0.5\n  web_login_per_address: 2\n")
    limits = web_limits(load_settings(config))
    assert (limits.login_per_account_per_minute, limits.web_login_per_address) == (0.5, 2)
    assert limits.login_per_address_burst == WebLimits().login_per_address_burst == 30
