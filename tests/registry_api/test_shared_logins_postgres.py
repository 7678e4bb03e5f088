"""What two `registry-gen api` processes on one PostgreSQL share about logins (issue 28): an npm
web login started on one instance is finished and polled on the other (real npm 11), and wrong
logins spread over both instances are limited as one instance limits them (the login guard's
buckets are rows every instance takes from)."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import postgres_state_url
from tests.hosts.servers import free_port
from tests.registry_api.helpers import add_user, http
from tests.registry_api.test_api_instances_postgres import Api, instance_config, postgres  # noqa: F401 - a fixture
from tests.support import NPM, Npm
from tests.user_api.pg_server import PostgresServer

pytestmark = pytest.mark.slow

ACCOUNT_BURST, ADDRESS_BURST = 4, 9
# Refills of one attempt a minute: no token comes back while a test runs (its counts are exact).
AUTH_LIMITS = (
    f"auth_limits:\n  login_per_account_per_minute: 1\n  login_per_account_burst: {ACCOUNT_BURST}\n"
    f"  login_per_address_per_minute: 1\n  login_per_address_burst: {ADDRESS_BURST}\n"
)


@pytest.fixture
def instances(postgres: PostgresServer, tmp_path: Path) -> Iterator[tuple[Api, Api]]:  # noqa: F811 - the imported fixture
    """Instances A and B; the public URL is B's, so what A hands out (npm's login and done URLs) leads to B."""
    url = postgres_state_url(postgres)
    shared = tmp_path / "shared"
    (shared / "content").mkdir(parents=True)
    b_port = free_port()
    b = Api(instance_config(tmp_path / "b", shared, url, f"http://127.0.0.1:{b_port}/", AUTH_LIMITS), port=b_port)
    a = Api(instance_config(tmp_path / "a", shared, url, b.base, AUTH_LIMITS))
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


def _login_url(login: subprocess.Popen[str]) -> str:
    """The login URL npm prints (polling a condition with a deadline)."""
    assert login.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = login.stdout.readline()
        if not line:
            break
        if found := re.search(r"(http://\S+/-/v1/login/\S+)", line):
            return found.group(1)
    raise AssertionError("npm printed no login URL")


def test_a_web_login_started_on_one_instance_is_finished_on_the_other(instances: tuple[Api, Api], tmp_path: Path) -> None:
    a, b = instances
    add_user(a.base, "dave", "dave-password-1")
    client = Npm(tmp_path / "npm-home", a.base)  # npm talks to A: A starts the session
    login = subprocess.Popen(
        [NPM, "login", "--auth-type=web", "--browser=false"], cwd=tmp_path, env=client.env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = _login_url(login)
        assert url.startswith(b.base)  # the browser goes to B, npm polls B's done URL
        assert http("GET", url).status == 200
        form = urllib.parse.urlencode({"username": "dave", "password": "dave-password-1"}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": b.base.rstrip("/")}
        done = http("POST", url, raw=form, headers=headers)
        assert done.status == 200 and b"logged in as dave" in done.body, done.body
        login.wait(timeout=60)
    finally:
        if login.poll() is None:
            login.kill()
            login.wait()
    assert login.returncode == 0, login.stderr.read() if login.stderr else ""
    assert client.run("whoami", cwd=tmp_path).stdout.strip() == "dave"  # A takes the token B handed out
    assert http("GET", url.replace(b.base, a.base)).status == 404  # used: gone on every instance


def _wrong_logins(instances: tuple[Api, Api], usernames: list[str]) -> list[int]:
    """A wrong password in Basic auth (what yarn 1 and curl send), alternating between the instances."""
    statuses = []
    for k, name in enumerate(usernames):
        statuses.append(http("GET", f"{instances[k % 2].base}-/whoami", basic=(name, "not-the-password")).status)
    return statuses


def test_wrong_logins_over_two_instances_are_limited_as_on_one(instances: tuple[Api, Api]) -> None:
    a, _ = instances
    add_user(a.base, "erin", "erin-password-1")
    # One account: its bucket empties after ACCOUNT_BURST guesses, whichever instance gets them.
    assert _wrong_logins(instances, ["erin"] * (ACCOUNT_BURST + 2)) == [401] * ACCOUNT_BURST + [429] * 2
    # One address, other accounts: the address's bucket held ADDRESS_BURST; the sign-up (an attempt
    # too, which made this address known to erin: her guesses came from her own bucket) and the
    # guesses above took theirs.
    left = ADDRESS_BURST - 1 - (ACCOUNT_BURST + 2)
    assert _wrong_logins(instances, [f"guess-{k}" for k in range(left + 2)]) == [401] * left + [429] * 2
