"""Administrators' actions on the registry that need an account: binding a maintainer name to an
account (`registry-gen owner claim`, `POST /-/user-api/owners`; every recorded name at an upgrade,
`registry-gen owner bind-recorded`) and recording an advisory
(`registry-gen advisory add`, `POST /-/user-api/advisories`). The CLI and the API call these; the
work itself is registry_gen's (ownership, advisories)."""

from __future__ import annotations

from registry_gen.errors import BindingNotPending, NotFound
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


def bind_recorded_for(settings: Settings, store: UserStore, *, apply: bool = True, force: bool = False) -> BindingReport:
    """`registry-gen owner bind-recorded`: binds the maintainer names a release before bindings
    recorded to the accounts of those names (registry_gen.ownership.decide_binding says which), and
    marks that upgrade step done once every meta could be read. A dry run (`apply=False`) changes
    nothing. Binding is for the upgrade: without the step pending (a database this release created,
    or one already upgraded), names left unbound since may be so on purpose (`import verdaccio`
    leaves a name unbound when an account of that name was already here), so `force` must say so."""
    if apply and not force and BIND_RECORDED_MAINTAINERS not in store.pending_upgrade_steps():
        raise BindingNotPending(
            "no upgrade from a release before bindings is pending for these accounts, and names left unbound "
            "since may be so on purpose (import verdaccio): review `registry-gen owner bind-recorded --dry-run`, "
            "then bind one name with `registry-gen owner claim PACKAGE USER`, or all of them with --force"
        )
    report = bind_recorded_maintainers(settings, lambda name: account_facts(store, name), apply=apply)
    if apply and not report.unreadable:
        store.finish_upgrade_step(BIND_RECORDED_MAINTAINERS)
    return report
