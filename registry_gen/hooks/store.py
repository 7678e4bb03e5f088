"""The hook store's contract: hooks, their deliveries (the outbox) and the journal cursor.

The outbox is a cursor over the change journal: `expand` inserts one delivery per (journal entry,
matching hook), keyed by `rules.delivery_id`, ignoring one that exists, and moves the cursor, in
one transaction; so no event is skipped and a repeat inserts nothing twice. `claim_due` hands a
deliverer the deliveries it may attempt now and marks them claimed until a lease runs out: a
deliverer killed mid-attempt leaves a claim that expires, and whoever claims next attempts the same
delivery (same id) again. On SQLite the claim is one `BEGIN IMMEDIATE` transaction; on PostgreSQL
it is `SELECT ... FOR UPDATE SKIP LOCKED` then the same update, so instances never claim one
delivery at once. The implementation lives with the accounts (user_api.store_hooks): hooks belong
to accounts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from registry_gen.hooks.rules import Hook

PENDING: Final = "pending"  # waiting for its (next) attempt
DELIVERED: Final = "delivered"  # the endpoint answered 2xx
PARKED: Final = "parked"  # given up (too old, the owner may no longer read, the hook's owner is gone): redeliver by hand


@dataclass(frozen=True, slots=True)
class StoredHook:
    """A hook as the deliverer needs it: with its encrypted secret and whether its owner is active."""

    hook: Hook
    secret_cipher: str
    owner_active: bool


@dataclass(frozen=True, slots=True)
class NewDelivery:
    id: str
    hook_id: str
    seq: int
    package: str
    event: dict[str, Any]  # rules.entry_event


@dataclass(frozen=True, slots=True)
class Delivery:
    id: str
    hook_id: str
    seq: int
    package: str
    event: dict[str, Any]
    status: str
    attempts: int
    created: float
    due: float
    last_attempt: str | None = None
    response_code: int | None = None
    last_error: str | None = None
    latency_ms: int | None = None
    excerpt: str | None = None

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id, "hook": self.hook_id, "seq": self.seq, "event": self.event.get("kind"), "package": self.package,
            "status": self.status, "attempts": self.attempts, "last_attempt": self.last_attempt,
            "response_code": self.response_code, "last_error": self.last_error, "latency_ms": self.latency_ms,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Attempt:
    """How one attempt went, and what becomes of the delivery."""

    at: str  # ISO time of the attempt
    status: str  # PENDING (try again at `due`), DELIVERED or PARKED
    due: float
    response_code: int | None
    error: str | None
    latency_ms: int | None
    excerpt: str | None
    counted: bool = True  # False: not tried (an open circuit): the attempt count stays


class HookStore(Protocol):
    # ---- hooks (the npm API, the CLI)
    def create_hook(self, owner_id: str, type_: str, name: str, endpoint: str, secret_cipher: str, *, limit: int) -> Hook: ...
    def get_hook(self, hook_id: str) -> Hook | None: ...
    def list_hooks(self, owner_id: str | None, *, package: str | None, offset: int, limit: int) -> tuple[list[Hook], int]: ...
    def update_hook(self, hook_id: str, endpoint: str, secret_cipher: str) -> Hook | None: ...
    def delete_hook(self, hook_id: str) -> Hook | None: ...
    # ---- the outbox (the deliverer)
    def stored_hooks(self) -> list[StoredHook]: ...
    def cursor(self) -> int: ...
    def expand(self, deliveries: Sequence[NewDelivery], *, after: int, cursor: int, now: float) -> int: ...
    def claim_due(self, worker: str, *, now: float, lease: float, limit: int) -> list[Delivery]: ...
    def record_attempt(self, delivery_id: str, worker: str, attempt: Attempt) -> None: ...
    # ---- the delivery log (admins)
    def deliveries(self, hook_id: str | None, *, offset: int, limit: int) -> list[Delivery]: ...
    def delivery(self, delivery_id: str) -> Delivery | None: ...
    def redeliver(self, delivery_id: str, *, now: float) -> bool: ...
