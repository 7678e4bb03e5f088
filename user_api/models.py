"""Pure domain code: the User record, its field rules, and the views the API returns.

Field rules follow npm-user-validate for usernames and emails and OWASP for passwords
(docs/user-api.md §4.5, §8.1). The OpenAPI document is built from the same constants (openapi.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from user_api.errors import FieldError, InvalidFields

USERNAME_MAX: Final = 214
EMAIL_MAX: Final = 254
FULL_NAME_MAX: Final = 128
PASSWORD_MIN: Final = 8
PASSWORD_MAX: Final = 1024
ROLES: Final = ("user", "admin")
STATUSES: Final = ("active", "disabled")  # "deleted" is internal: a tombstone nobody can see

# encodeURIComponent leaves exactly these unescaped; npm adds: lower-case, no leading ".", no "'".
USERNAME_PATTERN: Final = r"^(?!\.)[a-z0-9\-_.!~*()]{1,214}$"
# npm's ^.+@.+\..+$ with control characters refused (they break logs and XML).
EMAIL_PATTERN: Final = r"^[^\x00-\x1f\x7f-\x9f]+@[^\x00-\x1f\x7f-\x9f]+\.[^\x00-\x1f\x7f-\x9f]+$"
TEXT_PATTERN: Final = r"^[^\x00-\x1f\x7f-\x9f\ufffe\uffff]*$"

_USERNAME_RE: Final = re.compile(USERNAME_PATTERN)
_EMAIL_RE: Final = re.compile(EMAIL_PATTERN)
_TEXT_RE: Final = re.compile(TEXT_PATTERN)


@dataclass(frozen=True)
class User:
    """A registry account as the API sees it; the password hash deliberately lives only in the store."""

    id: str
    username: str
    email: str | None
    full_name: str | None
    role: str
    status: str
    created_at: datetime
    updated_at: datetime
    version: int

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def etag(self) -> str:
        """A strong validator of the record's state, shared by its JSON and XML representations."""
        return f'"{self.id[:8]}.{self.version}"'


@dataclass(frozen=True)
class TokenInfo:
    """What may be shown about a token after its creation: never the token itself."""

    key: str
    user_id: str
    created: datetime
    readonly: bool
    token_prefix: str
    cidr_whitelist: tuple[str, ...] = ()
    description: str | None = None
    expires: datetime | None = None  # None: until revoked (npm token create --expires sets days)


@dataclass(frozen=True)
class UserPage:
    items: tuple[User, ...]
    total: int


@dataclass(frozen=True)
class ImportedUser:
    """One record for the bulk path (migrations, benchmarks): the hash is already computed."""

    username: str
    password_hash: str
    email: str | None = None
    full_name: str | None = None
    role: str = "user"
    status: str = "active"


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ---- field rules: each returns the list of problems (empty when fine) -------------------------


