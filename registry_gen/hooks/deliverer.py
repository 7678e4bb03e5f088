"""The deliverer (I/O, orchestrator): a background thread of `serve`/`api`, never in a request.

Each round it (1) reads the change journal past the store's cursor and expands each entry into
deliveries for the hooks it matches (store.expand: idempotent, cursor moved in the same
transaction), then (2) claims the deliveries due (store.claim_due, a lease) and attempts each
once (net.post), recording how it went (store.record_attempt): delivered, pending again after a
backoff with jitter, or parked (too old, its owner may no longer read the package or is gone).
A write wakes it (`wake`); a timer does too, for retries that come due.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final

from registry_gen.hooks import net
from registry_gen.hooks.rules import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    Breaker,
    Hook,
    delivery_id,
    endpoint_key,
    entry_event,
    envelope,
    event_maintainers,
    matches,
    retry_delay,
    signature,
)
from registry_gen.hooks.secrets import SecretBox
from registry_gen.hooks.store import DELIVERED, PARKED, PENDING, Attempt, Delivery, HookStore, NewDelivery, StoredHook
from registry_gen.errors import Unavailable
from registry_gen.layout import PACKAGE_DOCUMENT
from registry_gen.settings import Settings
from registry_gen.state import JournalEntry, open_state
from registry_gen.timestamps import iso_from_ns

log = logging.getLogger(__name__)
JOURNAL_BATCH: Final = 200
CLAIM_BATCH: Final = 20
# Who may still read what: None when `hook`'s owner may read the package, else why not.
ReadCheck = Callable[[Hook, str], str | None]


class Deliverer:
    def __init__(self, settings: Settings, store: HookStore, box: Callable[[], SecretBox], may_read: ReadCheck,
                 resolve: net.Resolver = net.system_resolver):  # fmt: skip
        self.settings = settings
        self.store = store
        self.box = box
        self.may_read = may_read
        self.resolve = resolve
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.breakers: dict[str, Breaker] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._paused = False

    # ---- the thread

    def start(self) -> Deliverer:
        self._thread = threading.Thread(target=self._loop, name="hook-deliverer", daemon=True)
        self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def stop(self, wait: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(wait)

    def _loop(self) -> None:
        tick = min(2.0, self.settings.hooks.retry_base_seconds)
        while not self._stop.is_set():
            if not self._round():
                self._wake.wait(tick)
                self._wake.clear()

    def _round(self) -> bool:
        """One round, True when it handled something. A database or bucket that is away pauses the
        deliveries with one line, and one more when they resume, not a traceback every tick."""
        try:
            busy = self.run_once() > 0
        except Unavailable as exc:
            if not self._paused:
                log.warning("hooks: deliveries paused: %s; they resume by themselves when it is back", exc)
            self._paused = True
            return False
        except Exception:  # noqa: BLE001 - the thread must outlive a bad round; the next one retries
            log.exception("hooks: a delivery round failed")
            return False
        if self._paused:
            log.warning("hooks: deliveries resumed")
            self._paused = False
        return busy

    # ---- one round

    def run_once(self) -> int:
        """Expands the journal, then attempts what is due; how many entries and attempts it handled."""
        return self.expand() + self.deliver_due()

    def expand(self) -> int:
        hooks = [stored.hook for stored in self.store.stored_hooks()]
        cursor, seen = self.store.cursor(), 0
        with open_state(self.settings).journal() as journal:
            while entries := journal.since(cursor, JOURNAL_BATCH):
                wanted = [NewDelivery(delivery_id(hook.id, e.seq), hook.id, e.seq, e.package, entry_event(e))
                          for e in entries for hook in self._hooks_for(e, hooks)]  # fmt: skip
                self.store.expand(wanted, after=cursor, cursor=entries[-1].seq, now=time.time())
                cursor, seen = entries[-1].seq, seen + len(entries)
        return seen

    def _hooks_for(self, entry: JournalEntry, hooks: list[Hook]) -> Iterable[Hook]:
        """The hooks an entry goes to: those watching it that existed when it was written."""
        alive = [hook for hook in hooks if hook.created <= entry.time]
        owners = self._maintainers(entry) if any(hook.type == "owner" for hook in alive) else []
        return [hook for hook in alive if matches(hook, entry.package, owners)]

    def _maintainers(self, entry: JournalEntry) -> list[str]:
        names = [str(m.get("name")) for m in self.document(entry.package).get("maintainers") or () if isinstance(m, dict)]
        return names + event_maintainers(entry.detail)

    def document(self, package: str) -> dict[str, Any]:
        """The package document as the tree serves it now ({} once it is gone)."""
        try:
            found = json.loads((self.settings.out_dir / package / PACKAGE_DOCUMENT).read_bytes())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    def deliver_due(self) -> int:
        hooks_cfg = self.settings.hooks
        lease = hooks_cfg.timeout_seconds + 5  # an attempt ends by its timeout: a claim older than this was abandoned
        claimed = self.store.claim_due(self.worker, now=time.time(), lease=lease, limit=CLAIM_BATCH)
        if not claimed:
            return 0
        hooks = {stored.hook.id: stored for stored in self.store.stored_hooks()}
        for delivery in claimed:
            self.store.record_attempt(delivery.id, self.worker, self.attempt(delivery, hooks.get(delivery.hook_id)))
        return len(claimed)

    # ---- one attempt

    def attempt(self, delivery: Delivery, stored: StoredHook | None) -> Attempt:
        now = time.time()
        refusal = self._refusal(delivery, stored, now)
        if refusal is not None:
            return _parked(refusal)
        assert stored is not None
        key = endpoint_key(stored.hook.endpoint)
        breaker = self.breakers.get(key, Breaker())
        if not breaker.allows(now):
            return Attempt(_now(), PENDING, breaker.open_until, None, "circuit open: the endpoint failed repeatedly", None, None, counted=False)
        secret = self.box().open(stored.secret_cipher)
        if secret is None:
            return _parked("the hook's secret was sealed under another key (hooks.secret_key changed)")
        body = envelope(delivery.event, stored.hook, self.document(delivery.package))
        headers = {SIGNATURE_HEADER: signature(secret, body), DELIVERY_HEADER: delivery.id, EVENT_HEADER: str(delivery.event["kind"]),
                   "User-Agent": "registry-gen-hooks"}  # fmt: skip
        outcome = net.post(stored.hook.endpoint, body, headers, timeout=self.settings.hooks.timeout_seconds,
                           allow_networks=self.settings.hooks.allow_networks, resolve=self.resolve)  # fmt: skip
        self.breakers[key] = breaker.after(outcome.ok, time.time(), cool=min(60.0, 6 * self.settings.hooks.retry_base_seconds))
        return self._after(delivery, outcome)

    def _refusal(self, delivery: Delivery, stored: StoredHook | None, now: float) -> str | None:
        if stored is None:
            return "the hook is gone"
        if not stored.owner_active:
            return f"the hook's owner {stored.hook.owner} is no longer an active account"
        if now - delivery.created > self.settings.hooks.park_after_seconds:
            return "undelivered for longer than hooks.park_after_seconds"
        return self.may_read(stored.hook, delivery.package)

    def _after(self, delivery: Delivery, outcome: net.Outcome) -> Attempt:
        if outcome.ok:
            return Attempt(_now(), DELIVERED, 0.0, outcome.status, None, outcome.latency_ms, outcome.excerpt)
        due = time.time() + retry_delay(delivery.attempts + 1, self.settings.hooks.retry_base_seconds, random.random())  # noqa: S311
        status = PARKED if due - delivery.created > self.settings.hooks.park_after_seconds else PENDING
        return Attempt(_now(), status, due, outcome.status, outcome.error, outcome.latency_ms, outcome.excerpt)


def _parked(reason: str) -> Attempt:
    return Attempt(_now(), PARKED, 0.0, None, reason, None, None, counted=False)


def _now() -> str:
    return iso_from_ns(time.time_ns())
