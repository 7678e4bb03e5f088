"""The outbox's claim rules on the real user store, SQLite and PostgreSQL: a package's events reach a hook in
journal order (a later one waits while an earlier one is pending, even when due first), an
expansion repeated inserts nothing twice, and a claim is taken over only after its lease."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from registry_gen.hooks.rules import delivery_id
from registry_gen.hooks.store import DELIVERED, PENDING, Attempt, NewDelivery
from registry_gen.settings import Settings
from tests.user_api.conftest import FAST_HASHER, postgres_server, store_settings  # noqa: F401 - fixtures used here
from user_api.hooks_service import hook_store
from user_api.store import open_user_store
from user_api.store_hooks import SqlHookStore


@pytest.fixture
def hooks(store_settings: Settings) -> Iterator[tuple[SqlHookStore, str]]:  # noqa: F811 - the imported fixture
    """The hook store of a fresh user store (SQLite, then PostgreSQL), with one hook of alice's."""
    users = open_user_store(store_settings, hasher=FAST_HASHER)
    try:
        owner = users.create_user("alice", "alice-password-1")
        found = hook_store(users)
        yield found, found.create_hook(owner.id, "package", "ordered", "http://203.0.113.9/", "sealed", limit=10).id
    finally:
        users.close()


def _new(hook_id: str, seq: int) -> NewDelivery:
    return NewDelivery(delivery_id(hook_id, seq), hook_id, seq, "ordered", {"kind": "package:publish", "seq": seq})


def test_a_later_event_waits_for_an_earlier_pending_one_even_when_due_first(hooks: tuple[SqlHookStore, str]) -> None:
    hooks, hook_id = hooks
    assert hooks.expand([_new(hook_id, 1), _new(hook_id, 2)], after=0, cursor=2, now=100.0) == 2
    assert hooks.expand([_new(hook_id, 1), _new(hook_id, 2)], after=0, cursor=2, now=100.0) == 0  # a repeat adds nothing
    [first] = hooks.claim_due("w", now=100.0, lease=10, limit=10)
    assert first.seq == 1
    hooks.record_attempt(first.id, "w", Attempt("t", PENDING, 500.0, None, "refused", 1, None))  # retried late
    assert hooks.claim_due("w", now=200.0, lease=10, limit=10) == []  # seq 2 is due, but seq 1 comes first
    [again] = hooks.claim_due("w", now=500.0, lease=10, limit=10)
    hooks.record_attempt(again.id, "w", Attempt("t", DELIVERED, 0.0, 200, None, 1, "ok"))
    assert [d.seq for d in hooks.claim_due("w", now=500.0, lease=10, limit=10)] == [2]
    assert hooks.cursor() == 2


def test_a_claim_is_taken_over_only_after_its_lease_and_the_old_worker_cannot_record(hooks: tuple[SqlHookStore, str]) -> None:
    hooks, hook_id = hooks
    hooks.expand([_new(hook_id, 1)], after=0, cursor=1, now=100.0)
    [claimed] = hooks.claim_due("killed", now=100.0, lease=10, limit=10)
    assert hooks.claim_due("next", now=105.0, lease=10, limit=10) == []
    [taken] = hooks.claim_due("next", now=111.0, lease=10, limit=10)
    assert taken.id == claimed.id == delivery_id(hook_id, 1)
    hooks.record_attempt(claimed.id, "killed", Attempt("t", DELIVERED, 0.0, 200, None, 1, None))  # too late: ignored
    assert hooks.deliveries(hook_id, offset=0, limit=10)[0].status == PENDING
