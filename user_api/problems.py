"""RFC 9457 problem details: the one table from errors to statuses, and their JSON/XML bodies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

from user_api import errors as e
from user_api.negotiation import JSON, PATCH_TYPES, PROBLEM_NAMESPACE, PROBLEM_TYPES, encode_json, encode_xml

# Tag URIs (RFC 4151): stable identifiers that promise no web page; listed in the OpenAPI document.
TYPE_PREFIX: Final = "tag:registry-gen,2025:problems/"
REALM: Final = 'Bearer realm="registry"'


@dataclass(frozen=True)
class ProblemType:
    status: int
    slug: str | None  # None: about:blank, i.e. nothing beyond the status code
    title: str

    @property
    def uri(self) -> str:
        return TYPE_PREFIX + self.slug if self.slug else "about:blank"


# Most specific class first; lookup walks the exception's MRO.
PROBLEM_TYPES_BY_ERROR: Final[dict[type[e.UserApiError], ProblemType]] = {
    e.MalformedBody: ProblemType(400, "malformed-body", "Malformed request body"),
    e.TooManyParameters: ProblemType(400, "too-many-parameters", "Too many query parameters"),
    e.UnknownParameter: ProblemType(400, "unknown-parameter", "Unknown query parameter"),
    e.PageWindowExceeded: ProblemType(400, "page-window-exceeded", "Page window exceeded"),
    e.BadRequest: ProblemType(400, "validation-error", "Invalid request"),
    e.InvalidFields: ProblemType(422, "validation-error", "Invalid fields"),
    e.InvalidToken: ProblemType(401, "invalid-token", "Invalid token"),
    e.InvalidCredentials: ProblemType(401, "invalid-credentials", "Invalid credentials"),
    e.AuthenticationRequired: ProblemType(401, "authentication-required", "Authentication required"),
    e.ReadOnlyToken: ProblemType(403, "read-only-token", "Read-only token"),
    e.ForbiddenField: ProblemType(403, "forbidden-field", "Forbidden field"),
    e.SignupClosed: ProblemType(403, "signup-closed", "Sign-up closed"),
    e.ReauthenticationRequired: ProblemType(403, "reauthentication-required", "Current password required"),
    e.PermissionDenied: ProblemType(403, "forbidden", "Forbidden"),
    e.UserNotFound: ProblemType(404, None, "Not Found"),
    e.PackageNotFound: ProblemType(404, None, "Not Found"),
    e.HookNotFound: ProblemType(404, None, "Not Found"),
    e.UsernameTaken: ProblemType(409, "username-taken", "Username taken"),
    e.LastAdmin: ProblemType(409, "last-admin", "Last administrator"),
    e.PreconditionFailed: ProblemType(412, "precondition-failed", "Precondition failed"),
    e.PayloadTooLarge: ProblemType(413, "payload-too-large", "Payload too large"),
    e.UriTooLong: ProblemType(414, "uri-too-long", "URI too long"),
    e.UnsupportedMediaType: ProblemType(415, "unsupported-media-type", "Unsupported media type"),
    e.NotAcceptable: ProblemType(406, "not-acceptable", "Not acceptable"),
    e.RateLimited: ProblemType(429, "rate-limited", "Too many requests"),
    e.StoreUnavailable: ProblemType(503, "service-unavailable", "Service unavailable"),
    e.ErasureIncomplete: ProblemType(500, "erasure-incomplete", "Account removed, email not erased everywhere"),
}
INTERNAL: Final = ProblemType(500, None, "Internal Server Error")


def problem_type_for(error: BaseException) -> ProblemType:
    for cls in type(error).__mro__:
        found = PROBLEM_TYPES_BY_ERROR.get(cls)  # type: ignore[call-overload]
        if found is not None:
            return found
    return INTERNAL


def headers_for(error: BaseException) -> dict[str, str]:
    """The headers some statuses must carry (RFC 9110, RFC 6750, RFC 6585)."""
    if isinstance(error, e.InvalidToken):
        return {"WWW-Authenticate": f'{REALM}, error="invalid_token"'}
    if isinstance(error, e.AuthenticationRequired):
        return {"WWW-Authenticate": REALM}
    if isinstance(error, e.ReadOnlyToken):
        return {"WWW-Authenticate": f'{REALM}, error="insufficient_scope"'}
    if isinstance(error, e.UnsupportedPatchType):
        return {"Accept-Patch": ", ".join(PATCH_TYPES)}
    if isinstance(error, e.UnsupportedMediaType):
        return {"Accept": "application/json, application/xml"}
    if isinstance(error, e.RateLimited):
        return {"Retry-After": str(error.retry_after)}
    if isinstance(error, e.StoreUnavailable):
        return {"Retry-After": "5"}
    return {}


def problem_document(
    kind: ProblemType, *, detail: str | None, request_id: str, errors: tuple[e.FieldError, ...] = ()
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "type": kind.uri,
        "title": kind.title,
        "status": kind.status,
    }
    if detail:
        document["detail"] = detail
    document["instance"] = f"urn:uuid:{request_id}"
    if errors:
        document["errors"] = [
            {key: value for key, value in (("detail", err.detail), ("pointer", err.pointer),
                                           ("parameter", err.parameter)) if value is not None}
            for err in errors
        ]
    return document


def status_problem(status: int, *, request_id: str, detail: str | None = None) -> tuple[ProblemType, dict[str, Any]]:
    """For statuses the framework produces itself (404 route, 405 method, 500)."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    kind = ProblemType(status, None, title)
    return kind, problem_document(kind, detail=detail, request_id=request_id)


def encode_problem(document: Mapping[str, Any], fmt: str) -> tuple[bytes, str]:
    if fmt == JSON:
        return encode_json(document), PROBLEM_TYPES[JSON]
    body = encode_xml("problem", document, item_names={"errors": "i"}, namespace=PROBLEM_NAMESPACE)
    return body, PROBLEM_TYPES[fmt]
