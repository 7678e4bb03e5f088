"""Who may do what (AUTH.md is the same table in prose). Pure functions that raise or return."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from user_api.errors import (
    AuthenticationRequired,
    FieldError,
    ForbiddenField,
    PermissionDenied,
    ReadOnlyToken,
    ReauthenticationRequired,
    SignupClosed,
)
from user_api.models import NewUser, TokenInfo, User, UserReplacement


@dataclass(frozen=True)
class Caller:
    """Who sent a request: a token's owner, or (Basic auth, npm's legacy clients) a password's."""

    user: User
    token: TokenInfo | None

    @property
    def is_admin(self) -> bool:
        return self.user.is_admin


def caller_user(caller: Caller | None) -> User | None:
    return None if caller is None else caller.user


def address_allowed(address: str | None, networks: tuple[str, ...]) -> bool:
    """A token restricted to networks (npm's cidr_whitelist) works only from inside them."""
    if not networks:
        return True
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(net) for net in networks)


def require_writable(caller: Caller | None) -> None:
    if caller is not None and caller.token is not None and caller.token.readonly:
        raise ReadOnlyToken()


def may_create(caller: Caller | None, signup: str) -> None:
    """signup=open: anyone; signup=admin: administrators only; signup=closed: nobody over HTTP
    (accounts then come from `registry-gen user add`)."""
    if signup == "closed":
        raise SignupClosed()
    if signup == "admin":
        if caller is None:
            raise AuthenticationRequired("Only administrators may create users on this registry.")
        if not caller.is_admin:
            raise PermissionDenied("Only administrators may create users on this registry.")
    require_writable(caller)


def check_create_fields(caller: Caller | None, new: NewUser) -> None:
    """Only admins choose a role or a status other than the defaults (OWASP API3/API5)."""
    if caller is not None and caller.is_admin:
        return
    forbidden = []
    if new.role != "user":
        forbidden.append(FieldError("only an administrator may set this", pointer="#/role"))
    if new.status != "active":
        forbidden.append(FieldError("only an administrator may set this", pointer="#/status"))
    if forbidden:
        raise ForbiddenField(errors=forbidden)


def may_update(caller: Caller, current: User) -> None:
    require_writable(caller)
    if not caller.is_admin and caller.user.id != current.id:
        raise PermissionDenied("You may update only your own account.")


def check_update_fields(caller: Caller, current: User, replacement: UserReplacement) -> None:
    """Non-admins may not change username, role or status; sending the current value is fine."""
    if caller.is_admin:
        return
    changed = [
        name
        for name, new, old in (
            ("username", replacement.username, current.username),
            ("role", replacement.role, current.role),
            ("status", replacement.status, current.status),
        )
        if new is not None and new != old
    ]
    if changed:
        raise ForbiddenField(
            errors=[FieldError("only an administrator may change this", pointer=f"#/{n}") for n in changed]
        )


def needs_current_password(caller: Caller, current: User, replacement: UserReplacement) -> bool:
    """Changing one's own email or password needs the current password (OWASP API2), admins included."""
    if caller.user.id != current.id:
        return False
    return replacement.password is not None or replacement.email != current.email


def require_current_password(verified: bool, sent: bool, *, email_removed: bool = False) -> None:
    """403, not 422: the body is well-formed; the caller has not proved who they are for this change."""
    if not sent:
        # A PUT that leaves email out removes it: say so, since the caller may not have meant it.
        why = (" (this request removes your email: PUT replaces the whole user; send the email, or use PATCH)"
               if email_removed else "")
        raise ReauthenticationRequired(
            errors=[FieldError("is required to change your email or password" + why, pointer="#/currentPassword")]
        )
    if not verified:
        raise ReauthenticationRequired(errors=[FieldError("is not your current password", pointer="#/currentPassword")])


def may_manage_tokens(caller: Caller, owner: User) -> None:
    """An account's tokens: administrators see and revoke anyone's, a user only their own."""
    if not caller.is_admin and caller.user.id != owner.id:
        raise PermissionDenied("You may see and revoke only your own tokens.")


def may_delete(caller: Caller) -> None:
    require_writable(caller)
    if not caller.is_admin:
        raise PermissionDenied("Only administrators may delete users.")
