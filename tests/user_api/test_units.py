"""Pure pieces: negotiation, query parameters, field rules, FTS5/LIKE escaping, the rate limiter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from user_api.errors import (
    BadRequest,
    InvalidFields,
    MalformedBody,
    NotAcceptable,
    PageWindowExceeded,
    TooManyParameters,
    UnknownParameter,
    UnsupportedMediaType,
    UriTooLong,
)
from user_api.models import email_problems, full_name_problems, parse_new_user, parse_replacement, username_problems
from user_api.negotiation import body_format, encode_xml, negotiate, parse_xml_object
from user_api.params import SEARCHING, parse_keyword, parse_paging, parse_query
from user_api.ratelimit import RateLimiter
from user_api.store_postgres import like_pattern
from user_api.store_sqlite import fts5_phrase, match_expression


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_limiter_bucket() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate_per_minute=6, burst=2, clock=clock)  # one token every 10 s
    assert limiter.allow("a") == (True, 0)
    assert limiter.allow("a") == (True, 0)
    assert limiter.allow("a") == (False, 10)
    assert limiter.allow("b") == (True, 0)  # keys are independent
    clock.now += 4
    assert limiter.allow("a") == (False, 6)
    clock.now += 6
    assert limiter.allow("a") == (True, 0)
    clock.now += 3600
    assert [limiter.allow("a")[0] for _ in range(3)] == [True, True, False]  # refills only up to burst


def test_rate_limiter_forgets_least_recent_keys() -> None:
    limiter = RateLimiter(rate_per_minute=1, burst=1, max_keys=2, clock=FakeClock())
    assert limiter.allow("a")[0] and limiter.allow("b")[0] and limiter.allow("c")[0]
    assert limiter.allow("a")[0] is True  # evicted, so it starts over (errs lenient, bounded memory)
    assert limiter.allow("c")[0] is False


def test_rate_limiter_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        RateLimiter(0, 1)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [(None, "application/json"), ("", "application/json"), ("*/*;q=0.1", "application/json"),
     ("text/*", "text/xml"), ("APPLICATION/XML", "application/xml"),
     ("application/xml;q=0.9, application/json;q=0.9", "application/json"),
     ("application/json;q=bogus, text/xml", "text/xml"), ("application/json;q=2, text/xml", "text/xml")],
)
def test_negotiate(accept: str | None, expected: str) -> None:
    assert negotiate(accept).content_type == expected


@pytest.mark.parametrize("accept", ["text/html", "*/*;q=0", "application/problem+json", "application/json;q=0.0"])
def test_negotiate_refuses(accept: str) -> None:
    with pytest.raises(NotAcceptable):
        negotiate(accept)


@pytest.mark.parametrize("content_type", [None, "", "text/plain", "application/json; charset=iso-8859-1",
                                          "multipart/form-data", "application/jsonx"])
def test_body_format_refuses(content_type: str | None) -> None:
    with pytest.raises(UnsupportedMediaType):
        body_format(content_type)


@pytest.mark.parametrize(
    ("content_type", "fmt"),
    [("application/json", "json"), ("Application/JSON; charset=UTF-8", "json"), ("application/xml", "xml"),
     ('text/xml; charset="utf-8"', "xml")],
)
def test_body_format(content_type: str, fmt: str) -> None:
    assert body_format(content_type) == fmt


def test_xml_parse_empty_element_is_no_value() -> None:
    assert parse_xml_object(b"<user><email/><fullName> A </fullName></user>", root="user") == {
        "email": None, "fullName": " A "}


def test_xml_parse_refuses_dtd_even_without_entities() -> None:
    with pytest.raises(MalformedBody):
        parse_xml_object(b"<!DOCTYPE user><user/>", root="user")


def test_encode_xml_replaces_characters_xml_cannot_carry() -> None:
    body = encode_xml("problem", {"detail": "a\x00b\x1fc", "errors": [{"parameter": "x"}]}, item_names={"errors": "i"})
    assert b"a\xef\xbf\xbdb" in body and b"<errors><i><parameter>x</parameter></i></errors>" in body


@given(st.dictionaries(st.sampled_from(["id", "username", "fullName", "email"]), st.text(max_size=30)))
def test_encode_xml_round_trips_through_the_safe_parser(data: dict[str, str]) -> None:
    parsed = parse_xml_object(encode_xml("user", data), root="user")
    assert set(parsed) == set(data)


def test_parse_query_counts_every_occurrence() -> None:
    with pytest.raises(TooManyParameters):
        parse_query("&".join(["page=1"] * 11), allowed=SEARCHING)
    with pytest.raises(BadRequest):
        parse_query("&".join(["page=1"] * 10), allowed=SEARCHING)
    assert parse_query("page=2&&size=3&", allowed=SEARCHING) == {"page": "2", "size": "3"}


def test_parse_query_unknown_and_encoding() -> None:
    with pytest.raises(UnknownParameter) as caught:
        parse_query("page=1&Page=2&x%00y=3", allowed=SEARCHING)
    assert [e.parameter for e in caught.value.errors] == ["Page", "xy"]
    with pytest.raises(BadRequest):
        parse_query("keyword=%C3", allowed=SEARCHING)
    with pytest.raises(BadRequest):
        parse_query("keyword=\xff", allowed=SEARCHING)  # a raw non-UTF-8 byte, as WSGI hands it over
    assert parse_query("keyword=%C3%A5+b", allowed=SEARCHING) == {"keyword": "å b"}
    with pytest.raises(UriTooLong):
        parse_query("keyword=" + "a" * 2041, allowed=SEARCHING)
    parse_query("keyword=" + "a" * 2040, allowed=SEARCHING)


def test_parse_paging() -> None:
    assert parse_paging({}, max_page=10) == parse_paging({"page": "1", "size": "10"}, max_page=10)
    paging = parse_paging({"page": "3", "size": "7"}, max_page=10)
    assert (paging.page, paging.size, paging.offset) == (3, 7, 14)
    with pytest.raises(PageWindowExceeded):
        parse_paging({"page": "11"}, max_page=10)
    for bad in ({"page": "0"}, {"size": "101"}, {"size": "+5"}, {"page": " 1"}, {"page": "１"}):
        with pytest.raises(BadRequest):
            parse_paging(bad, max_page=10)


def test_parse_keyword() -> None:
    assert parse_keyword({"keyword": "  ab  "}) == "ab"
    assert parse_keyword({"keywork": "ab"}) == "ab"
    assert parse_keyword({"keyword": "ab", "keywork": "ab"}) == "ab"
    for bad in ({}, {"keyword": " "}, {"keyword": "a\tb"}, {"keyword": "x" * 101}, {"keyword": "a", "keywork": "b"}):
        with pytest.raises(BadRequest):
            parse_keyword(bad)


@given(st.text(min_size=1, max_size=40))
def test_fts5_phrase_is_always_one_string(keyword: str) -> None:
    phrase = fts5_phrase(keyword)
    assert phrase.startswith('"') and phrase.endswith('"')
    assert '"' not in phrase[1:-1].replace('""', "")


def test_match_expression_restricts_columns_for_non_admins() -> None:
    assert match_expression("abc", include_email=True) == '"abc"'
    assert match_expression('a"c', include_email=False) == '{username full_name} : "a""c"'


def test_like_pattern_escapes_wildcards() -> None:
    assert like_pattern("50%_\\x") == "%50\\%\\_\\\\x%"


@pytest.mark.parametrize("name", ["a", "alice", "a.b", "a-b_c", "x" * 214, "foo~bar", "(ok)", "9lives"])
def test_usernames_accepted(name: str) -> None:
    assert username_problems(name) == []


@pytest.mark.parametrize("name", ["", ".hidden", "Alice", "a b", "a/b", "a'b", "a%20", "é", "x" * 215, "a\x00"])
def test_usernames_refused(name: str) -> None:
    assert username_problems(name)


def test_email_and_full_name_rules() -> None:
    assert email_problems("a@b.co") == [] and email_problems("ä@ü.de") == []
    assert email_problems("a@b") and email_problems("a\n@b.co") and email_problems("x" * 250 + "@b.co")
    assert email_problems("\ud800@b.co")
    assert full_name_problems("Zoë O'Brien") == [] and full_name_problems("a\x85b") and full_name_problems("")
    assert full_name_problems("\ud800")


def test_parse_new_user_defaults_and_normalisation() -> None:
    new = parse_new_user({"username": "a", "password": "12345678", "email": "X@EXAMPLE.ORG", "fullName": "Zoe\u0308"})
    assert (new.email, new.full_name, new.role, new.status) == ("X@example.org", "Zoë", "user", "active")
    assert parse_new_user({"username": "a", "password": "12345678", "email": None}).email is None


def test_parse_replacement_requires_id_and_username() -> None:
    with pytest.raises(InvalidFields) as caught:
        parse_replacement({"fullName": "x", "id": "nope"})
    assert {e.pointer for e in caught.value.errors} == {"#/id", "#/username"}
    replacement = parse_replacement({"id": "0F000000-0000-4000-8000-000000000000", "username": "a"})
    assert replacement.id == "0f000000-0000-4000-8000-000000000000"
    assert (replacement.email, replacement.full_name, replacement.password, replacement.role) == (None,) * 4


def test_field_types_are_checked() -> None:
    with pytest.raises(InvalidFields) as caught:
        parse_new_user({"username": 5, "password": ["x"], "fullName": 3, "role": None})
    assert {e.pointer for e in caught.value.errors} == {"#/username", "#/password", "#/fullName", "#/role"}