def _is_valid_unicode(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from JSON "\ud800" escapes
        return False
    return True


def username_problems(value: object) -> list[str]:
    if not isinstance(value, str):
        return ["must be a string"]
    if not 1 <= len(value) <= USERNAME_MAX:
        return [f"must be 1 to {USERNAME_MAX} characters"]
    if not _USERNAME_RE.match(value):
        return [
            "must be lower-case, URL-safe (letters, digits, - _ . ! ~ * ( )), "
            "and must not start with '.'"
        ]
    return []


def email_problems(value: object) -> list[str]:
    if not isinstance(value, str):
        return ["must be a string"]
    if len(value) > EMAIL_MAX:
        return [f"must be at most {EMAIL_MAX} characters"]
    if not _is_valid_unicode(value) or not _EMAIL_RE.match(value):
        return ["must look like name@example.org"]
    return []


def full_name_problems(value: object) -> list[str]:
    if not isinstance(value, str):
        return ["must be a string"]
    if not 1 <= len(value) <= FULL_NAME_MAX:
        return [f"must be 1 to {FULL_NAME_MAX} characters"]
    if not _is_valid_unicode(value) or not _TEXT_RE.match(value):
        return ["must not contain control characters"]
    return []


def password_problems(value: object) -> list[str]:
    if not isinstance(value, str):
        return ["must be a string"]
    if not PASSWORD_MIN <= len(value) <= PASSWORD_MAX:
        return [f"must be {PASSWORD_MIN} to {PASSWORD_MAX} characters"]
    if not _is_valid_unicode(value):
        return ["must be valid Unicode"]
    return []


def role_problems(value: object) -> list[str]:
    return [] if value in ROLES else [f"must be one of {', '.join(ROLES)}"]


def status_problems(value: object) -> list[str]:
    return [] if value in STATUSES else [f"must be one of {', '.join(STATUSES)}"]


def normalize_email(value: str) -> str:
    """Domains are case-insensitive, local parts formally are not: lower-case the domain only."""
    local, at, domain = value.rpartition("@")
    return f"{local}@{domain.lower()}" if at else value


def normalize_text(value: str) -> str:
    return unicodedata.normalize("NFC", value)


# ---- request bodies -------------------------------------------------------------------------

_RULES = {
    "username": username_problems,
    "email": email_problems,
    "fullName": full_name_problems,
    "password": password_problems,
    "currentPassword": password_problems,
    "role": role_problems,
    "status": status_problems,
    "id": lambda v: [] if isinstance(v, str) and _is_uuid(v) else ["must be a UUID"],
}
_NULLABLE = {"email", "fullName"}
READ_ONLY_FIELDS: Final = frozenset({"createdAt", "updatedAt"})
CREATE_FIELDS: Final = frozenset({"username", "password", "email", "fullName", "role", "status"})
UPDATE_FIELDS: Final = frozenset(
    {"id", "username", "password", "currentPassword", "email", "fullName", "role", "status"}
)

_UUID_RE: Final = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _is_uuid(value: str) -> bool:
    return bool(_UUID_RE.match(value))


@dataclass(frozen=True)
class NewUser:
    username: str
    password: str
    email: str | None = None
    full_name: str | None = None
    role: str = "user"
    status: str = "active"


@dataclass(frozen=True)
class UserReplacement:
    """A PUT body: the profile fields replace the stored ones; role/status/password only if sent."""

    id: str
    username: str
    email: str | None
    full_name: str | None
    password: str | None = None
    current_password: str | None = None
    role: str | None = None
    status: str | None = None


def _check_fields(data: Mapping[str, Any], allowed: frozenset[str], required: tuple[str, ...]) -> None:
    problems: list[FieldError] = []
    for name in data:
        if name in READ_ONLY_FIELDS:
            problems.append(FieldError("is read-only", pointer=f"#/{name}"))
        elif name not in allowed:
            problems.append(FieldError("is not a field of this resource", pointer=f"#/{_safe(name)}"))
    for name in required:
        if name not in data:
            problems.append(FieldError("is required", pointer=f"#/{name}"))
    for name, value in data.items():
        if name not in allowed or (value is None and name in _NULLABLE):
            continue
        problems.extend(FieldError(text, pointer=f"#/{name}") for text in _RULES[name](value))
    if problems:
        raise InvalidFields(errors=problems)


def _safe(name: str) -> str:
    """A field name as it may appear in a pointer: clipped, and escaped per RFC 6901."""
    clipped = "".join(ch for ch in name[:64] if ch.isprintable())
    return clipped.replace("~", "~0").replace("/", "~1")


def _optional_text(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    return None if value is None else normalize_text(value)


def parse_new_user(data: Mapping[str, Any]) -> NewUser:
    """Validate a POST /user body, collecting every field problem (422)."""
    _check_fields(data, CREATE_FIELDS, ("username", "password"))
    email = data.get("email")
    return NewUser(
        username=data["username"],
        password=data["password"],
        email=None if email is None else normalize_email(email),
        full_name=_optional_text(data, "fullName"),
        role=data.get("role", "user"),
        status=data.get("status", "active"),
    )


def parse_replacement(data: Mapping[str, Any]) -> UserReplacement:
    """Validate a PUT /user body (the id travels in the body, the spec has no path id)."""
    _check_fields(data, UPDATE_FIELDS, ("id", "username"))
    email = data.get("email")
    return UserReplacement(
        id=data["id"].lower(),
        username=data["username"],
        email=None if email is None else normalize_email(email),
        full_name=_optional_text(data, "fullName"),
        password=data.get("password"),
        current_password=data.get("currentPassword"),
        role=data.get("role"),
        status=data.get("status"),
    )


PATCH_FIELDS: Final = UPDATE_FIELDS - {"id"}  # the id is the URL's; a patch cannot change it


def parse_patch(data: Mapping[str, Any], current: User) -> UserReplacement:
    """Validate a PATCH /user/{id} merge patch (RFC 7396) and apply it to `current`.

    A member sets its field, `null` removes it (email and fullName only: the others cannot be
    empty), an absent member keeps the stored value. The result is what a PUT sending every
    field would be, so both methods share one set of checks.
    """
    _check_fields(data, PATCH_FIELDS, ())
    email = data.get("email", current.email)
    return UserReplacement(
        id=current.id,
        username=data.get("username", current.username),
        email=None if email is None else normalize_email(email),
        full_name=_optional_text(data, "fullName") if "fullName" in data else current.full_name,
        password=data.get("password"),
        current_password=data.get("currentPassword"),
        role=data.get("role"),
        status=data.get("status"),
    )


def validate_new_user(new: NewUser) -> None:
    """The same rules for callers that bypass HTTP (the CLI, the npm login routes)."""
    body: dict[str, Any] = {"username": new.username, "password": new.password, "role": new.role}
    body["status"] = new.status
    if new.email is not None:
        body["email"] = new.email
    if new.full_name is not None:
        body["fullName"] = new.full_name
    _check_fields(body, CREATE_FIELDS, ("username", "password"))


# ---- views (explicit projections, never dict(row)) -------------------------------------------


def public_view(user: User) -> dict[str, Any]:
    view: dict[str, Any] = {"id": user.id, "username": user.username}
    if user.full_name is not None:
        view["fullName"] = user.full_name
    view["createdAt"] = rfc3339(user.created_at)
    return view


def private_view(user: User) -> dict[str, Any]:
    view: dict[str, Any] = {"id": user.id, "username": user.username}
    if user.email is not None:
        view["email"] = user.email
    if user.full_name is not None:
        view["fullName"] = user.full_name
    view.update(
        role=user.role,
        status=user.status,
        createdAt=rfc3339(user.created_at),
        updatedAt=rfc3339(user.updated_at),
    )
    return view


def view_for(caller: User | None, user: User) -> dict[str, Any]:
    """Self and admins see the private view; everyone else the public one (AUTH.md)."""
    if caller is not None and (caller.is_admin or caller.id == user.id):
        return private_view(user)
    return public_view(user)


def token_view(token: str, info: TokenInfo) -> dict[str, Any]:
    return {
        "token": token,
        "key": info.key,
        "readonly": info.readonly,
        "created": rfc3339(info.created),
    }
