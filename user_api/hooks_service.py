"""The hooks' services on the user_api side: the hook store over the user store's database, the
read check the deliverer asks before each attempt, and the deliverer a server runs."""

from __future__ import annotations

import functools
from typing import Any

from registry_gen.access import Caller as ReadCaller
from registry_gen.hooks.deliverer import Deliverer
from registry_gen.hooks.rules import Hook
from registry_gen.hooks.secrets import secret_box
from registry_gen.settings import Settings
from user_api.store import UserStore
from user_api.store_hooks import SqlHookStore


def hook_store(store: UserStore) -> SqlHookStore:
    """The hooks of the accounts' database (one Dialect: the same connections and transactions)."""
    dialect: Any = getattr(store, "dialect")  # SqlUserStore; the UserStore contract does not name it
    return SqlHookStore(dialect)


def read_refusal(settings: Settings, store: UserStore, hook: Hook, package: str) -> str | None:
    """None when the hook's owner may still read `package` (registry.yaml `packages:`), else why not."""
    if not settings.packages.in_force:
        return None
    user = store.get_by_id(hook.owner_id)
    if user is None or user.status != "active":
        return f"the hook's owner {hook.owner} is no longer an active account"
    caller = ReadCaller(user.username, store.groups_of(user.id), user.is_admin)
    return None if settings.packages.may_read(package, caller) else f"{hook.owner} may no longer read {package}"


def start_deliverer(settings: Settings, store: UserStore) -> Deliverer:
    """The background deliverer of a `serve`/`api` process, started."""
    box = functools.partial(secret_box, settings, create=False)
    return Deliverer(settings, hook_store(store), box, functools.partial(read_refusal, settings, store)).start()
