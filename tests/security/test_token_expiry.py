"""Tokens honour npm's `expires` (issue 13, Low): `npm token create --expires DAYS` gets a token
that stops working then; an expired token gets 401 like an unknown one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from registry_gen.settings import Settings
from tests.registry_api.helpers import RegistryProcess, add_user, http
from user_api.models import utcnow
from user_api.store import open_user_store

pytestmark = pytest.mark.slow


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RegistryProcess]:
    process = RegistryProcess(tmp_path).start()
    try:
        yield process
    finally:
        process.stop()


def test_npm_token_create_with_expires_gets_a_token_that_expires(served: RegistryProcess) -> None:
    token = add_user(served.base, "tia", "tia-password-1")
    npm = served.npm("tia", token)
    created = npm.run("token", "create", "--expires", "7", "--password", "tia-password-1", "--json", cwd=served.root)
    reply = json.loads(created.stdout)
    expires = datetime.fromisoformat(reply["expires"].replace("Z", "+00:00"))
    assert timedelta(days=6, hours=23) < expires - utcnow() <= timedelta(days=7)
    assert http("GET", served.base + "-/whoami", token=reply["token"]).json == {"username": "tia"}
    refused = http("POST", served.base + "-/npm/v1/tokens", token=token, body={"password": "tia-password-1", "expires": "soon"})
    assert refused.status == 400 and "expires" in refused.json["error"]


def test_an_expired_token_gets_401(served: RegistryProcess) -> None:
    add_user(served.base, "uli", "uli-password-1")
    store = open_user_store(Settings(data_dir=served.root / "data"))
    try:
        user = store.get_by_username("uli")
        assert user is not None
        stale, _ = store.create_token(user.id, expires=utcnow() - timedelta(seconds=1))
    finally:
        store.close()
    reply = http("GET", served.base + "-/whoami", token=stale)
    assert reply.status == 401 and reply.headers.get("www-authenticate")
