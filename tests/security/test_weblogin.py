"""The web-login pool: per-address cap, eviction instead of 503, terminal binding (issue 13)."""

from __future__ import annotations

import re
from pathlib import Path

from user_api.weblogin import WebLoginPool, login_url, origin_allowed, token_description


def test_four_addresses_cannot_fill_the_pool_for_everyone() -> None:
    pool = WebLoginPool(capacity=1000, per_address=5)
    for i in range(4000):
        pool.start(False, f"203.0.113.{i % 4}")
    assert len(pool) == 20
    victim = pool.start(False, "192.0.2.1")
    assert pool.by_login(victim.login_id) is victim


def test_a_full_pool_evicts_the_oldest_unauthenticated_session() -> None:
    pool = WebLoginPool(capacity=3, per_address=5)
    first = pool.start(False, "a")
    pool.complete(first.login_id, "token-1")
    second = pool.start(False, "b")
    pool.start(False, "c")
    pool.start(False, "d")
    assert pool.poll(first.done_id) == (True, "token-1")  # an authenticated session is never evicted
    assert pool.by_login(second.login_id) is None


def test_the_session_carries_what_binds_it_to_the_terminal() -> None:
    pool = WebLoginPool(wall=lambda: 0.0)
    session = pool.start(False, "198.51.100.7")
    assert re.fullmatch(r"[A-Z2-9]{4}-[A-Z2-9]{4}", session.code)
    assert login_url("http://r.test/", session).endswith(f"/-/v1/login/{session.login_id}#{session.code}")
    assert token_description(session) == f"npm web login started from 198.51.100.7 at 1970-01-01 00:00:00 UTC (code {session.code})"


def test_only_the_registrys_own_origin_may_post_the_form() -> None:
    assert origin_allowed("http://r.test", None, "http://r.test/")
    assert origin_allowed(None, "http://r.test/-/v1/login/x", "http://r.test/")
    assert not origin_allowed("https://evil.example", "http://r.test/", "http://r.test/")
    assert not origin_allowed(None, None, "http://r.test/")


def test_the_login_page_shows_code_address_and_time_once_given_a_session() -> None:
    from pathlib import Path

    import jinja2

    import user_api

    pages = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(user_api.__file__).parent / "templates")), autoescape=True)
    session = WebLoginPool(wall=lambda: 0.0).start(False, "198.51.100.7")
    page = pages.get_template("login.html").render(session=session, action="/x", site_title="R", create=False)
    assert session.code in page and "198.51.100.7" in page and "1970-01-01 00:00:00 UTC" in page
    assert "Confirmation code" not in pages.get_template("login.html").render(action="/x", site_title="R", create=False)


# ---------------------------------------------------------------- against a real serve

import http.client  # noqa: E402  (kept beside the tests that need it)
from urllib.parse import urlsplit  # noqa: E402

import pytest  # noqa: E402

from tests.registry_api.helpers import RegistryProcess, http as request  # noqa: E402


def _start_login(base: str, source: str) -> int:
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(str(parts.hostname), parts.port, timeout=30, source_address=(source, 0))
    try:
        connection.request("POST", "/-/v1/login", b"{}", {"Content-Type": "application/json"})
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.slow
def test_a_few_addresses_cannot_exhaust_web_logins(tmp_path: Path) -> None:
    process = RegistryProcess(tmp_path).start()
    try:
        # 40 addresses, 25 logins each (under the per-address rate limit), fill the 1000 places.
        statuses = [_start_login(process.base, f"127.0.2.{1 + i % 40}") for i in range(1000)]
        assert set(statuses) == {200}
        assert request("POST", process.base + "-/v1/login", body={}).status == 200  # today: 503
    finally:
        process.stop()


@pytest.mark.slow
def test_a_real_browser_sees_the_code_and_its_form_post_passes_the_origin_check(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    from tests.registry_api.helpers import add_user

    process = RegistryProcess(tmp_path).start()
    try:
        add_user(process.base, "wanda", "wanda-password-1")
        started = request("POST", process.base + "-/v1/login", body={}).json
        code = started["loginUrl"].rsplit("#", 1)[1]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page()
                page.goto(started["loginUrl"])
                assert code in page.inner_text("#confirmation") and "127.0.0.1" in page.inner_text("#confirmation")
                page.fill("#username", "wanda")
                page.fill("#password", "wanda-password-1")
                page.click("button[type=submit]")
                page.wait_for_selector("text=logged in as wanda", timeout=30_000)
            finally:
                browser.close()
        done = request("GET", started["doneUrl"])
        assert done.status == 200 and done.json["token"]
        tokens = request("GET", process.base + "-/npm/v1/tokens", token=done.json["token"]).json["objects"]
        assert any(code in t["name"] and "127.0.0.1" in t["name"] for t in tokens)
    finally:
        process.stop()
