"""Every /user endpoint in JSON and XML, on SQLite and PostgreSQL (the `api` fixture is parametrized)."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree

import pytest

from tests.user_api.conftest import Api

XML = {"Accept": "application/xml"}
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
RFC3339_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def xml_fields(element: ElementTree.Element) -> dict[str, str | None]:
    return {child.tag: child.text for child in element}


def user_xml(**fields: str) -> str:
    inner = "".join(f"<{name}>{value}</{name}>" for name, value in fields.items())
    return f"<user>{inner}</user>"


@pytest.fixture
def admin(api: Api) -> tuple[Any, str]:
    return api.make_user("root", role="admin", email="root@example.org")


# ---- POST /user ------------------------------------------------------------------------------


def test_create_json_returns_201_location_etag_and_private_view(api: Api) -> None:
    response = api.post("/user", {"username": "alice", "password": "correct horse", "email": "Alice@Example.ORG",
                                  "fullName": "Alice Liddell"}, status=201)
    body = response.json
    assert UUID_RE.match(body["id"])
    assert response.headers["Location"] == f"/user/{body['id']}"
    assert response.headers["ETag"].startswith('"')
    assert response.content_type == "application/json"
    assert body == {
        "id": body["id"], "username": "alice", "email": "Alice@example.org", "fullName": "Alice Liddell",
        "role": "user", "status": "active", "createdAt": body["createdAt"], "updatedAt": body["updatedAt"],
    }
    assert RFC3339_RE.match(body["createdAt"])
    assert "password" not in response.text


def test_create_xml_in_and_out(api: Api) -> None:
    response = api.post("/user", user_xml(username="bob", password="hunter2hunter2", fullName="Bob &amp; Co"),
                        content_type="application/xml; charset=utf-8", headers=XML, status=201)
    assert response.content_type == "application/xml"
    root = ElementTree.fromstring(response.body)
    assert root.tag == "user"
    fields = xml_fields(root)
    assert fields["username"] == "bob" and fields["fullName"] == "Bob & Co"
    assert "password" not in fields and "email" not in fields
    assert response.headers["Location"] == f"/user/{fields['id']}"


def test_create_text_xml_body_and_json_answer(api: Api) -> None:
    response = api.post("/user", user_xml(username="carol", password="12345678"), content_type="text/xml", status=201)
    assert response.json["username"] == "carol"


def test_create_taken_username_is_409(api: Api) -> None:
    api.post("/user", {"username": "dave", "password": "12345678"}, status=201)
    response = api.post("/user", {"username": "dave", "password": "abcdefgh"}, status=409)
    assert response.content_type == "application/problem+json"
    assert response.json["type"].endswith("/username-taken")
    assert response.json["status"] == 409


def test_create_collects_every_field_error_as_422(api: Api) -> None:
    response = api.post("/user", {"username": "Not Valid", "password": "short", "email": "nope", "fullName": "",
                                  "extra": 1, "createdAt": "2020-01-01T00:00:00Z"}, status=422)
    pointers = {error["pointer"] for error in response.json["errors"]}
    assert pointers == {"#/username", "#/password", "#/email", "#/fullName", "#/extra", "#/createdAt"}
    assert response.json["type"].endswith("/validation-error")


def test_create_without_required_fields_is_422_in_xml_too(api: Api) -> None:
    response = api.post("/user", "<user><email>a@b.co</email></user>", content_type="application/xml",
                        headers=XML, status=422)
    assert response.content_type == "application/problem+xml"
    problem = ElementTree.fromstring(response.body)
    ns = "{urn:ietf:rfc:7807}"
    assert problem.tag == f"{ns}problem"
    errors = problem.find(f"{ns}errors")
    assert errors is not None
    pointers = sorted(str(item.findtext(f"{ns}pointer")) for item in errors)
    assert pointers == ["#/password", "#/username"]


@pytest.mark.parametrize(
    "body",
    [b"[]", b'"x"', b"{", b'{"username": "a", "username": "b", "password": "12345678"}', b'{"n": NaN}', b"\xff\xfe"],
    ids=["array", "string", "truncated", "duplicate-member", "nan", "not-utf8"],
)
def test_malformed_json_is_400(api: Api, body: bytes) -> None:
    response = api.post("/user", body, content_type="application/json", status=400)
    assert response.json["type"].endswith("/malformed-body")


@pytest.mark.parametrize(
    "body",
    ["<user><username>a</username>", "<account><username>a</username></account>",
     '<user id="1"><username>a</username></user>', "<user><username><b>a</b></username></user>",
     "<user>text<username>a</username></user>", "<user><username>a</username><username>b</username></user>",
     '<user xmlns="urn:x"><username>a</username></user>'],
    ids=["unclosed", "wrong-root", "attribute", "nested", "mixed", "repeated", "namespace"],
)
def test_malformed_xml_is_400(api: Api, body: str) -> None:
    api.post("/user", body, content_type="application/xml", status=400)


def test_wrong_content_type_is_415_with_accept(api: Api) -> None:
    response = api.post("/user", "username=alice&password=12345678",
                        content_type="application/x-www-form-urlencoded", status=415)
    assert response.headers["Accept"] == "application/json, application/xml"
    assert response.json["type"].endswith("/unsupported-media-type")
    api.post("/user", b'{"username": "a"}', status=415)  # no Content-Type at all
    api.post("/user", b'{"username": "a"}', content_type="application/json; charset=latin-1", status=415)


def test_body_over_the_limit_is_413_before_parsing(api: Api) -> None:
    big = b'{"username": "alice", "password": "' + b"x" * (64 * 1024) + b'"}'
    response = api.post("/user", big, content_type="application/json", status=413)
    assert response.json["type"].endswith("/payload-too-large")
    assert api.store.get_by_username("alice") is None


def test_body_just_under_the_limit_is_parsed(api: Api) -> None:
    padding = " " * (64 * 1024 - 100)
    body = ('{"username": "alice", "password": "12345678"' + padding + "}").encode()
    assert len(body) <= 64 * 1024
    api.post("/user", body, content_type="application/json", status=201)


# ---- GET /user/<id> ----------------------------------------------------------------------------


def test_read_json_and_xml_with_etag(api: Api, admin: tuple[Any, str]) -> None:
    user, _ = api.make_user("erin", email="erin@example.org", full_name="Erin E")
    _, token = admin
    response = api.get(f"/user/{user.id}", token=token, status=200)
    assert response.json["email"] == "erin@example.org"
    assert response.headers["ETag"] == user.etag
    xml = api.get(f"/user/{user.id}", token=token, headers=XML, status=200)
    assert xml.headers["Vary"] == "Accept"
    assert xml_fields(ElementTree.fromstring(xml.body)) == {
        "id": user.id, "username": "erin", "email": "erin@example.org", "fullName": "Erin E", "role": "user",
        "status": "active", "createdAt": response.json["createdAt"], "updatedAt": response.json["updatedAt"],
    }


def test_read_unknown_or_malformed_id_is_404_problem(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    missing = api.get("/user/00000000-0000-4000-8000-000000000000", token=token, status=404)
    assert missing.content_type == "application/problem+json"
    assert missing.json["type"] == "about:blank"
    not_uuid = api.get("/user/12345", token=token, headers=XML, status=404)
    assert not_uuid.content_type == "application/problem+xml"
    assert b"<html" not in not_uuid.body.lower()


def test_read_accepts_upper_case_uuid(api: Api, admin: tuple[Any, str]) -> None:
    user, token = admin
    assert api.get(f"/user/{user.id.upper()}", token=token, status=200).json["id"] == user.id


# ---- GET /user (paging) ----------------------------------------------------------------------------


def _seed(api: Api, count: int) -> list[Any]:
    return [api.store.create_user(f"user{n:03d}", "12345678") for n in range(count)]


def test_list_defaults_page_1_size_10_with_totals_and_links(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    _seed(api, 24)  # 25 users with the admin
    response = api.get("/user", token=token, status=200)
    assert len(response.json["content"]) == 10
    assert response.json["page"] == {"number": 1, "size": 10, "totalElements": 25, "totalPages": 3}
    assert response.headers["X-Total-Count"] == "25"
    assert response.headers["Link"] == (
        '</user?page=1&size=10>; rel="first", </user?page=2&size=10>; rel="next", </user?page=3&size=10>; rel="last"'
    )
    assert [u["username"] for u in response.json["content"]][:2] == ["root", "user000"]


def test_list_last_partial_page_and_past_the_end(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    _seed(api, 24)
    last = api.get("/user?page=3&size=10", token=token, status=200)
    assert [u["username"] for u in last.json["content"]] == [f"user{n:03d}" for n in range(19, 24)]
    assert last.headers["Link"] == (
        '</user?page=1&size=10>; rel="first", </user?page=2&size=10>; rel="prev", </user?page=3&size=10>; rel="last"'
    )
    middle = api.get("/user?page=2&size=5", token=token, status=200)
    assert '</user?page=1&size=5>; rel="prev"' in middle.headers["Link"]
    assert '</user?page=3&size=5>; rel="next"' in middle.headers["Link"]
    fourth = api.get("/user?page=4&size=5", token=token, status=200)
    assert '</user?page=3&size=5>; rel="prev"' in fourth.headers["Link"]  # the page before, not the first
    beyond = api.get("/user?page=7", token=token, status=200)
    assert beyond.json["content"] == [] and beyond.json["page"]["totalElements"] == 25


def test_list_xml_shape(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    _seed(api, 2)
    root = ElementTree.fromstring(api.get("/user?size=2", token=token, headers=XML, status=200).body)
    assert root.tag == "page"
    assert [child.tag for child in root] == ["content", "number", "size", "totalElements", "totalPages"]
    assert [u.findtext("username") for u in root.find("content")] == ["root", "user000"]  # type: ignore[union-attr]
    assert (root.findtext("totalElements"), root.findtext("totalPages")) == ("3", "2")


@pytest.mark.parametrize(
    "query",
    ["page=0", "page=-1", "page=1.5", "page=x", "page=", "size=0", "size=101", "size=1e2", "page=1001",
     "page=99999999999999999999"],
)
def test_list_out_of_range_paging_is_400_never_clamped(api: Api, admin: tuple[Any, str], query: str) -> None:
    _, token = admin
    response = api.get(f"/user?{query}", token=token, status=400)
    assert response.json["errors"][0]["parameter"] in ("page", "size")


def test_list_paging_edges_accepted(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    api.get("/user?page=1000&size=100", token=token, status=200)
    api.get("/user?page=1&size=1", token=token, status=200)


def test_unknown_parameter_is_400_and_name_only_is_echoed(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    response = api.get("/user?page=1&sort=name&password=hunter2hunter2", token=token, status=400)
    assert response.json["type"].endswith("/unknown-parameter")
    assert {e["parameter"] for e in response.json["errors"]} == {"sort", "password"}
    assert "hunter2" not in response.text


def test_repeated_parameter_is_400(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    response = api.get("/user?page=1&page=2", token=token, status=400)
    assert response.json["errors"] == [{"detail": "may appear only once", "parameter": "page"}]


def test_ten_parameters_pass_the_count_but_eleven_do_not(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    ten = "&".join(["keyword=ab"] * 9 + ["size=5"])
    # Ten is within the limit; the repeats are then refused for being repeats, not for the count.
    assert api.get(f"/user/search?{ten}", token=token, status=400).json["type"].endswith("/validation-error")
    eleven = "&".join(["keyword=ab"] * 10 + ["size=5"])
    response = api.get(f"/user/search?{eleven}", token=token, status=400)
    assert response.json["type"].endswith("/too-many-parameters")


def test_query_parameters_on_item_routes_are_unknown(api: Api, admin: tuple[Any, str]) -> None:
    user, token = admin
    api.get(f"/user/{user.id}?page=1", token=token, status=400)
    api.delete(f"/user/{user.id}?force=1", token=token, status=400)


def test_overlong_query_string_is_414(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    response = api.get("/user/search?keyword=" + "a" * 2100, token=token, status=414)
    assert response.json["status"] == 414


def test_query_string_that_is_not_utf8_is_400(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    api.get("/user/search?keyword=%ff%fe", token=token, status=400)


# ---- GET /user/search ----------------------------------------------------------------------------------


@pytest.fixture
def people(api: Api) -> dict[str, Any]:
    users = {}
    for name, full, email in [
        ("mark", "Mark Twain", "mt@river.org"),
        ("marketing", "Ads Team", "ads@corp.example"),
        ("amark", "Anne Mark", "anne@x.org"),
        ("zed", "Zed Marker", "zed@x.org"),
        ("bob", "Robert", "bob@marketplace.example"),
        ("ma", "M A", "ma@x.org"),
        ("zoe", "Zoë Ångström", "zoe@x.org"),
    ]:
        users[name] = api.store.create_user(name, "12345678", email, full)
    return users


def _names(response: Any) -> list[str]:
    return [u["username"] for u in response.json["content"]]


def test_search_ranks_exact_then_prefix_then_the_rest(api: Api, admin: tuple[Any, str], people: dict[str, Any]) -> None:
    _, token = admin
    response = api.get("/user/search?keyword=mark", token=token, status=200)
    assert _names(response)[:2] == ["mark", "marketing"]
    assert set(_names(response)[2:]) == {"amark", "zed", "bob"}  # admins also match email (bob)
    assert response.json["page"]["totalElements"] == 5


def test_search_is_case_insensitive_and_substring(api: Api, admin: tuple[Any, str], people: dict[str, Any]) -> None:
    _, token = admin
    assert _names(api.get("/user/search?keyword=MARK", token=token)) [:2] == ["mark", "marketing"]
    assert _names(api.get("/user/search?keyword=wai", token=token)) == ["mark"]
    assert _names(api.get("/user/search?keyword=%C3%85NGSTR", token=token)) == ["zoe"]  # Ångstr, any case
    assert _names(api.get("/user/search?keyword=%C3%A5ngstr", token=token)) == ["zoe"]


def test_search_short_keywords_follow_the_same_rule(api: Api, admin: tuple[Any, str], people: dict[str, Any]) -> None:
    """Issue 16: one rule for every length (substring, username prefixes first); no 3-character switch."""
    _, token = admin
    _, user_token = api.make_user("plain")
    short = api.get("/user/search?keyword=ma", token=token)
    assert _names(short)[:3] == ["ma", "mark", "marketing"]
    assert set(_names(short)[3:]) == {"amark", "zed", "bob"}  # username, full name ("Zed Marker"), email
    assert short.json["page"]["totalElements"] == 6
    assert set(_names(api.get("/user/search?keyword=ma", token=user_token))) == {"ma", "mark", "marketing", "amark", "zed"}
    assert _names(api.get("/user/search?keyword=MA", token=token))[:3] == ["ma", "mark", "marketing"]
    assert _names(api.get("/user/search?keyword=wa", token=token)) == ["mark"]  # Twain: inside a full name
    for literal in ("%25", "_", "%5C"):  # %, _ and \ are text, not LIKE syntax
        assert api.get(f"/user/search?keyword={literal}", token=token).json["content"] == []
    pages = [_names(api.get(f"/user/search?keyword=ma&size=4&page={n}", token=token)) for n in (1, 2)]
    assert pages[0][:3] == ["ma", "mark", "marketing"] and sorted(pages[0][3:] + pages[1]) == ["amark", "bob", "zed"]


def test_search_email_only_for_admins(api: Api, admin: tuple[Any, str], people: dict[str, Any]) -> None:
    _, admin_token = admin
    _, user_token = api.make_user("plain")
    assert _names(api.get("/user/search?keyword=marketplace", token=admin_token)) == ["bob"]
    assert _names(api.get("/user/search?keyword=marketplace", token=user_token)) == []
    assert _names(api.get("/user/search?keyword=river.org", token=user_token)) == []
    as_user = api.get("/user/search?keyword=mark", token=user_token, status=200)
    assert "bob" not in _names(as_user)
    assert all("email" not in u for u in as_user.json["content"])


def test_search_paging_spans_prefix_and_other_matches(api: Api, admin: tuple[Any, str], people: dict[str, Any]) -> None:
    _, token = admin
    pages = [_names(api.get(f"/user/search?keyword=mark&size=2&page={n}", token=token)) for n in (1, 2, 3, 4)]
    assert pages[0] == ["mark", "marketing"]
    assert sorted(pages[1] + pages[2]) == ["amark", "bob", "zed"] and len(pages[2]) == 1
    assert pages[3] == []


def test_search_links_use_canonical_keyword(api: Api, admin: tuple[Any, str], people: dict[str, Any]) -> None:
    _, token = admin
    response = api.get("/user/search?keywork=mark&size=2", token=token, status=200)
    assert _names(response) == ["mark", "marketing"]
    assert '</user/search?keyword=mark&page=2&size=2>; rel="next"' in response.headers["Link"]
    assert "keywork" not in response.headers["Link"]


def test_keyword_and_keywork(api: Api, admin: tuple[Any, str], people: dict[str, Any]) -> None:
    _, token = admin
    canonical = _names(api.get("/user/search?keyword=mark", token=token, status=200))
    assert _names(api.get("/user/search?keywork=mark", token=token, status=200)) == canonical
    assert _names(api.get("/user/search?keyword=mark&keywork=mark", token=token, status=200)) == canonical
    conflict = api.get("/user/search?keyword=mark&keywork=zed", token=token, status=400)
    assert conflict.json["errors"] == [{"detail": "conflicts with keywork", "parameter": "keyword"}]


@pytest.mark.parametrize("query", ["", "keyword=", "keyword=%20%20", "keyword=a%00b", "keyword=" + "x" * 101, "page=2"])
def test_search_keyword_missing_blank_or_invalid_is_400(api: Api, admin: tuple[Any, str], query: str) -> None:
    _, token = admin
    response = api.get(f"/user/search?{query}", token=token, status=400)
    assert response.json["errors"][0]["parameter"] == "keyword"


@pytest.mark.parametrize(
    ("keyword", "expected"),
    [('o"b', []), ("AND", []), ("NEAR(", []), ("0% u", ["plain"]), ("r_s", ["plain"]), ("%_%", []), ("a%", []),
     ("_", ["plain"]), ("\\", []), ("' OR 1=1 --", []), ("{username} : x", []), ("pla", ["plain"])],
)
def test_search_treats_syntax_and_wildcards_as_literal_text(
    api: Api, admin: tuple[Any, str], keyword: str, expected: list[str]
) -> None:
    _, token = admin
    api.store.create_user("plain", "12345678", None, "Percent 100% under_score")
    response = api.get(f"/user/search?keyword={quote(keyword)}", token=token, status=200)
    assert _names(response) == expected


def test_search_total_stops_at_the_cap(api: Api, admin: tuple[Any, str], people: dict[str, Any],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _, token = admin
    monkeypatch.setattr("user_api.app.SEARCH_TOTAL_CAP", 3)
    response = api.get("/user/search?keyword=mark&size=2", token=token, status=200)
    assert response.json["page"] == {"number": 1, "size": 2, "totalElements": 3, "totalPages": 2}
    assert response.headers["X-Total-Count"] == "3"


def test_search_paging_bounds(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    api.get("/user/search?keyword=ab&page=100&size=100", token=token, status=200)
    response = api.get("/user/search?keyword=ab&page=101", token=token, status=400)
    assert response.json["type"].endswith("/page-window-exceeded")


def test_search_xml(api: Api, admin: tuple[Any, str], people: dict[str, Any]) -> None:
    _, token = admin
    root = ElementTree.fromstring(api.get("/user/search?keyword=zoe", token=token, headers=XML, status=200).body)
    assert [u.findtext("fullName") for u in root.find("content")] == ["Zoë Ångström"]  # type: ignore[union-attr]


# ---- PUT /user ---------------------------------------------------------------------------------------


def test_update_json_replaces_profile_and_bumps_etag(api: Api) -> None:
    user, token = api.make_user("frank", email="f@x.org", full_name="Frank")
    response = api.put("/user", {"id": user.id, "username": "frank", "email": "f@x.org", "fullName": "Frank F"},
                       token=token, status=200)
    assert response.json["fullName"] == "Frank F"
    assert response.headers["ETag"] != user.etag
    cleared = api.put("/user", {"id": user.id, "username": "frank", "email": "f@x.org"}, token=token, status=200)
    assert "fullName" not in cleared.json


def test_update_xml(api: Api) -> None:
    user, token = api.make_user("gina", full_name="Gina")
    body = user_xml(id=user.id, username="gina", fullName="Gina G")
    response = api.put("/user", body, content_type="application/xml", token=token, headers=XML, status=200)
    assert xml_fields(ElementTree.fromstring(response.body))["fullName"] == "Gina G"


def test_update_if_match(api: Api) -> None:
    user, token = api.make_user("hank")
    body = {"id": user.id, "username": "hank", "fullName": "Hank"}
    first = api.put("/user", body, token=token, headers={"If-Match": user.etag}, status=200)
    stale = api.put("/user", {**body, "fullName": "Other"}, token=token, headers={"If-Match": user.etag}, status=412)
    assert stale.json["type"].endswith("/precondition-failed")
    api.put("/user", {**body, "fullName": "Other"}, token=token, headers={"If-Match": f"W/{first.headers['ETag']}"},
            status=412)
    api.put("/user", {**body, "fullName": "Other"}, token=token, headers={"If-Match": first.headers["ETag"]},
            status=200)
    api.put("/user", {**body, "fullName": "Star"}, token=token, headers={"If-Match": "*"}, status=200)
    assert api.store.get_by_id(user.id).full_name == "Star"  # type: ignore[union-attr]


def test_update_password_needs_current_password(api: Api) -> None:
    user, token = api.make_user("ivan", password="old-password-1")
    body = {"id": user.id, "username": "ivan", "password": "new-password-2"}
    missing = api.put("/user", body, token=token, status=403)
    assert missing.json["errors"][0]["pointer"] == "#/currentPassword"
    assert missing.json["type"].endswith("/reauthentication-required")
    api.passwords.add("wrong-password")
    api.put("/user", {**body, "currentPassword": "wrong-password"}, token=token, status=403)
    api.passwords.add("new-password-2")
    api.put("/user", {**body, "currentPassword": "old-password-1"}, token=token, status=200)
    assert api.store.verify_password("ivan", "new-password-2") is not None
    assert api.store.verify_password("ivan", "old-password-1") is None


def test_update_email_needs_current_password_but_full_name_does_not(api: Api) -> None:
    user, token = api.make_user("judy", password="judy-password", email="j@x.org")
    api.put("/user", {"id": user.id, "username": "judy", "email": "new@x.org"}, token=token, status=403)
    api.put("/user", {"id": user.id, "username": "judy", "email": "new@x.org", "currentPassword": "judy-password"},
            token=token, status=200)
    api.put("/user", {"id": user.id, "username": "judy", "email": "new@x.org", "fullName": "J"}, token=token,
            status=200)


def test_update_unknown_id_is_404_and_missing_id_is_422(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    api.put("/user", {"id": "00000000-0000-4000-8000-000000000000", "username": "x"}, token=token, status=404)
    response = api.put("/user", {"username": "x"}, token=token, status=422)
    assert response.json["errors"] == [{"detail": "is required", "pointer": "#/id"}]


def test_update_to_taken_username_is_409(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    user, _ = api.make_user("kate")
    api.make_user("kathy")
    api.put("/user", {"id": user.id, "username": "kathy"}, token=token, status=409)
    api.put("/user", {"id": user.id, "username": "katherine"}, token=token, status=200)


def test_put_leaving_email_out_says_that_it_removes_it(api: Api) -> None:
    user, token = api.make_user("pia", password="pia-password", email="pia@x.org")
    response = api.put("/user", {"id": user.id, "username": "pia", "fullName": "Pia"}, token=token, status=403)
    assert "removes your email" in response.json["errors"][0]["detail"]
    assert "PATCH" in response.json["errors"][0]["detail"]


# ---- PATCH /user/<id> (JSON Merge Patch, RFC 7396) -------------------------------------------------

MERGE_PATCH = "application/merge-patch+json"


def _patch(api: Api, user_id: str, body: dict[str, Any] | str, *, content_type: str = MERGE_PATCH,
           **kw: Any) -> Any:
    raw = body if isinstance(body, str) else json.dumps(body)
    return api.request("PATCH", f"/user/{user_id}", body=raw, content_type=content_type, **kw)


def test_patch_changes_only_the_members_sent(api: Api) -> None:
    user, token = api.make_user("quinn", email="q@x.org", full_name="Quinn")
    # The case: only fullName changes, so no currentPassword is asked for.
    response = _patch(api, user.id, {"fullName": "Quinn Q"}, token=token, status=200)
    assert response.json["fullName"] == "Quinn Q" and response.json["email"] == "q@x.org"
    assert response.headers["ETag"] != user.etag
    stored = api.store.get_by_id(user.id)
    assert stored is not None and (stored.email, stored.full_name) == ("q@x.org", "Quinn Q")
    # Sending the current email unchanged is not a change either.
    _patch(api, user.id, {"email": "q@X.ORG", "fullName": "Q"}, token=token, status=200)


def test_patch_null_removes_and_absent_keeps(api: Api) -> None:
    user, token = api.make_user("rosa", email="r@x.org", full_name="Rosa")
    response = _patch(api, user.id, {"fullName": None}, token=token, status=200)
    assert "fullName" not in response.json and response.json["email"] == "r@x.org"
    stored = api.store.get_by_id(user.id)
    assert stored is not None and stored.full_name is None and stored.email == "r@x.org"


def test_admin_resets_a_password_by_patch_without_erasing_the_profile(api: Api, admin: tuple[Any, str]) -> None:
    _, admin_token = admin
    user, _ = api.make_user("sam", email="sam@x.org", full_name="Sam Smith", password="old-password-1")
    api.passwords.add("reset-password-9")
    _patch(api, user.id, {"password": "reset-password-9"}, token=admin_token, status=200)
    assert api.store.verify_password("sam", "reset-password-9") is not None
    stored = api.store.get_by_id(user.id)
    assert stored is not None and (stored.email, stored.full_name) == ("sam@x.org", "Sam Smith")


def test_patch_asks_for_current_password_only_when_email_or_password_change(api: Api) -> None:
    user, token = api.make_user("tess", password="tess-password", email="t@x.org")
    missing = _patch(api, user.id, {"email": "new@x.org"}, token=token, status=403)
    assert missing.json["errors"][0]["pointer"] == "#/currentPassword"
    _patch(api, user.id, {"email": None}, token=token, status=403)  # removing is a change too
    api.passwords.add("tess-password-2")
    _patch(api, user.id, {"password": "tess-password-2"}, token=token, status=403)
    _patch(api, user.id, {"email": "new@x.org", "currentPassword": "tess-password"}, token=token, status=200)
    assert api.store.get_by_id(user.id).email == "new@x.org"  # type: ignore[union-attr]


def test_patch_keeps_the_field_and_permission_rules(api: Api) -> None:
    user, token = api.make_user("uma")
    other, _ = api.make_user("vera")
    forbidden = _patch(api, user.id, {"role": "admin"}, token=token, status=403)
    assert forbidden.json["errors"] == [{"detail": "only an administrator may change this", "pointer": "#/role"}]
    _patch(api, other.id, {"fullName": "Not mine"}, token=token, status=403)
    invalid = _patch(api, user.id, {"fullName": 42, "password": None, "nope": 1}, token=token, status=422)
    assert {e["pointer"] for e in invalid.json["errors"]} == {"#/fullName", "#/password", "#/nope"}
    # The id is the URL's: a patch naming one (even the same) is refused, like the read-only fields.
    for body in ({"id": other.id}, {"id": user.id}, {"createdAt": "2020-01-01T00:00:00Z"}):
        refused = _patch(api, user.id, body, token=token, status=422)
        assert refused.json["errors"][0]["pointer"] == "#/" + next(iter(body))
    _patch(api, "00000000-0000-4000-8000-000000000000", {"fullName": "X"}, token=token, status=404)
    _patch(api, user.id, {"fullName": "Uma"}, status=401)
    _patch(api, user.id, "[]", token=token, status=400)


def test_patch_needs_a_merge_patch_or_xml_body(api: Api) -> None:
    user, token = api.make_user("wes")
    refused = _patch(api, user.id, {"fullName": "Wes"}, content_type="application/json", token=token, status=415)
    assert refused.headers["Accept-Patch"] == "application/merge-patch+json, application/xml, text/xml"
    assert "merge-patch" in refused.json["detail"]
    _patch(api, user.id, {"fullName": "Wes"}, content_type=MERGE_PATCH + "; charset=utf-8", token=token, status=200)


def test_patch_if_match(api: Api) -> None:
    user, token = api.make_user("xena")
    first = _patch(api, user.id, {"fullName": "X1"}, token=token, headers={"If-Match": user.etag}, status=200)
    stale = _patch(api, user.id, {"fullName": "X2"}, token=token, headers={"If-Match": user.etag}, status=412)
    assert stale.json["type"].endswith("/precondition-failed")
    _patch(api, user.id, {"fullName": "X2"}, token=token, headers={"If-Match": first.headers["ETag"]}, status=200)


def test_patch_xml_partial_user_and_empty_element_removes(api: Api) -> None:
    user, token = api.make_user("yann", email="y@x.org", full_name="Yann")
    response = _patch(api, user.id, user_xml(fullName="Yann Y"), content_type="application/xml", token=token,
                      headers=XML, status=200)
    fields = xml_fields(ElementTree.fromstring(response.body))
    assert fields["fullName"] == "Yann Y" and fields["email"] == "y@x.org"
    cleared = _patch(api, user.id, "<user><fullName/></user>", content_type="text/xml", token=token, status=200)
    assert "fullName" not in cleared.json and cleared.json["email"] == "y@x.org"


def test_put_on_item_path_is_405_problem_with_allow(api: Api, admin: tuple[Any, str]) -> None:
    user, token = admin
    response = api.put(f"/user/{user.id}", {"id": user.id, "username": "root"}, token=token, status=405)
    assert set(response.headers["Allow"].split(",")) == {"GET", "PATCH", "DELETE"}
    assert response.content_type == "application/problem+json"


# ---- DELETE /user/<id> -----------------------------------------------------------------------------------


def test_delete_is_204_then_404_and_username_stays_reserved(api: Api, admin: tuple[Any, str]) -> None:
    _, token = admin
    user, user_token = api.make_user("leo", email="leo@x.org")
    response = api.delete(f"/user/{user.id}", token=token, status=204)
    assert response.body == b""
    api.get(f"/user/{user.id}", token=token, status=404)
    api.delete(f"/user/{user.id}", token=token, status=404)
    api.get("/user", token=user_token, status=401)  # the deleted user's tokens are gone
    assert "leo" not in [u["username"] for u in api.get("/user", token=token).json["content"]]
    assert api.get("/user/search?keyword=leo", token=token).json["content"] == []
    api.post("/user", {"username": "leo", "password": "12345678"}, status=409)


def test_deleting_the_last_admin_is_409(api: Api, admin: tuple[Any, str]) -> None:
    root, token = admin
    response = api.delete(f"/user/{root.id}", token=token, status=409)
    assert response.json["type"].endswith("/last-admin")
    other, _ = api.make_user("second", role="admin")
    api.delete(f"/user/{root.id}", token=token, status=204)
    assert api.store.get_by_id(other.id) is not None


# ---- negotiation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, "application/json"),
        ("*/*", "application/json"),
        ("application/*", "application/json"),
        ("application/xml", "application/xml"),
        ("text/xml", "text/xml"),
        ("application/json;q=0.5, application/xml", "application/xml"),
        ("text/html, application/xml;q=0.9", "application/xml"),
        ("application/json;q=0, */*", "application/xml"),
    ],
)
def test_accept_selects_the_representation(api: Api, admin: tuple[Any, str], accept: str | None, expected: str) -> None:
    user, token = admin
    headers = {"Accept": accept} if accept else {}
    assert api.get(f"/user/{user.id}", token=token, headers=headers, status=200).content_type == expected


@pytest.mark.parametrize("accept", ["text/html", "application/json;q=0, application/xml;q=0", "image/*"])
def test_unacceptable_accept_is_406_problem_json(api: Api, admin: tuple[Any, str], accept: str) -> None:
    user, token = admin
    response = api.get(f"/user/{user.id}", token=token, headers={"Accept": accept}, status=406)
    assert response.content_type == "application/problem+json"
    assert response.json["type"].endswith("/not-acceptable")


def test_every_response_carries_request_id_and_safety_headers(api: Api, admin: tuple[Any, str]) -> None:
    user, token = admin
    for response in (api.get(f"/user/{user.id}", token=token), api.get("/nowhere"), api.get("/user")):
        assert response.headers["Cache-Control"] == "no-store"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        request_id = response.headers["X-Request-Id"]
        if response.status_int >= 400:
            assert response.json["instance"] == f"urn:uuid:{request_id}"


def test_unhandled_error_is_a_bare_500_problem(
    api: Api, admin: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, token = admin

    def explode(**_: Any) -> None:
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr(api.store, "list_users", explode)
    response = api.get("/user", token=token, headers=XML, status=500)
    assert response.content_type == "application/problem+xml"
    assert b"secret internals" not in response.body and b"Traceback" not in response.body


def test_unsupported_methods_are_405_problems(api: Api) -> None:
    for method, path in (("PATCH", "/user"), ("PATCH", "/user/search"), ("DELETE", "/user/search"), ("POST", "/-/user-api/openapi.json")):
        response = api.request(method, path, status=405)
        assert response.headers["Allow"]
        assert response.content_type == "application/problem+json"


def test_openapi_document_is_served(api: Api) -> None:
    response = api.get("/-/user-api/openapi.json", status=200)
    document = response.json
    assert document["openapi"] == "3.1.0"
    assert set(document["paths"]) == {
        "/user", "/user/search", "/user/{id}", "/user/{id}/tokens", "/user/{id}/tokens/{key}",
        "/-/user-api/tokens", "/-/user-api/openapi.json", "/-/user-api/owners", "/-/user-api/advisories", "/-/user-api/audit",
        "/-/user-api/audit/accounts",
        "/-/user-api/hooks/{hook}/deliveries", "/-/user-api/hooks/{hook}/deliveries/{delivery}/redeliver"}
    assert set(document["paths"]["/user"]) == {"get", "post", "put"}
    assert set(document["paths"]["/-/user-api/audit"]) == {"get"}  # the audit log is read, never written, over HTTP
    assert set(document["paths"]["/-/user-api/audit/accounts"]) == {"get"}
    redeliver = document["paths"]["/-/user-api/hooks/{hook}/deliveries/{delivery}/redeliver"]
    assert set(redeliver) == {"post"} and {"202", "401", "403", "404"} <= set(redeliver["post"]["responses"])
    # The admin-only routes, with the problems they answer.
    for path, success in (("/-/user-api/owners", "200"), ("/-/user-api/advisories", "201")):
        assert set(document["paths"][path]) == {"post"}
        assert {success, "400", "401", "403"} <= set(document["paths"][path]["post"]["responses"])
    assert "404" in document["paths"]["/-/user-api/owners"]["post"]["responses"]
    assert set(document["paths"]["/user/{id}"]) == {"get", "patch", "delete"}
    # Which fields PUT needs (and what leaving the others out does) is in the document.
    update = document["components"]["schemas"]["UserUpdate"]
    assert update["required"] == ["id", "username"] and "absent or null clears them" in update["description"]
    patch_body = document["paths"]["/user/{id}"]["patch"]["requestBody"]["content"]
    assert set(patch_body) == {"application/merge-patch+json", "application/xml", "text/xml"}
    assert "required" not in document["components"]["schemas"]["UserPatch"]
    api.get("/-/user-api/openapi.json", headers=XML, status=406)
