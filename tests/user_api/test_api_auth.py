"""The table of user_api/AUTH.md, row by row: anonymous, the user themself, another user, an admin."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from registry_gen.settings import Settings
from tests.user_api.conftest import Api, assert_no_leaks, make_api
from user_api.app import ApiLimits
from user_api.models import User
from user_api.store import UserStore

PUBLIC_KEYS = {"id", "username", "fullName", "createdAt"}
PRIVATE_KEYS = PUBLIC_KEYS | {"email", "role", "status", "updatedAt"}


@dataclass
class Cast:
    """The four callers of the table: `target` is the account the actions aim at."""

    api: Api
    target: User
    self_token: str
    other_token: str
    admin_token: str

    def token(self, who: str) -> str | None:
        return {"anonymous": None, "self": self.self_token, "other": self.other_token, "admin": self.admin_token}[who]


def _cast(api: Api) -> Cast:
    _, admin_token = api.make_user("root", role="admin", email="root@example.org")
    target, self_token = api.make_user("target", email="target@example.org", full_name="Tar Get",
                                       password="target-password")
    _, other_token = api.make_user("other", email="other@example.org")
    return Cast(api, target, self_token, other_token, admin_token)


@pytest.fixture
def cast(api: Api) -> Cast:
    return _cast(api)


@pytest.fixture
def api_with_signup(
    store_settings: Settings, store: UserStore, caplog: pytest.LogCaptureFixture
) -> Iterator[Callable[[str], Api]]:
    caplog.set_level(logging.DEBUG)
    built: list[Api] = []

    def build(signup: str) -> Api:
        built.append(make_api(store_settings.with_updates(signup=signup), store))
        return built[-1]

    yield build
    for api in built:
        assert_no_leaks(api, caplog)


WHO = ("anonymous", "self", "other", "admin")


# ---- POST /user under each sign-up policy ---------------------------------------------------------

SIGNUP_TABLE = {
    # signup: {who: status}; "self" has no meaning for creation
    "open": {"anonymous": 201, "other": 201, "admin": 201},
    "admin": {"anonymous": 401, "other": 403, "admin": 201},
    "closed": {"anonymous": 403, "other": 403, "admin": 403},
}


@pytest.mark.parametrize(("signup", "who", "expected"),
                         [(s, w, code) for s, row in SIGNUP_TABLE.items() for w, code in row.items()])
def test_create_row(api_with_signup: Callable[[str], Api], signup: str, who: str, expected: int) -> None:
    api = api_with_signup(signup)
    cast = _cast(api)
    api.passwords.add("new-user-password")
    response = api.post("/user", {"username": "newbie", "password": "new-user-password"},
                        token=cast.token(who), status=expected)
    assert (api.store.get_by_username("newbie") is not None) == (expected == 201)
    if expected == 401:
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="registry"'
    if signup == "closed":
        assert response.json["type"].endswith("/signup-closed")


@pytest.mark.parametrize("who", ["anonymous", "other"])
def test_non_admins_may_not_choose_role_or_status(cast: Cast, who: str) -> None:
    response = cast.api.post("/user", {"username": "sneaky", "password": "12345678", "role": "admin",
                                       "status": "disabled"}, token=cast.token(who), status=403)
    assert response.json["type"].endswith("/forbidden-field")
    assert {e["pointer"] for e in response.json["errors"]} == {"#/role", "#/status"}
    # The defaults, sent explicitly, are fine.
    cast.api.post("/user", {"username": "honest", "password": "12345678", "role": "user", "status": "active"},
                  token=cast.token(who), status=201)


def test_admin_may_create_admins(cast: Cast) -> None:
    body = cast.api.post("/user", {"username": "boss", "password": "12345678", "role": "admin"},
                         token=cast.admin_token, status=201).json
    assert body["role"] == "admin"


def test_anonymous_sign_up_is_rate_limited(
    store_settings: Settings, store: UserStore, caplog: pytest.LogCaptureFixture
) -> None:
    api = make_api(store_settings, store, limits=ApiLimits(signup_per_minute=1, signup_burst=2))
    api.post("/user", {"username": "one", "password": "12345678"}, status=201)
    api.post("/user", {"username": "two", "password": "12345678"}, status=201)
    response = api.post("/user", {"username": "three", "password": "12345678"}, status=429)
    assert int(response.headers["Retry-After"]) >= 1
    assert api.store.get_by_username("three") is None
    assert_no_leaks(api, caplog)


# ---- reads --------------------------------------------------------------------------------------------

READ_TABLE = {"anonymous": 401, "self": 200, "other": 200, "admin": 200}


@pytest.mark.parametrize("who", WHO)
def test_list_row(cast: Cast, who: str) -> None:
    response = cast.api.get("/user", token=cast.token(who), status=READ_TABLE[who])
    if who == "anonymous":
        return
    entries = {u["username"]: u for u in response.json["content"]}
    assert set(entries) == {"root", "target", "other"}
    if who == "admin":
        assert all({"email", "role", "status", "updatedAt"} <= set(u) for u in entries.values())
        assert entries["target"]["email"] == "target@example.org"
    else:
        me = "target" if who == "self" else "other"
        assert "email" in entries[me] and "role" in entries[me]
        assert all(set(u) <= PUBLIC_KEYS for name, u in entries.items() if name != me)


@pytest.mark.parametrize("who", WHO)
def test_search_row(cast: Cast, who: str) -> None:
    by_name = cast.api.get("/user/search?keyword=tar", token=cast.token(who), status=READ_TABLE[who])
    by_email = cast.api.get("/user/search?keyword=target@example", token=cast.token(who), status=READ_TABLE[who])
    if who == "anonymous":
        return
    assert [u["username"] for u in by_name.json["content"]] == ["target"]
    found_by_email = [u["username"] for u in by_email.json["content"]]
    assert found_by_email == (["target"] if who == "admin" else [])


@pytest.mark.parametrize(("who", "view"), [("anonymous", None), ("self", PRIVATE_KEYS), ("other", PUBLIC_KEYS),
                                           ("admin", PRIVATE_KEYS)])
def test_read_row(cast: Cast, who: str, view: set[str] | None) -> None:
    response = cast.api.get(f"/user/{cast.target.id}", token=cast.token(who), status=READ_TABLE[who])
    if view is not None:
        assert set(response.json) == view


# ---- writes ---------------------------------------------------------------------------------------------

UPDATE_TABLE = {"anonymous": 401, "self": 200, "other": 403, "admin": 200}
DELETE_TABLE = {"anonymous": 401, "self": 403, "other": 403, "admin": 204}


@pytest.mark.parametrize("who", WHO)
def test_update_row(cast: Cast, who: str) -> None:
    body = {"id": cast.target.id, "username": "target", "email": "target@example.org", "fullName": f"By {who}"}
    cast.api.put("/user", body, token=cast.token(who), status=UPDATE_TABLE[who])
    changed = cast.api.store.get_by_id(cast.target.id)
    assert changed is not None
    assert (changed.full_name == f"By {who}") == (UPDATE_TABLE[who] == 200)


@pytest.mark.parametrize("field", ["username", "role", "status"])
def test_self_may_not_change_privileged_fields(cast: Cast, field: str) -> None:
    new_value = {"username": "renamed", "role": "admin", "status": "disabled"}[field]
    body: dict[str, Any] = {"id": cast.target.id, "username": "target", "email": "target@example.org",
                            "fullName": "Tar Get", field: new_value}
    response = cast.api.put("/user", body, token=cast.self_token, status=403)
    assert response.json["errors"] == [{"detail": "only an administrator may change this", "pointer": f"#/{field}"}]
    # Sending the current value is not a change.
    current = {"username": "target", "role": "user", "status": "active"}[field]
    cast.api.put("/user", {**body, field: current}, token=cast.self_token, status=200)


def test_admin_may_change_every_field_without_current_password(cast: Cast) -> None:
    cast.api.passwords.add("reset-by-admin")
    body = {"id": cast.target.id, "username": "target2", "email": "t2@example.org", "fullName": "T2",
            "role": "admin", "status": "disabled", "password": "reset-by-admin"}
    response = cast.api.put("/user", body, token=cast.admin_token, status=200)
    assert {k: response.json[k] for k in ("username", "email", "role", "status")} == {
        "username": "target2", "email": "t2@example.org", "role": "admin", "status": "disabled"}
    # Disabled: the user's own token stops working and the new password does not log in.
    cast.api.get("/user", token=cast.self_token, status=401)
    cast.api.login("target2", "reset-by-admin", status=401)


def test_admin_changing_own_password_needs_current_password(cast: Cast) -> None:
    root = cast.api.store.get_by_username("root")
    assert root is not None
    cast.api.passwords.add("new-root-password")
    body = {"id": root.id, "username": "root", "email": "root@example.org", "password": "new-root-password"}
    cast.api.put("/user", body, token=cast.admin_token, status=403)


@pytest.mark.parametrize("who", WHO)
def test_delete_row(cast: Cast, who: str) -> None:
    cast.api.delete(f"/user/{cast.target.id}", token=cast.token(who), status=DELETE_TABLE[who])
    assert (cast.api.store.get_by_id(cast.target.id) is None) == (DELETE_TABLE[who] == 204)


def test_non_admin_delete_of_missing_user_is_still_403(cast: Cast) -> None:
    cast.api.delete("/user/00000000-0000-4000-8000-000000000000", token=cast.other_token, status=403)


# ---- tokens ------------------------------------------------------------------------------------------------


def test_read_only_token_reads_but_never_writes(cast: Cast) -> None:
    api = cast.api
    root = api.store.get_by_username("root")
    assert root is not None
    readonly, _ = api.store.create_token(root.id, readonly=True)
    api.tokens.add(readonly)
    api.get("/user", token=readonly, status=200)
    api.get(f"/user/{cast.target.id}", token=readonly, status=200)
    for response in (
        api.post("/user", {"username": "x1", "password": "12345678"}, token=readonly),
        api.put("/user", {"id": cast.target.id, "username": "target"}, token=readonly),
        api.delete(f"/user/{cast.target.id}", token=readonly),
    ):
        assert response.status_int == 403
        assert response.json["type"].endswith("/read-only-token")
        assert 'error="insufficient_scope"' in response.headers["WWW-Authenticate"]


@pytest.mark.parametrize(
    "header",
    ["Bearer nonsense", "Bearer ", "bearer " + "x" * 600, "Basic dXNlcjpwYXNz", "Token abc", "Bearer"],
)
def test_bad_authorization_is_401(cast: Cast, header: str) -> None:
    response = cast.api.get("/user", headers={"Authorization": header}, status=401)
    assert response.headers["WWW-Authenticate"].startswith('Bearer realm="registry"')


def test_rejected_token_says_invalid_token(cast: Cast) -> None:
    response = cast.api.get("/user", token="not-a-token", status=401)
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="registry", error="invalid_token"'
    assert response.json["type"].endswith("/invalid-token")


def test_bearer_scheme_is_case_insensitive(cast: Cast) -> None:
    cast.api.get("/user", headers={"Authorization": f"bearer {cast.admin_token}"}, status=200)


def test_a_bad_token_is_401_even_where_anonymous_is_allowed(cast: Cast) -> None:
    cast.api.post("/user", {"username": "newbie", "password": "12345678"}, token="bogus", status=401)


def test_cidr_restricted_token(cast: Cast) -> None:
    api = cast.api
    root = api.store.get_by_username("root")
    assert root is not None
    inside, _ = api.store.create_token(root.id, cidr=["10.1.0.0/16"])
    api.tokens.add(inside)
    api.get("/user", token=inside, status=401)  # WebTest's client address is not in 10.1/16
    api.client.extra_environ["REMOTE_ADDR"] = "10.1.2.3"
    api.get("/user", token=inside, status=200)


def test_login_returns_a_working_token(cast: Cast) -> None:
    api = cast.api
    response = api.login("target", "target-password", status=201)
    body = response.json
    assert set(body) == {"token", "key", "readonly", "created"} and body["readonly"] is False
    api.get("/user", token=body["token"], status=200)
    assert [t.key for t in api.store.list_tokens(cast.target.id)].count(body["key"]) == 1


def test_login_in_xml(cast: Cast) -> None:
    body = "<credentials><username>target</username><password>target-password</password></credentials>"
    response = cast.api.post("/-/user-api/tokens", body, content_type="application/xml",
                             headers={"Accept": "application/xml"}, status=201)
    from xml.etree import ElementTree

    token = ElementTree.fromstring(response.body).findtext("token")
    assert token
    cast.api.tokens.add(token)
    cast.api.get("/user", token=token, status=200)


@pytest.mark.parametrize(("username", "password"), [("target", "wrong-password"), ("nobody", "target-password"),
                                                    ("Not Valid", "x")])
def test_login_failure_is_one_generic_401(cast: Cast, username: str, password: str) -> None:
    response = cast.api.login(username, password, status=401)
    assert response.json["detail"] == "Incorrect username or password."
    assert response.json["type"].endswith("/invalid-credentials")


def test_login_body_must_hold_exactly_the_credentials(cast: Cast) -> None:
    cast.api.post("/-/user-api/tokens", {"username": "target"}, status=422)
    cast.api.post("/-/user-api/tokens", {"username": "target", "password": ""}, status=422)
    cast.api.post("/-/user-api/tokens", {"username": "target", "password": "target-password", "otp": "1"}, status=422)
    cast.api.post("/-/user-api/tokens", "username=target", content_type="text/plain", status=415)


def test_login_is_rate_limited(store_settings: Settings, store: UserStore, caplog: pytest.LogCaptureFixture) -> None:
    api = make_api(store_settings, store, limits=ApiLimits(login_per_account_per_minute=1, login_per_account_burst=3))
    api.make_user("target", password="target-password")
    for _ in range(3):
        api.login("target", "wrong-password", status=401)
    response = api.login("target", "target-password", status=429)
    assert int(response.headers["Retry-After"]) >= 1
    assert_no_leaks(api, caplog)


def test_login_ignores_a_bad_bearer_header(cast: Cast) -> None:
    response = cast.api.post("/-/user-api/tokens", {"username": "target", "password": "target-password"},
                             headers={"Authorization": "Bearer junk"}, status=201)
    cast.api.tokens.add(response.json["token"])


def test_current_password_checks_share_the_login_limits(store_settings: Settings, store: UserStore) -> None:
    """A stolen token must not turn PUT /user's currentPassword into a password oracle (issue 13)."""
    api = make_api(store_settings, store, limits=ApiLimits(login_per_account_per_minute=1, login_per_account_burst=3))
    user, token = api.make_user("target", password="target-password")
    body = {"id": user.id, "username": "target", "password": "new-password-2"}
    api.passwords.update({"guess-password", "new-password-2"})
    for _ in range(3):
        api.put("/user", {**body, "currentPassword": "guess-password"}, token=token, status=403)
    limited = api.put("/user", {**body, "currentPassword": "target-password"}, token=token, status=429)
    assert int(limited.headers["Retry-After"]) >= 1
    api.login("target", "target-password", status=429)  # the same account bucket as the logins
