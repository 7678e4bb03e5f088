"""Administrators' actions on the registry that need an account: binding a maintainer name to an
account (`registry-gen owner claim`, `POST /-/user-api/owners`; every recorded name at an upgrade,
`registry-gen owner bind-recorded`) and recording an advisory
(`registry-gen advisory add`, `POST /-/user-api/advisories`). The CLI and the API call these; the
work itself is registry_gen's (ownership, advisories)."""

from __future__ import annotations

from registry_gen.errors import NotFound
from registry_gen.ownership import AccountFacts, BindingReport, bind_recorded_maintainers, claim_package
from registry_gen.settings import Settings
from user_api.sqlstore import BIND_RECORDED_MAINTAINERS
from user_api.store import UserStore


def claim_for(settings: Settings, store: UserStore, package: str, username: str) -> bool:
    """Binds `username`'s account as a maintainer of `package`; False when it already was."""
    user = store.get_by_username(username)
    if user is None or user.status != "active":
        raise NotFound(f"there is no active user named {username!r} on this registry")
    return claim_package(settings, package, user.username, user.email, user.id)


def account_facts(store: UserStore, username: str) -> AccountFacts | None:
    """The live account of that name, as the upgrade's binding rule sees it (its id and creation time)."""
    user = store.get_by_username(username)
    return None if user is None else AccountFacts(user.id, user.created_at)


def bind_recorded_for(settings: Settings, store: UserStore, *, apply: bool = True) -> BindingReport:
    """`registry-gen owner bind-recorded`: binds the maintainer names a release before bindings
    recorded to the accounts of those names (registry_gen.ownership.decide_binding says which), and
    marks that upgrade step done. A dry run (`apply=False`) changes nothing."""
    report = bind_recorded_maintainers(settings, lambda name: account_facts(store, name), apply=apply)
    if apply:
        store.finish_upgrade_step(BIND_RECORDED_MAINTAINERS)
    return report
