"""XML attacks are refused cheaply, and no password, hash or token ever reaches a response or a log."""

from __future__ import annotations

import logging
import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.user_api.conftest import Api, RecordedResponse, assert_no_leaks

_watching: list[list[tuple[str, Any]]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _watching and event in ("open", "os.open", "socket.connect", "urllib.Request"):
        _watching[-1].append((event, args[0] if args else None))


sys.addaudithook(_audit)  # audit hooks cannot be removed; it records only inside watch_io()


@contextmanager
def watch_io() -> Iterator[list[tuple[str, Any]]]:
    """Every file open and network connection made inside the block."""
    seen: list[tuple[str, Any]] = []
    _watching.append(seen)
    try:
        yield seen
    finally:
        _watching.pop()


@contextmanager
def peak_memory() -> Iterator[list[int]]:
    result: list[int] = []
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield result
    finally:
        result.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE user [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<user><username>lol</username><password>&lol9;</password></user>"""

QUADRATIC = (
    '<?xml version="1.0"?><!DOCTYPE user [<!ENTITY a "' + "A" * 30_000 + '">]><user><username>q</username>'
    "<fullName>" + "&a;" * 8_000 + "</fullName><password>12345678</password></user>"
)

EXTERNAL_FILE = """<?xml version="1.0"?>
<!DOCTYPE user [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<user><username>xxe</username><password>12345678</password><fullName>&xxe;</fullName></user>"""

EXTERNAL_DTD = """<?xml version="1.0"?>
<!DOCTYPE user SYSTEM "http://127.0.0.1:9/evil.dtd">
<user><username>dtd</username><password>12345678</password></user>"""

PARAMETER_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE user [<!ENTITY % remote SYSTEM "file:///etc/hostname"> %remote;]>
<user><username>pe</username><password>12345678</password></user>"""

EXTERNAL_XINCLUDE = """<user xmlns:xi="http://www.w3.org/2001/XInclude"><username>xi</username>
<password>12345678</password><xi:include href="file:///etc/passwd" parse="text"/></user>"""


@pytest.mark.parametrize(
    "payload",
    [BILLION_LAUGHS, QUADRATIC, EXTERNAL_FILE, EXTERNAL_DTD, PARAMETER_ENTITY, EXTERNAL_XINCLUDE],
    ids=["billion-laughs", "quadratic-blowup", "external-file", "external-dtd", "parameter-entity", "xinclude"],
)
@pytest.mark.parametrize("path", ["/user", "/-/user-api/tokens"])
def test_xml_attacks_are_400_without_memory_or_io(api: Api, payload: str, path: str) -> None:
    body = payload.encode()
    if path.endswith("tokens"):
        body = body.replace(b"<user>", b"<credentials>").replace(b"</user>", b"</credentials>")
    assert len(body) <= 64 * 1024, "the payload must pass the size limit to reach the parser"
    with watch_io() as io_events, peak_memory() as peak:
        response = api.post(path, body, content_type="application/xml", headers={"Accept": "application/xml"})
    assert response.status_int in (400, 422), response.body[:300]
    assert response.content_type == "application/problem+xml"
    assert b"root:" not in response.body and b"lollol" not in response.body
    assert not [e for e in io_events if "passwd" in str(e[1]) or "hostname" in str(e[1]) or e[0] == "socket.connect"]
    assert peak[0] < 4 * 1024 * 1024, f"parsing used {peak[0]} bytes"
    assert api.store.count_users() == 0


def test_dtd_refusal_names_the_rule(api: Api) -> None:
    response = api.post("/user", BILLION_LAUGHS, content_type="application/xml", status=400)
    assert response.json["type"].endswith("/malformed-body")
    assert "DTD" in response.json["detail"]


def test_secrets_never_reach_responses_or_logs(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    """Drive every endpoint, success and failure, with distinctive secrets; the fixture's leak check
    then scans every response and log record (DEBUG, all loggers) for passwords, hashes and tokens."""
    caplog.set_level(logging.DEBUG)
    admin, admin_token = api.make_user("root", role="admin", password="ADMIN-PASSWORD-42")
    first = "SIGNUP-PASSWORD-1337"
    second = "CHANGED-PASSWORD-2024"
    api.passwords.update({first, second, "WRONG-PASSWORD-999"})
    created = api.post("/user", {"username": "alice", "password": first, "email": "a@x.org"}, status=201).json
    api.post("/user", f"<user><username>bob</username><password>{first}</password></user>",
             content_type="application/xml", headers={"Accept": "application/xml"}, status=201)
    api.post("/user", {"username": "alice", "password": first}, status=409)
    api.post("/user", {"username": "Bad Name", "password": first}, status=422)
    token = api.login("alice", first, status=201).json["token"]
    api.login("alice", "WRONG-PASSWORD-999", status=401)
    api.login("nobody-here", first, status=401)
    api.get("/user", token=token, status=200)
    api.get("/user", token=admin_token, headers={"Accept": "application/xml"}, status=200)
    api.get(f"/user/{created['id']}", token=token, status=200)
    api.get("/user/search?keyword=ali", token=admin_token, status=200)
    api.put("/user", {"id": created["id"], "username": "alice", "email": "a@x.org", "password": second,
                      "currentPassword": "WRONG-PASSWORD-999"}, token=token, status=403)
    api.put("/user", {"id": created["id"], "username": "alice", "email": "a@x.org", "password": second,
                      "currentPassword": first}, token=token, status=200)
    api.get("/user", token=token, status=401)  # a password change ends every session
    token = api.login("alice", second, status=201).json["token"]
    api.get(f"/user?password={second}", token=token, status=400)
    api.get("/user", headers={"Authorization": f"Bearer {token}x"}, status=401)
    api.delete(f"/user/{created['id']}", token=admin_token, status=204)
    assert api.store.verify_password("root", "ADMIN-PASSWORD-42") == admin
    # The leak check runs in the fixture teardown over every response above; prove it would see one.
    leaky = RecordedResponse("200 OK", [("X-Debug", second)], b"{}")
    api.responses.append(leaky)
    with pytest.raises(AssertionError, match="reached a response"):
        assert_no_leaks(api, caplog)
    api.responses.remove(leaky)


def test_the_leak_check_catches_a_leak(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    """Guard against a vacuous check: a password logged on purpose must be found."""
    api.make_user("leaky", password="LEAKED-PASSWORD-1")
    logging.getLogger("user_api.test").warning("oops %s", "LEAKED-PASSWORD-1")
    with pytest.raises(AssertionError, match="reached the log"):
        assert_no_leaks(api, caplog)
    caplog.clear()


def test_the_leak_check_catches_a_hash_in_a_response(
    api: Api, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, token = api.make_user("hashy", password="HASHY-PASSWORD-1")
    from tests.user_api.conftest import all_password_hashes

    leaked_hash = all_password_hashes(api.store)[0]
    monkeypatch.setattr("user_api.app.view_for", lambda viewer, u: {"id": u.id, "username": leaked_hash})
    api.get(f"/user/{user.id}", token=token, status=200)
    with pytest.raises(AssertionError, match="reached a response"):
        assert_no_leaks(api, caplog)
    api.responses.clear()


def test_passwords_are_argon2id_and_never_stored_in_clear(api: Api) -> None:
    from tests.user_api.conftest import all_password_hashes

    api.post("/user", {"username": "carol", "password": "CLEAR-TEXT-PASSWORD"}, status=201)
    api.passwords.add("CLEAR-TEXT-PASSWORD")
    hashes = all_password_hashes(api.store)
    assert len(hashes) == 1 and hashes[0].startswith("$argon2id$")
    assert "CLEAR-TEXT-PASSWORD" not in hashes[0]


def test_tokens_are_stored_as_sha256_digests(api: Api) -> None:
    import hashlib

    _, token = api.make_user("dan")
    with api.store.dialect.read() as tx:  # type: ignore[attr-defined]
        stored = [row[0] for row in tx.all("SELECT token_hash FROM user_tokens")]
    assert stored == [hashlib.sha256(token.encode()).hexdigest()]
