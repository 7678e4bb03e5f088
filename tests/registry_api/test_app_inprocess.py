"""The combined WSGI app in-process (WebTest): policies, limits, static headers, rollback."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import webtest

from registry_gen.build import run_build
from registry_gen.settings import Limits, Settings
from user_api.credentials import PasswordHasher
from user_api.registry_routes import RegistryLimits, create_registry_app
from user_api.weblogin import WebLoginPool
from user_api.server import StaticTree, create_server_app
from user_api.store import UserStore, open_user_store
from tests.registry_api.helpers import http, publish_body, tarball
from tests.support import make_tarball

FAST_HASHER = PasswordHasher(time_cost=1, memory_kib=8, parallelism=1)


def _settings(tmp_path: Path, **changes: Any) -> Settings:
    (tmp_path / "content").mkdir(exist_ok=True)
    changes.setdefault("signup", "open")
    return Settings(
        content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data",
        base_url="http://registry.test/", **changes,
    )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return _settings(tmp_path)


@pytest.fixture
def store(settings: Settings) -> Iterator[UserStore]:
    opened = open_user_store(settings, hasher=FAST_HASHER)
    yield opened
    opened.close()


def _app(settings: Settings, store: UserStore) -> webtest.TestApp:
    run_build(settings)
    return webtest.TestApp(create_server_app(settings, store))


def _adduser(app: webtest.TestApp, name: str, password: str = "password-123", status: int = 201,
             headers: dict[str, str] | None = None, **extra: Any) -> Any:
    body = {"name": name, "password": password, "email": f"{name}@example.com", **extra}
    return app.put_json(f"/-/user/org.couchdb.user:{name}", body, headers=headers or {}, status=status).json


def _basic(name: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(("signup", "words"), [("closed", "sign-up is closed"), ("admin", "created by an administrator")])
def test_signup_policy_refuses_new_accounts_but_not_logins(tmp_path: Path, signup: str, words: str) -> None:
    settings = _settings(tmp_path, signup=signup)
    store = open_user_store(settings, hasher=FAST_HASHER)
    try:
        store.create_user("existing", "password-123", "existing@example.com")
        app = _app(settings, store)
        assert words in _adduser(app, "newcomer", status=403)["error"]
        assert "Basic" in _adduser(app, "existing", status=409)["error"]  # npm and yarn retry with Basic
        assert _adduser(app, "existing", headers=_basic("existing", "password-123"))["token"]
        wrong = app.put_json("/-/user/org.couchdb.user:existing", {"name": "existing", "password": "nope-nope-1"},
                             headers=_basic("existing", "nope-nope-1"), status=401)
        assert wrong.headers["WWW-Authenticate"].startswith("Basic")
        # A login (no email) for an unknown name answers like a wrong password: names are not probed.
        missing = app.put_json("/-/user/org.couchdb.user:nobody", {"name": "nobody", "password": "whatever-1"}, status=401)
        assert missing.json == wrong.json
    finally:
        store.close()


def test_open_signup_accepts_an_account_without_email(settings: Settings, store: UserStore) -> None:
    """Issue 16: npm's login body, yarn's and @verdaccio/e2e-cli's bootstrap send no email; with
    `signup: open` that is a sign-up (as on Verdaccio), not "incorrect username or password"."""
    app = _app(settings, store)
    body = {"name": "no-mail", "password": "password-123", "type": "user", "roles": []}
    created = app.put_json("/-/user/org.couchdb.user:no-mail", body, status=201).json
    assert created["ok"] == "user no-mail created" and created["token"]
    assert app.get("/-/whoami", headers=_bearer(created["token"])).json == {"username": "no-mail"}
    user = store.get_by_username("no-mail")
    assert user is not None and user.email is None
    # The same body again is no sign-up: an existing account logs in with Basic credentials (409 asks for them).
    app.put_json("/-/user/org.couchdb.user:no-mail", body, status=409)
    again = app.put_json("/-/user/org.couchdb.user:no-mail", body, headers=_basic("no-mail", "password-123"), status=201)
    assert again.json["ok"] == "you are logged in as no-mail"
    app.put_json("/-/user/org.couchdb.user:no-mail", body, headers=_basic("no-mail", "wrong-pass-1"), status=401)


def test_login_attempts_are_rate_limited(settings: Settings, store: UserStore) -> None:
    run_build(settings)
    tight = RegistryLimits(login_per_account_per_minute=1, login_per_account_burst=2)
    app = webtest.TestApp(create_registry_app(settings, store, limits=tight))
    _adduser(app, "target")  # from webtest's address, which is known to the account from now on
    path, elsewhere = "/-/user/org.couchdb.user:target", {"REMOTE_ADDR": "198.51.100.9"}
    # The sign-up took one of the account's two attempts; one wrong guess from elsewhere takes the other.
    app.put_json(path, {"name": "target", "password": "bad-guess-1"}, headers=_basic("target", "bad-guess-1"),
                 extra_environ=elsewhere, status=401)
    limited = app.put_json(path, {"name": "target", "password": "password-123"}, headers=_basic("target", "password-123"),
                           extra_environ={"REMOTE_ADDR": "198.51.100.10"}, status=429)
    assert int(limited.headers["Retry-After"]) >= 1 and "too many" in limited.json["error"]
    # Basic-authenticated writes count as attempts too.
    app.get("/-/whoami", headers=_basic("target", "password-123"), extra_environ={"REMOTE_ADDR": "198.51.100.11"}, status=429)
    # The guesses from elsewhere do not lock the owner out of the address they logged in from.
    app.put_json(path, {"name": "target", "password": "password-123"}, headers=_basic("target", "password-123"), status=201)


def test_the_legacy_409_path_and_basic_auth(settings: Settings, store: UserStore) -> None:
    app = _app(settings, store)
    _adduser(app, "olduser")
    document = app.get("/-/user/org.couchdb.user:olduser").json
    assert document["name"] == "olduser" and re.match(r"^\d+-[0-9a-f]+$", document["_rev"])
    body = {"name": "olduser", "password": "password-123", "_rev": document["_rev"]}
    again = app.put_json(f"/-/user/org.couchdb.user:olduser/-rev/{document['_rev']}", body,
                         headers=_basic("olduser", "password-123"), status=201)
    assert again.json["token"] and again.json["ok"]
    assert app.get("/-/whoami", headers=_basic("olduser", "password-123")).json == {"username": "olduser"}
    assert app.get("/-/whoami", headers=_basic("olduser", "wrong-pass"), status=401).json["error"]
    assert app.get("/-/whoami", status=401).headers["WWW-Authenticate"].startswith("Bearer")


def test_publish_body_cap_scoped_names_and_routing(tmp_path: Path) -> None:
    settings = _settings(tmp_path, limits=Limits(max_archive_bytes=64 * 1024))
    store = open_user_store(settings, hasher=FAST_HASHER)
    try:
        app = _app(settings, store)
        token = _adduser(app, "scoper")["token"]
        name = "@team/widget"
        app.put_json("/@team%2fwidget", publish_body(name, "1.0.0", tarball(name, "1.0.0")), headers=_bearer(token), status=201)
        assert (settings.out_dir / "@team/widget/-/widget-1.0.0.tgz").is_file()
        assert (settings.content_dir / "@team/widget/widget-1.0.0.tgz").is_file()
        for spelling in ("/@team%2fwidget", "/@team%2Fwidget", "/@team/widget"):
            assert app.get(spelling).json["versions"]["1.0.0"]["dist"]["tarball"] == "http://registry.test/@team/widget/-/widget-1.0.0.tgz"
        app.put_json("/-/package/@team%2fwidget/dist-tags/stable", "1.0.0", headers=_bearer(token), status=201)
        assert app.get("/-/package/@team/widget/dist-tags").json == {"latest": "1.0.0", "stable": "1.0.0"}

        over_cap = publish_body(name, "2.0.0", os.urandom(200 * 1024))  # a body under the body cap
        assert "limit of 65536 bytes" in app.put_json("/@team%2fwidget", over_cap, headers=_bearer(token), status=413).json["error"]
        huge = publish_body(name, "2.0.0", os.urandom(2 * 1024 * 1024))  # refused before it is read
        assert "limited" in app.put_json("/@team%2fwidget", huge, headers=_bearer(token), status=413).json["error"]
        assert app.put("/-/nothing-here", b"{}", headers=_bearer(token), status=404).json == {"error": "not found"}
        assert "Allow" in app.delete("/-/v1/search", status=405).headers
        assert app.get("/-/v1/done/unknown-session", status=404).json["error"]
    finally:
        store.close()


def test_a_build_conflict_rolls_the_publish_back(settings: Settings, store: UserStore) -> None:
    # Two different archives of clash@1.0.0 dropped by hand: the build refuses both, so the version
    # is not served; publishing a third copy must not make things worse.
    make_tarball(settings.content_dir / "a", "clash", "1.0.0", description="one")
    make_tarball(settings.content_dir / "b", "clash", "1.0.0", description="two")
    make_tarball(settings.content_dir / "c", "clash", "0.9.0")
    app = _app(settings, store)
    token = _adduser(app, "admin-ish")["token"]
    store.update_user(store.get_by_username("admin-ish").id, role="admin")  # type: ignore[union-attr]
    assert list(app.get("/clash").json["versions"]) == ["0.9.0"]
    refused = app.put_json("/clash", publish_body("clash", "1.0.0", tarball("clash", "1.0.0")), headers=_bearer(token), status=409)
    assert "different bytes" in refused.json["error"]
    assert not (settings.content_dir / "clash").exists()
    assert list(app.get("/clash").json["versions"]) == ["0.9.0"]


def test_static_tree_headers(settings: Settings, store: UserStore) -> None:
    # A README long enough that the full document passes write.GZIP_SIBLING_FROM and gets its sibling.
    make_tarball(settings.content_dir, "statics", "1.0.0", files={"README.md": "A line of the readme.\n" * 80})
    run_build(settings)
    tree = webtest.TestApp(StaticTree(settings.out_dir))
    full = tree.get("/statics")
    assert full.content_type == "application/json" and full.headers["Vary"] == "Accept, Accept-Encoding"
    assert tree.get("/statics", headers={"If-Modified-Since": full.headers["Last-Modified"]}, status=304).body == b""
    zipped = tree.get("/statics", headers={"Accept-Encoding": "gzip"})  # WebTest decodes the body again
    assert zipped.headers["ETag"].endswith('-gz"') and zipped.json == full.json
    # Revalidation works across codings (yarn and @verdaccio/e2e-cli drop Accept-Encoding in between).
    assert zipped.headers["ETag"] != full.headers["ETag"]
    tree.get("/statics", headers={"If-None-Match": zipped.headers["ETag"]}, status=304)
    tree.get("/statics", headers={"If-None-Match": full.headers["ETag"], "Accept-Encoding": "gzip"}, status=304)
    tree.get("/statics", headers={"If-None-Match": '"0-0"'}, status=200)
    # A document under one TCP segment has no sibling: gzip clients get the plain file.
    assert not (settings.out_dir / "-/package/statics/dist-tags.gz").exists()
    tags = tree.get("/-/package/statics/dist-tags", headers={"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in tags.headers and tags.json == {"latest": "1.0.0"}
    head = tree.head("/statics/-/statics-1.0.0.tgz")
    assert head.body == b"" and int(head.headers["Content-Length"]) > 0 and "immutable" in head.headers["Cache-Control"]
    corgi = tree.get("/statics", headers={"Accept": "application/vnd.npm.install-v1+json"})
    assert corgi.content_type == "application/vnd.npm.install-v1+json"
    assert tree.get("/statics", headers={"Accept": "application/vnd.npm.install-v1+json;q=0, application/json"}).content_type == "application/json"
    assert tree.get("/-/web/package/statics", status=301).headers["Location"] == "/-/web/package/statics/"
    assert tree.get("/-/web/package/statics/").content_type == "text/html"
    # The site's own links name index.html files: served as they are, never redirected deeper.
    page = tree.get("/-/web/package/statics/index.html", status=200)
    assert page.content_type == "text/html" and page.body == tree.get("/-/web/package/statics/").body
    assert tree.get("/-/web/index.html", status=200).content_type == "text/html"
    assert tree.get("/-/package/statics/dist-tags").json == {"latest": "1.0.0"}
    assert tree.get("/", status=302).headers["Location"] == "/-/web/"
    for hidden in ("/.registry-gen/state.sqlite3", "/statics/../.registry-gen"):
        assert tree.get(hidden, status=404).json == {"error": "not found"}


def test_registry_gen_api_runs_alone(tmp_path: Path) -> None:
    """`registry-gen api`: writes land in content/ and the tree; GETs of files are the static host's."""
    (tmp_path / "content").mkdir()
    (tmp_path / "registry.yaml").write_text("signup: open\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    env["PYTHONUNBUFFERED"] = "1"
    process = subprocess.Popen(
        [sys.executable, "-m", "registry_gen", "api", "--out", str(tmp_path / "public"), "--port", "0",
         "--base-url", "http://files.test/"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert process.stdout is not None
        base = None
        deadline = time.monotonic() + 60
        while base is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            found = re.search(r"API listening on (http://\S+/)", line)
            base = found.group(1) if found else None
        assert base is not None, "registry-gen api did not start"
        token = http("PUT", f"{base}-/user/org.couchdb.user:solo", body={"name": "solo", "password": "solo-password", "email": "s@example.com"}).json["token"]
        assert http("PUT", f"{base}alone", token=token, body=publish_body("alone", "1.0.0", tarball("alone", "1.0.0"))).status == 201
        packument = json.loads((tmp_path / "public" / "alone" / "index.html").read_bytes())
        assert packument["versions"]["1.0.0"]["dist"]["tarball"] == "http://files.test/alone/-/alone-1.0.0.tgz"
        assert http("GET", f"{base}alone").status == 404  # files are the static host's job
        assert http("GET", f"{base}-/whoami", token=token).json == {"username": "solo"}
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_web_login_sessions_expire_and_hand_out_a_token_once() -> None:
    now = [1000.0]
    logins = WebLoginPool(lifetime_seconds=60, clock=lambda: now[0])
    session = logins.start(False, "192.0.2.1")
    assert session.login_id != session.done_id  # the browser's link cannot be used to poll for the token
    assert logins.poll(session.done_id) == (True, None)
    assert logins.complete(session.login_id, "tok") and not logins.complete(session.login_id, "again")
    assert logins.poll(session.done_id) == (True, "tok")
    assert logins.poll(session.done_id) == (False, None)
    stale = logins.start(True, "192.0.2.1")
    now[0] += 61
    assert logins.by_login(stale.login_id) is None and logins.poll(stale.done_id) == (False, None)


def test_a_token_restricted_to_a_cidr_range_works_only_from_inside_it(settings: Settings, store: UserStore) -> None:
    app = _app(settings, store)
    password_token = _adduser(app, "ranged")["token"]
    created = app.post_json("/-/npm/v1/tokens", {"password": "password-123", "cidr_whitelist": ["10.20.0.0/16"]},
                            headers=_bearer(password_token), status=201).json
    assert created["cidr_whitelist"] == ["10.20.0.0/16"]
    ranged = created["token"]
    body = publish_body("ranged-pkg", "1.0.0", tarball("ranged-pkg", "1.0.0"))
    outside = app.put_json("/ranged-pkg", body, headers=_bearer(ranged), extra_environ={"REMOTE_ADDR": "192.0.2.7"},
                           status=401)
    assert "address" in outside.json["error"]
    assert not (settings.content_dir / "ranged-pkg").exists() and not (settings.out_dir / "ranged-pkg").exists()
    app.get("/-/whoami", headers=_bearer(ranged), extra_environ={"REMOTE_ADDR": "10.21.0.1"}, status=401)
    app.put_json("/ranged-pkg", body, headers=_bearer(ranged), extra_environ={"REMOTE_ADDR": "10.20.3.4"}, status=201)
    assert list(app.get("/ranged-pkg").json["versions"]) == ["1.0.0"]
