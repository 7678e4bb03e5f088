"""`registry-gen owner claim`: an administrator binds a maintainer name of a package to an account;
and a deleted account's email leaves every package's meta (`user remove`, `DELETE /user/{id}`).

The pure rules (registry_gen.publish.apply_claim, decide_binding and erase_email here) run as
writes of the api's own path (registry_gen.writes.WriteService, `admin_write_service`): under the
package's lock, the meta written, the package rebuilt, journalled, and with `storage:` the tree
bucket uploaded and the caches purged. The account itself is looked up by the caller (the user
store lives in user_api); this module only receives its name, email and immutable id.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from registry_gen.build import scan_content
from registry_gen.errors import BrokenMeta, NotFound
from registry_gen.meta import META_FILENAME, PackageMeta
from registry_gen.names import validate_name
from registry_gen.publish import Actor, PackageState, apply_claim, maintainer_entry, now_iso
from registry_gen.refresher import IndexRefresher
from registry_gen.settings import Settings
from registry_gen.state import JournalEvent
from registry_gen.storage import ContentStorage, open_content_storage, parsed_meta
from registry_gen.writes import Change, WriteService, admin_write_service


def claim_package(
    settings: Settings, name: str, username: str, email: str | None, account_id: str, actor: str = "registry-gen owner claim"
) -> bool:
    """Binds `username` (account `account_id`) as a maintainer of `name`; False when it already was.
    Written as the api writes (registry_gen.writes): content/ or the bucket, the build, the tree
    bucket's upload and the purge are done when it returns."""
    validate_name(name, legacy=True)
    claimed: list[bool] = []

    def claim(state: PackageState) -> Change:
        if not state.is_held:
            raise NotFound(f"{name} is not in this registry (build it first, or check the name)")
        changed = apply_claim(state, maintainer_entry(username, email, account_id), now_iso())
        if changed is None:
            return Change()
        claimed.append(True)
        return Change(meta=changed, events=(JournalEvent("package:change", name, (), {"owner claimed": username}),))

    admin_write_service(settings).apply(name, claim, Actor(actor))
    return bool(claimed)


def erase_email(state: PackageState, username: str | frozenset[str], account_ids: frozenset[str] = frozenset()) -> Change:
    """The rule of an account's removal for one package: its maintainer entries without their email
    (the name stays: it records who maintained the package), journalled as a package:change (what
    was erased, by the entries' names). An entry bound to one of `account_ids` is the account's
    whatever name it carries (recorded before an admin renamed it); an unbound entry is matched by
    `username` (or any of the names). An empty Change when the meta holds no such email (any more)."""
    names = frozenset({username}) if isinstance(username, str) else username
    people = without_email(state.meta.maintainers, names, account_ids)
    if people == state.meta.maintainers:
        return Change()
    erased = sorted({entry["name"] for entry in state.meta.maintainers if "email" in entry and is_theirs(entry, names, account_ids)})
    event = JournalEvent("package:change", state.name, (), {"maintainer email erased": erased[0] if len(erased) == 1 else erased})
    return Change(meta=dataclasses.replace(state.meta, maintainers=people), events=(event,))


def without_email(people: list[dict[str, str]], names: frozenset[str], account_ids: frozenset[str] = frozenset()) -> list[dict[str, str]]:
    return [{k: v for k, v in entry.items() if not (k == "email" and is_theirs(entry, names, account_ids))} for entry in people]


def is_theirs(entry: dict[str, str], names: frozenset[str], account_ids: frozenset[str]) -> bool:
    """Whether a maintainer entry is one of the accounts': a bound entry by its account id (ids bind,
    as in publish.grants; its name may be an old one, or another account's since), an unbound
    entry by its name."""
    return entry["account"] in account_ids if "account" in entry else entry.get("name") in names


FINISH_ERASURE = "registry-gen user erase-email"


@dataclass(frozen=True)
class Erasure:
    """What an erasure did: the meta files it changed, and one line per damaged meta it could not
    read (the file, why, and the command that finishes the erasure once it is fixed by hand)."""

    erased: list[str]
    left: list[str]


