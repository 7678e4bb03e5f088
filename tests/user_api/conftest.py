"""Fixtures for the user service: a store on SQLite and on a real PostgreSQL, the app, a client
that records every response, and a leak check that runs after every API test."""

from __future__ import annotations

import io
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import webtest

from registry_gen.settings import Settings
from tests.user_api.pg_server import PostgresServer, start_postgres_or_skip
from user_api.app import ApiLimits, create_user_app
from user_api.credentials import PasswordHasher
from user_api.models import User
from user_api.store import UserStore, open_user_store

# Cheap argon2id for tests only: production uses the OWASP parameters (test_store checks them).
FAST_HASHER = PasswordHasher(time_cost=1, memory_kib=1024, parallelism=1)
LOOSE_LIMITS = ApiLimits(signup_per_minute=10_000, signup_burst=10_000, login_per_address_per_minute=10_000,
                         login_per_address_burst=10_000, login_per_account_per_minute=10_000, login_per_account_burst=10_000)
PG_DATABASE = "user_api_tests"
_schemas = itertools.count()


def tmp_settings(root: Path, **values: Any) -> Settings:
    """Settings whose content, output and data folders all live under `root`: the defaults are
    relative to the current directory (the repository's own content/), where an admin route such as
    POST /-/user-api/advisories would otherwise write."""
    folders = {"content_dir": root / "content", "out_dir": root / "public", "data_dir": root / "data"}
    return Settings(**{**folders, **values})


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres_or_skip()
    import psycopg

    try:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {PG_DATABASE}")
        with psycopg.connect(server.url(PG_DATABASE), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_trgm")
        yield server
    finally:
        server.stop()


def _postgres_settings(server: PostgresServer, tmp_path: Path) -> Settings:
    """A fresh schema per test: isolation without a new database each time."""
    import psycopg

    schema = f"test_{next(_schemas)}"
    with psycopg.connect(server.url(PG_DATABASE), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return tmp_settings(tmp_path, database_url=server.url(PG_DATABASE, schema=schema), signup="open")


@pytest.fixture(params=["sqlite", "postgres"])
def store_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "sqlite":
        return tmp_settings(tmp_path, signup="open")
    return _postgres_settings(request.getfixturevalue("postgres_server"), tmp_path)


@pytest.fixture
def pg_store_settings(postgres_server: PostgresServer, tmp_path: Path) -> Settings:
    """PostgreSQL only: for what only that store does (its plans, its schema steps)."""
    return _postgres_settings(postgres_server, tmp_path)


@pytest.fixture
def pg_store(pg_store_settings: Settings) -> Iterator[UserStore]:
    opened = open_user_store(pg_store_settings, hasher=FAST_HASHER)
    yield opened
    opened.close()


@pytest.fixture
def store(store_settings: Settings) -> Iterator[UserStore]:
    opened = open_user_store(store_settings, hasher=FAST_HASHER)
    yield opened
    opened.close()


def all_password_hashes(store: UserStore) -> list[str]:
    with store.dialect.read() as tx:  # type: ignore[attr-defined]
        return [row[0] for row in tx.all("SELECT password_hash FROM users") if row[0] != "!"]


@dataclass
class Api:
    """A WebTest client that remembers every response and every secret it handed out."""

    client: webtest.TestApp
    store: UserStore
    settings: Settings
    wsgi_errors: io.StringIO
    passwords: set[str] = field(default_factory=set)
    tokens: set[str] = field(default_factory=set)
    responses: list[webtest.TestResponse] = field(default_factory=list)

    def request(self, method: str, path: str, *, token: str | None = None, body: Any = None,
                headers: dict[str, str] | None = None, status: int | str | None = None,
                content_type: str | None = None) -> webtest.TestResponse:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        kwargs: dict[str, Any] = {"headers": sent, "expect_errors": True}
        if body is not None:
            if isinstance(body, (dict, list)):
                response = self.client.request(
                    path, method=method, body=_json(body), headers={"Content-Type": "application/json", **sent},
                    expect_errors=True,
                )
            else:
                raw = body.encode() if isinstance(body, str) else body
                if content_type is not None:
                    sent.setdefault("Content-Type", content_type)
                response = self.client.request(path, method=method, body=raw, headers=sent, expect_errors=True)
        else:
            response = self.client.request(path, method=method, **kwargs)
        self.responses.append(response)
        if status is not None:
            assert response.status_int == int(status), (response.status, response.body[:2000])
        return response

    def get(self, path: str, **kw: Any) -> webtest.TestResponse:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any, **kw: Any) -> webtest.TestResponse:
        return self.request("POST", path, body=body, **kw)

    def put(self, path: str, body: Any, **kw: Any) -> webtest.TestResponse:
        return self.request("PUT", path, body=body, **kw)

    def delete(self, path: str, **kw: Any) -> webtest.TestResponse:
        return self.request("DELETE", path, **kw)

    def make_user(self, username: str, *, role: str = "user", password: str | None = None,
                  email: str | None = None, full_name: str | None = None) -> tuple[User, str]:
        """A user straight in the store, plus a fresh token for them."""
        password = password or f"pw-{username}-Secret!"
        self.passwords.add(password)
        user = self.store.create_user(username, password, email, full_name, role)
        token, _ = self.store.create_token(user.id)
        self.tokens.add(token)
        return user, token

    def login(self, username: str, password: str, **kw: Any) -> webtest.TestResponse:
        self.passwords.add(password)
        response = self.post("/-/user-api/tokens", {"username": username, "password": password}, **kw)
        if response.status_int == 201:
            self.tokens.add(response.json["token"])
        return response


def _json(data: Any) -> bytes:
    import json

    return json.dumps(data).encode()


@dataclass
class RecordedResponse:
    """What `recording` saw of one response: the same attributes the leak check reads on WebTest's."""

    status: str
    headerlist: list[tuple[str, str]]
    body: bytes


def recording(app: Any, sink: list[Any]) -> Any:
    """A WSGI wrapper that keeps every response (for apps driven over a real socket)."""

    def wrapped(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen: dict[str, Any] = {}

        def remember(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            seen.update(status=status, headers=list(headers))
            return start_response(status, headers, *exc_info)

        chunks = app(environ, remember)
        try:
            body = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        sink.append(RecordedResponse(seen.get("status", ""), seen.get("headers", []), body))
        return [body]

    return wrapped


def make_api(settings: Settings, store: UserStore, *, limits: ApiLimits = LOOSE_LIMITS) -> Api:
    errors = io.StringIO()
    client = webtest.TestApp(create_user_app(settings, store, limits=limits), extra_environ={"wsgi.errors": errors})
    return Api(client=client, store=store, settings=settings, wsgi_errors=errors)


@pytest.fixture
def api(store_settings: Settings, store: UserStore, caplog: pytest.LogCaptureFixture) -> Iterator[Api]:
    """The app over `store`, with open sign-up; after the test, no secret may have leaked."""
    caplog.set_level(logging.DEBUG)
    built = make_api(store_settings, store)
    yield built
    assert_no_leaks(built, caplog)


def assert_no_leaks(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    """No response carries a password or a hash; no log line a password, a hash or a token."""
    hashes = all_password_hashes(api.store)
    response_texts = [
        r.body.decode("utf-8", "replace") + "\n" + "\n".join(f"{k}: {v}" for k, v in r.headerlist)
        for r in api.responses
    ]
    log_text = "\n".join(
        record.getMessage() + (logging.Formatter().formatException(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    ) + api.wsgi_errors.getvalue()
    # Secrets shorter than 6 characters ("", "x") would match by chance; tests use longer ones.
    for secret in [p for p in api.passwords if len(p) >= 6] + hashes:
        assert not any(secret in text for text in response_texts), "a password or hash reached a response"
        assert secret not in log_text, "a password or hash reached the log"
    for token in api.tokens:
        assert token not in log_text, "a token reached the log"
