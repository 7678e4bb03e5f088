"""Strict query parameters: at most 10 (repeats count), known names only, no silent clamping."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl

from registry_gen.audit import AuditFilter, parse_since
from registry_gen.errors import RegistryError

from user_api.errors import (
    BadRequest,
    FieldError,
    PageWindowExceeded,
    TooManyParameters,
    UnknownParameter,
    UriTooLong,
)

log = logging.getLogger(__name__)

MAX_PARAMETERS: Final = 10
MAX_QUERY_BYTES: Final = 2048
DEFAULT_PAGE: Final = 1
DEFAULT_SIZE: Final = 10
MAX_SIZE: Final = 100
# Deep offsets cost O(offset) (API4). A bound on `page` alone, unlike one on page x size, can be
# written in OpenAPI, so generated clients and schemathesis know it.
LIST_MAX_PAGE: Final = 1_000
SEARCH_MAX_PAGE: Final = 100
# A search total stops here: no client can page further (page <= 100, size <= 100).
SEARCH_TOTAL_CAP: Final = SEARCH_MAX_PAGE * MAX_SIZE
KEYWORD_MAX: Final = 100
PAGING: Final = frozenset({"page", "size"})
SEARCHING: Final = PAGING | {"keyword", "keywork"}

AUDITING: Final = frozenset({"since", "from", "limit", "package", "actor"})
ACCOUNT_AUDITING: Final = frozenset({"since", "from", "limit", "account", "actor"})
AUDIT_NAME_MAX: Final = 214  # npm's longest package name; account names are shorter
AUDIT_DEFAULT_LIMIT: Final = 100
AUDIT_MAX_LIMIT: Final = 500
DELIVERY_PAGING: Final = frozenset({"offset", "limit"})
DELIVERIES_MAX_LIMIT: Final = 200
_DIGITS: Final = re.compile(r"^[0-9]{1,9}$")
_DATE: Final = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Paging:
    page: int
    size: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size


def _shown(name: str) -> str:
    """A parameter name safe to echo: clipped and printable. Values are never echoed."""
    return "".join(ch for ch in name[:64] if ch.isprintable()) or "?"


def parse_query(query_string: str, *, allowed: frozenset[str]) -> dict[str, str]:
    """Every occurrence counts towards the 10; unknown or repeated names are refused (400).

    `query_string` is the WSGI QUERY_STRING: raw bytes carried as latin-1 (PEP 3333).
    """
    try:
        raw = query_string.encode("latin-1")
        query_string = raw.decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise BadRequest("The query string is not valid UTF-8.") from None
    if len(raw) > MAX_QUERY_BYTES:
        raise UriTooLong()
    occurrences = [piece for piece in query_string.split("&") if piece]
    if len(occurrences) > MAX_PARAMETERS:
        raise TooManyParameters(f"{len(occurrences)} query parameters were sent; at most {MAX_PARAMETERS} are allowed.")
    try:
        pairs = parse_qsl(query_string, keep_blank_values=True, strict_parsing=False, encoding="utf-8", errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("The query string is not valid percent-encoded UTF-8.") from None
    unknown = sorted({name for name, _ in pairs if name not in allowed})
    if unknown:
        raise UnknownParameter(
            errors=[FieldError("is not a parameter of this endpoint", parameter=_shown(n)) for n in unknown]
        )
    values: dict[str, str] = {}
    for name, value in pairs:
        if name in values:
            raise BadRequest(errors=[FieldError("may appear only once", parameter=name)])
        values[name] = value
    return values


def _integer(values: dict[str, str], name: str, default: int, low: int, high: int | None) -> int:
    raw = values.get(name)
    if raw is None:
        return default
    bounds = f"{low}..{high}" if high is not None else f">= {low}"
    if not _DIGITS.match(raw) or not (low <= int(raw) and (high is None or int(raw) <= high)):
        raise BadRequest(errors=[FieldError(f"must be an integer {bounds}", parameter=name)])
    return int(raw)


def parse_paging(values: dict[str, str], *, max_page: int) -> Paging:
    """1 <= page <= max_page (default 1), 1 <= size <= 100 (default 10); never clamped."""
    page = _integer(values, "page", DEFAULT_PAGE, 1, None)
    if page > max_page:
        raise PageWindowExceeded(
            f"page may be at most {max_page} here; narrow the query instead.",
            errors=[FieldError(f"must be an integer 1..{max_page}", parameter="page")],
        )
    return Paging(page=page, size=_integer(values, "size", DEFAULT_SIZE, 1, MAX_SIZE))


def parse_keyword(values: dict[str, str]) -> str:
    """`keyword` is canonical; `keywork` (the spec's interface table) is an alias. Both with
    different values is a 400. 1..100 characters, not blank, no control characters; then trimmed."""
    keyword, keywork = values.get("keyword"), values.get("keywork")
    if keyword is not None and keywork is not None and keyword != keywork:
        raise BadRequest(
            "keyword and its alias keywork carry different values.",
            errors=[FieldError("conflicts with keywork", parameter="keyword")],
        )
    if keyword is None and keywork is not None:
        log.info("search used the keywork alias")
    raw = (keyword if keyword is not None else keywork) or ""
    if len(raw) > KEYWORD_MAX or _CONTROL.search(raw):
        raise BadRequest(
            errors=[
                FieldError(f"must be 1 to {KEYWORD_MAX} characters without control characters", parameter="keyword")
            ]
        )
    if not raw.strip():
        raise BadRequest(errors=[FieldError("is required and must not be blank", parameter="keyword")])
    return raw.strip()


def parse_audit_query(values: dict[str, str]) -> tuple[AuditFilter, int]:
    """The audit route's filter (`since`: the sequence number the last page ended at; `from`: a
    date, entries of that day on; `package`, `actor`: exact names) and `limit` (1..500, default 100)."""
    for name in ("package", "actor"):
        if len(values.get(name, "")) > AUDIT_NAME_MAX:
            raise BadRequest(errors=[FieldError(f"must be at most {AUDIT_NAME_MAX} characters", parameter=name)])
    after_seq = _integer(values, "since", 0, 0, None)
    from_time = None
    if "from" in values:
        try:
            from_time = parse_since(values["from"])[1] if _DATE.match(values["from"]) else None
        except RegistryError:
            from_time = None
        if from_time is None:
            raise BadRequest(errors=[FieldError("must be a date (2025-01-31)", parameter="from")])
    limit = _integer(values, "limit", AUDIT_DEFAULT_LIMIT, 1, AUDIT_MAX_LIMIT)
    return AuditFilter(after_seq, from_time, values.get("package") or None, values.get("actor") or None), limit


def parse_account_audit_query(values: dict[str, str]) -> tuple[AuditFilter, int, int]:
    """The account changes' route: the audit route's `since` (an account change's number), `from`,
    `limit` and `actor`, plus `account` (whose changes). (filter, after number, limit)"""
    if len(values.get("account", "")) > AUDIT_NAME_MAX:
        raise BadRequest(errors=[FieldError(f"must be at most {AUDIT_NAME_MAX} characters", parameter="account")])
    wanted, limit = parse_audit_query(values)
    return AuditFilter(0, wanted.from_time, None, wanted.actor, values.get("account") or None), wanted.after_seq, limit


def parse_delivery_paging(values: dict[str, str]) -> tuple[int, int]:
    """A hook's delivery log, newest first: (`offset`, `limit` 1..200, default 50)."""
    return _integer(values, "offset", 0, 0, None), _integer(values, "limit", 50, 1, DELIVERIES_MAX_LIMIT)