def erase_maintainer_email(
    settings: Settings,
    username: str | frozenset[str],
    actor: str = "registry-gen user remove",
    *,
    service: WriteService | None = None,
    account_ids: frozenset[str] = frozenset(),
) -> Erasure:
    """A deleted account's email (or several accounts', by name) leaves every meta of the content
    (content/ or the content bucket), and so every document, index and page. Emails inside a
    tarball's own package.json are the package's bytes and stay (SECURITY.md, "Maintainer emails").
    `account_ids`: the accounts' ids, which find the entries recorded under a name they had before
    an admin renamed them (erase_email). A meta that does not parse may hold the email: it is named
    in `left`, never skipped in silence; `registry-gen user erase-email NAME` finishes once it is
    fixed (the tombstone keeps the name and the id: they find them).

    Each package is one write of the api's path (`service`: the api's own; else the CLI's
    `admin_write_service`): under its lock, journalled, rebuilt, with `storage:` the tree bucket
    uploaded and the caches purged. The metas are read first without a lock, as bind-recorded
    reads them; each one is decided again under its package's lock."""
    names = frozenset({username}) if isinstance(username, str) else username
    storage = service.storage if service is not None else open_content_storage(settings, building=False)
    then = f"run `{FINISH_ERASURE} {username}`" if isinstance(username, str) else f"run `{FINISH_ERASURE} --all-removed`"
    found, damaged = _metas_naming(settings, storage, names, account_ids)
    left = [broken.fix(then) for broken in damaged]
    if not found:
        return Erasure([], left)  # nothing to write: no write service opened (a registry without content yet)
    writes = service if service is not None else admin_write_service(settings)
    erase = functools.partial(erase_email, username=names, account_ids=account_ids)
    erased: list[str] = []
    for key, name in found.items():
        try:
            if writes.apply(name, erase, Actor(actor)) is not None:
                erased.append(key)
        except BrokenMeta as broken:  # damaged between the scan and its lock
            left.append(broken.fix(then))
    _rewrite_whole_now(writes)
    return Erasure(erased, left)


def _metas_naming(
    settings: Settings, storage: ContentStorage, names: frozenset[str], account_ids: frozenset[str]
) -> tuple[dict[str, str], list[BrokenMeta]]:
    """The meta files (key -> package name) holding an email of the accounts (by id or name, see
    erase_email), in key order, and
    the damaged metas (which may). A mirrored package's meta is the upstream's and takes no local
    writes: its people are the upstream's accounts, whoever has that name here."""
    found: dict[str, str] = {}
    damaged: list[BrokenMeta] = []
    for key in _meta_keys(settings, storage):
        try:
            meta = _meta_at(storage, key)
        except BrokenMeta as broken:
            damaged.append(broken)
            continue
        if meta is not None and meta.mirror is None and without_email(meta.maintainers, names, account_ids) != meta.maintainers:
            found[key] = meta.name
    return found, damaged


def _rewrite_whole_now(service: WriteService) -> None:
    """-/all and search stop showing the email now on one machine (its IndexRefresher would wait
    `index_refresh_seconds`), as they did when the erasure ran a whole build. On PostgreSQL the
    instances' leader rewrites them within that delay (its flush is for its own shutdown, on its
    own thread); a CLI's LeaderRewrites leaves them to it too."""
    if isinstance(service.refresher, IndexRefresher):
        service.refresher.flush()


# ---------------------------------------------------------------- upgrading from a release without bindings
#
# Before maintainers were bound to accounts (the release b384b22 and older), a maintainer entry was a
# right by its name alone. Today an entry grants nothing until it carries its account's id, so
# `registry-gen owner bind-recorded` binds each recorded name to the account of that name, once,
# at the upgrade. An account created after the package's first publish is held back: it may be
# someone who registered the name later, and binding it would hand them the package. Only an
# administrator's `owner claim` binds it (SECURITY.md, "Ownership"; docs/operating/upgrades.md).

BOUND = "bound"
HELD_BACK = "held back"
NO_ACCOUNT = "no account"


@dataclass(frozen=True)
class AccountFacts:
    """What the binding rule needs of the live account named like a maintainer (looked up by user_api)."""

    id: str
    created: datetime


@dataclass(frozen=True)
class BindingDecision:
    """One recorded maintainer name of one package, and what the upgrade does with it."""

    package: str
    maintainer: str
    outcome: str  # BOUND, HELD_BACK or NO_ACCOUNT
    reason: str
    account_id: str | None = None


