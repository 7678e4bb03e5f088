"""Administrator actions on one account, shared by `registry-gen user ...` and the /user API.

Each action is one store call; the store ends every session (deletes every token) when a password
or the status changes, so a disabled account or a reset password locks out whoever held a token.
The actions report how many tokens that revoked, for the operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from user_api.errors import UserNotFound
from user_api.models import TokenInfo, User, rfc3339

if TYPE_CHECKING:  # only a type here: `registry-gen --help` must not load the store
    from user_api.store import UserStore

# CLI verb -> (field, value) it sets: one table, so the CLI and the docs cannot drift apart.
STATUS_ACTIONS: Final = {"disable": "disabled", "enable": "active"}
ROLE_ACTIONS: Final = {"promote": "admin", "demote": "user"}


@dataclass(frozen=True)
class Outcome:
    user: User
    changed: bool
    tokens_revoked: int = 0


def user_named(store: UserStore, username: str) -> User:
    user = store.get_by_username(username)
    if user is None or user.status == "deleted":
        raise UserNotFound(f"There is no user named {username!r} on this registry (`registry-gen user list` shows them).")
    return user


def _update(store: UserStore, user: User, **changes: Any) -> Outcome:
    before = len(store.list_tokens(user.id))
    updated = store.update_user(user.id, **changes)
    return Outcome(updated, True, before - len(store.list_tokens(user.id)))


def set_status(store: UserStore, username: str, status: str) -> Outcome:
    user = user_named(store, username)
    if user.status == status:
        return Outcome(user, False)
    return _update(store, user, status=status)


def set_role(store: UserStore, username: str, role: str) -> Outcome:
    user = user_named(store, username)
    if user.role == role:
        return Outcome(user, False)
    return _update(store, user, role=role)


def set_password(store: UserStore, username: str, password: str) -> Outcome:
    return _update(store, user_named(store, username), password=password)


def remove(store: UserStore, username: str) -> Outcome:
    user = user_named(store, username)
    tokens = len(store.list_tokens(user.id))
    if not store.delete_user(user.id):
        raise UserNotFound()
    return Outcome(user, True, tokens)


def revoke_tokens(store: UserStore, user: User, key: str | None = None) -> int:
    """One token by its key, or (key None) every token of `user`; how many were revoked."""
    if key is not None:
        return int(store.revoke_token(user.id, _canonical_key(store, user, key)))
    return sum(store.revoke_token(user.id, info.key) for info in store.list_tokens(user.id))


def _canonical_key(store: UserStore, user: User, key: str) -> str:
    """npm shows keys without dashes (`npm token list`); accept that spelling too."""
    wanted = key.replace("-", "").lower()
    for info in store.list_tokens(user.id):
        if info.key.replace("-", "").lower() == wanted:
            return info.key
    return key


def token_json(info: TokenInfo) -> dict[str, Any]:
    """What the API and `user tokens list` show of a token: never the token, only its first characters."""
    return {
        "key": info.key,
        "description": info.description,
        "tokenPrefix": info.token_prefix,
        "readonly": info.readonly,
        "cidrWhitelist": list(info.cidr_whitelist),
        "created": rfc3339(info.created),
    }
