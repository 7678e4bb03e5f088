"""Administrators' actions on the registry that need an account: binding a maintainer name to an
account (`registry-gen owner claim`, `POST /-/user-api/owners`) and recording an advisory
(`registry-gen advisory add`, `POST /-/user-api/advisories`). The CLI and the API call these; the
work itself is registry_gen's (ownership, advisories)."""

from __future__ import annotations

from registry_gen.errors import NotFound
from registry_gen.ownership import claim_package
from registry_gen.settings import Settings
from user_api.store import UserStore


def claim_for(settings: Settings, store: UserStore, package: str, username: str) -> bool:
    """Binds `username`'s account as a maintainer of `package`; False when it already was."""
    user = store.get_by_username(username)
    if user is None or user.status != "active":
        raise NotFound(f"there is no active user named {username!r} on this registry")
    return claim_package(settings, package, user.username, user.email, user.id)