def _moment(stamp: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def first_publish_time(meta: PackageMeta) -> datetime | None:
    """The earliest time the meta records for the package (`created`, any version's time, any
    unpublish time): a package re-taken after a full unpublish keeps its older moments here."""
    stamps = [meta.created or "", *meta.time.values(), *meta.unpublished.values()]
    moments = [moment for moment in map(_moment, stamps) if moment is not None]
    return min(moments) if moments else None


def unbound_names(meta: PackageMeta) -> list[str]:
    """The maintainer names recorded without an account, in the meta's order."""
    return [entry["name"] for entry in meta.maintainers if not entry.get("account")]


def _stamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def decide_binding(package: str, name: str, account: AccountFacts | None, first_publish: datetime | None) -> BindingDecision:
    """The upgrade's rule for one unbound name: bind it only to an account that already existed when
    the package was first published (the person the previous release gave its rights to)."""
    if account is None:
        return BindingDecision(package, name, NO_ACCOUNT, "no live account of that name: the entry stays unbound")
    claim = f"if it is the same person, run `registry-gen owner claim {package} {name}`"
    if first_publish is None:
        return BindingDecision(package, name, HELD_BACK, f"the package records no publish time; {claim}")
    if account.created > first_publish:
        return BindingDecision(package, name, HELD_BACK, (
            f"account created {_stamp(account.created)}, after the package's first publish "
            f"{_stamp(first_publish)}; {claim}"
        ))  # fmt: skip
    reason = f"account created {_stamp(account.created)}, first publish {_stamp(first_publish)}"
    return BindingDecision(package, name, BOUND, reason, account.id)


def decide_bindings(meta: PackageMeta, accounts: Mapping[str, AccountFacts | None]) -> list[BindingDecision]:
    """The decision for every unbound maintainer name of the package (`accounts` by name)."""
    first = first_publish_time(meta)
    return [decide_binding(meta.name, name, accounts.get(name), first) for name in dict.fromkeys(unbound_names(meta))]


def with_bindings(meta: PackageMeta, decisions: list[BindingDecision]) -> PackageMeta | None:
    """The meta with each BOUND name's entry carrying its account (None: nothing to bind). Entries
    already bound are never touched. Nothing a client sees changes (the account id is never shown),
    so the meta keeps its `modified` time and revision."""
    accounts = {d.maintainer: d.account_id for d in decisions if d.outcome == BOUND and d.account_id}
    people = [
        {**entry, "account": accounts[entry["name"]]} if not entry.get("account") and entry["name"] in accounts else entry
        for entry in meta.maintainers
    ]
    return dataclasses.replace(meta, maintainers=people) if people != meta.maintainers else None


@dataclass(frozen=True)
class BindingReport:
    decisions: list[BindingDecision]
    unreadable: list[str]  # meta files of content/ that do not parse: their names stay unbound
    written: list[str]  # meta files changed (empty for a dry run)


def bind_recorded_maintainers(
    settings: Settings, account_of: Callable[[str], AccountFacts | None], *, apply: bool = True
) -> BindingReport:
    """Binds every recorded maintainer name of content/ by `decide_binding`, and rebuilds the packages
    whose meta changed. `apply=False` decides and writes nothing. The metas are read first without
    a lock (a large registry's scan must not stall publishes); each one to change is read again
    under its package's lock, so an entry bound meanwhile is left as it is."""
    service = admin_write_service(settings)
    storage = service.storage
    accounts: dict[str, AccountFacts | None] = {}
    decisions: list[BindingDecision] = []
    unreadable: list[str] = []
    to_write: dict[str, PackageMeta] = {}
    for key in _meta_keys(settings, storage):
        try:
            meta = _meta_at(storage, key)
        except BrokenMeta:
            unreadable.append(key)  # the build reports a broken meta; nothing in it can be bound safely
            continue
        if meta is None:
            continue
        for name in unbound_names(meta):
            if name not in accounts:
                accounts[name] = account_of(name)
        found = decide_bindings(meta, accounts)
        decisions.extend(found)
        if any(d.outcome == BOUND for d in found):
            to_write[key] = meta
    written = _write_bindings(settings, service, to_write, accounts) if apply and to_write else []
    return BindingReport(decisions, unreadable, written)


def _meta_keys(settings: Settings, storage: ContentStorage) -> list[str]:
    """Every meta file of the content: content/'s walk, or the content bucket's listing."""
    if settings.storage is None:
        return sorted(scan_content(settings.content_dir)[1])
    return sorted(item.key for item in storage.list() if item.key.rpartition("/")[2] == META_FILENAME)


def _meta_at(storage: ContentStorage, key: str) -> PackageMeta | None:
    """The meta at `key` (None: gone since the listing); BrokenMeta naming it when it does not parse."""
    raw = storage.read(key)
    return parsed_meta(key, raw) if raw is not None else None


def _write_bindings(
    settings: Settings, service: WriteService, metas: Mapping[str, PackageMeta], accounts: Mapping[str, AccountFacts | None],
    actor: str = "registry-gen owner bind-recorded",
) -> list[str]:
    """Each package's binding is one write of the api's path (registry_gen.writes), decided again
    on the meta read under its lock, so an entry bound meanwhile is left as it is."""
    written: list[str] = []
    for key, found in metas.items():

        def bind(state: PackageState) -> Change:
            decisions = decide_bindings(state.meta, accounts)
            changed = with_bindings(state.meta, decisions)
            if changed is None:
                return Change()
            written.append(key)
            names = [d.maintainer for d in decisions if d.outcome == BOUND]
            return Change(meta=changed, events=(JournalEvent("package:change", changed.name, (), {"owners bound": names}),))

        service.apply(found.name, bind, Actor(actor))
    return written


def describe_binding(decision: BindingDecision, *, dry_run: bool = False) -> str:
    """One line of `owner bind-recorded`'s list."""
    outcome = "would bind" if dry_run and decision.outcome == BOUND else decision.outcome
    return f"{outcome}: {decision.maintainer} as a maintainer of {decision.package} ({decision.reason})"
