"""One error hierarchy for the user API; the web edge maps it once (problems.py), the CLI prints it.

Every message here is written for the client: it never contains a password, a hash or a token, and
never echoes a submitted value (only field and parameter names).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from registry_gen.errors import Forbidden, NotFound, RegistryError, Unavailable


@dataclass(frozen=True)
class FieldError:
    """One problem with one input: `pointer` is a JSON Pointer into the body, `parameter` a query name."""

    detail: str
    pointer: str | None = None
    parameter: str | None = None


class UserApiError(RegistryError):
    """Base of every error the user API raises on purpose."""

    default_detail = "The request could not be processed."

    def __init__(self, detail: str | None = None, *, errors: Iterable[FieldError] = ()):
        self.detail = detail or self.default_detail
        self.errors = tuple(errors)
        super().__init__(self.detail)


class BadRequest(UserApiError):
    default_detail = "The request is malformed."


class MalformedBody(BadRequest):
    default_detail = "The request body could not be parsed."


class TooManyParameters(BadRequest):
    default_detail = "A request may carry at most 10 query parameters."


class UnknownParameter(BadRequest):
    default_detail = "The request carries a query parameter this endpoint does not know."


class PageWindowExceeded(BadRequest):
    default_detail = "page x size is beyond the window this endpoint serves."


class InvalidFields(UserApiError):
    """The body parsed, but some fields break the rules; carries every problem found."""

    default_detail = "Some fields are invalid."


class AuthenticationRequired(UserApiError):
    default_detail = "This endpoint needs a bearer token."


class InvalidToken(AuthenticationRequired):
    default_detail = "The bearer token is not valid."


class InvalidCredentials(AuthenticationRequired):
    default_detail = "Incorrect username or password."


class PermissionDenied(UserApiError, Forbidden):
    default_detail = "You may not do this."


class ReadOnlyToken(PermissionDenied):
    default_detail = "This token is read-only."


class ForbiddenField(PermissionDenied):
    default_detail = "Only an administrator may change this field."


class ReauthenticationRequired(PermissionDenied):
    default_detail = "Changing your email or password needs your current password (currentPassword)."


class SignupClosed(PermissionDenied):
    default_detail = "Sign-up is closed on this registry."


class UserNotFound(UserApiError, NotFound):
    default_detail = "No such user."


class PackageNotFound(UserApiError, NotFound):
    default_detail = "No such package in this registry."


class HookNotFound(UserApiError, NotFound):
    default_detail = "No such hook, or no such delivery of it."


class UsernameTaken(UserApiError):
    default_detail = "This username is taken."


class LastAdmin(UserApiError):
    default_detail = "This would leave the registry without an active administrator."


class PreconditionFailed(UserApiError):
    default_detail = "The user was changed since you read it (If-Match does not match)."


class PayloadTooLarge(UserApiError):
    default_detail = "The request body is too large."


class UriTooLong(UserApiError):
    default_detail = "The query string is too long."


class UnsupportedMediaType(UserApiError):
    default_detail = "Send the body as application/json or application/xml."


class UnsupportedPatchType(UnsupportedMediaType):
    default_detail = (
        "Send a PATCH body as application/merge-patch+json (RFC 7396) or as a partial <user> in application/xml."
    )


class NotAcceptable(UserApiError):
    default_detail = "This resource is available as application/json or application/xml only."


class RateLimited(UserApiError):
    default_detail = "Too many requests; retry later."

    def __init__(self, retry_after: int, detail: str | None = None):
        self.retry_after = max(1, int(retry_after))
        super().__init__(detail)


class ErasureIncomplete(UserApiError):
    """An account was removed, but its email could not be erased from every package (a damaged meta)."""

    default_detail = "The account is removed, but its email is not erased from every package yet."


class StoreUnavailable(UserApiError, Unavailable):
    default_detail = "The user database is unavailable; retry later."
