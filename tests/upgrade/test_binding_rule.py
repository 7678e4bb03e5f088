"""The upgrade's binding rule (registry_gen.ownership.decide_binding and its orchestrator), on metas
shaped as the previous release wrote them: a recorded name is bound only to an account that existed
at the package's first publish, an entry already bound is never touched, a dry run writes nothing."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone

import pytest

from registry_gen.build import run_build
from registry_gen.meta import PackageMeta, parse_meta
from registry_gen.ownership import (
    BOUND,
    HELD_BACK,
    NO_ACCOUNT,
    AccountFacts,
    bind_recorded_maintainers,
    decide_bindings,
    first_publish_time,
    with_bindings,
)
from registry_gen.settings import Settings
from registry_gen.state import open_state
from tests.registry_api.helpers import tarball

FIRST = "2026-03-01T10:00:00.000Z"


def at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)


def old_meta(*names: str, **fields: object) -> PackageMeta:
    times = {"time": {"1.0.0": FIRST, "1.1.0": "2026-04-01T00:00:00.000Z"}, "created": FIRST}
    people = [{"name": name} for name in names]
    return parse_meta(json.dumps({"name": "upg-pkg", "maintainers": people, **times, **fields}).encode())


def test_an_account_older_than_the_first_publish_is_bound_a_younger_one_held_back() -> None:
    accounts = {
        "olduser": AccountFacts("id-old", at("2026-02-01T00:00:00.000Z")),
        "sameinstant": AccountFacts("id-same", at(FIRST)),
        "lateuser": AccountFacts("id-late", at("2026-03-01T10:00:00.001Z")),  # a millisecond after
    }
    decisions = decide_bindings(old_meta("olduser", "sameinstant", "lateuser", "ghost"), accounts)
    assert [(d.maintainer, d.outcome) for d in decisions] == [
        ("olduser", BOUND), ("sameinstant", BOUND), ("lateuser", HELD_BACK), ("ghost", NO_ACCOUNT),
    ]
    assert "owner claim upg-pkg lateuser" in decisions[2].reason and decisions[2].account_id is None


def test_the_first_publish_is_the_earliest_moment_the_meta_records() -> None:
    # Re-taken after a full unpublish: `created` moved, the unpublish record still shows the older life.
    meta = old_meta("olduser", created="2026-06-01T00:00:00.000Z", unpublished={"0.9.0": "2026-01-15T00:00:00.000Z"})
    assert first_publish_time(meta) == at("2026-01-15T00:00:00.000Z")
    account = {"olduser": AccountFacts("id-old", at("2026-02-01T00:00:00.000Z"))}
    assert decide_bindings(meta, account)[0].outcome == HELD_BACK
    undated = parse_meta(json.dumps({"name": "hand-pkg", "maintainers": [{"name": "olduser"}], "time": {"1.0.0": "soon"}}).encode())
    assert first_publish_time(undated) is None
    assert "records no publish time" in decide_bindings(undated, account)[0].reason


def test_an_entry_already_bound_is_never_rebound() -> None:
    meta = dataclasses.replace(old_meta(), maintainers=[{"name": "olduser", "account": "id-kept"}, {"name": "newname"}])
    accounts = {name: AccountFacts(f"id-{name}", at("2026-01-01T00:00:00.000Z")) for name in ("olduser", "newname")}
    decisions = decide_bindings(meta, accounts)
    assert [d.maintainer for d in decisions] == ["newname"]
    bound = with_bindings(meta, decisions)
    assert bound is not None and bound.maintainers == [{"name": "olduser", "account": "id-kept"}, {"name": "newname", "account": "id-newname"}]
    assert (bound.modified, bound.revision) == (meta.modified, meta.revision)  # nothing a client sees changed
    assert with_bindings(bound, decide_bindings(bound, accounts)) is None


def test_a_dry_run_writes_nothing_and_a_broken_meta_is_listed(settings: Settings) -> None:
    folder = settings.content_dir / "upg-pkg"
    folder.mkdir()
    (folder / "upg-pkg-1.0.0.tgz").write_bytes(tarball("upg-pkg", "1.0.0"))
    (folder / "registry-meta.json").write_text(json.dumps(old_meta("olduser").to_json()))
    (settings.content_dir / "broken").mkdir()
    (settings.content_dir / "broken" / "registry-meta.json").write_text("{not json")
    run_build(settings)
    before = (folder / "registry-meta.json").read_bytes()
    accounts = {"olduser": AccountFacts("id-old", at("2026-02-01T00:00:00.000Z"))}
    dry = bind_recorded_maintainers(settings, accounts.get, apply=False)
    assert [d.outcome for d in dry.decisions] == [BOUND] and dry.written == []
    assert dry.unreadable == ["broken/registry-meta.json"]
    assert (folder / "registry-meta.json").read_bytes() == before
    done = bind_recorded_maintainers(settings, accounts.get)
    assert done.written == ["upg-pkg/registry-meta.json"]
    assert parse_meta((folder / "registry-meta.json").read_bytes()).maintainers == [{"name": "olduser", "account": "id-old"}]
    with open_state(settings).journal() as journal:  # the binding is a write: journalled once, the dry run not at all
        entries = journal.since(0)
    assert [(e.kind, e.package, e.detail, e.actor) for e in entries] == [
        ("package:change", "upg-pkg", {"owners bound": ["olduser"]}, "registry-gen owner bind-recorded")
    ]


def test_outside_an_upgrade_binding_needs_force_and_an_unreadable_meta_keeps_the_step(settings: Settings) -> None:
    """Once, at the upgrade: a database this release made has no step pending, so the command refuses
    to bind without --force; a step stays pending (and the servers keep reminding) until every meta
    could be read."""
    import sqlite3

    from registry_gen.errors import BindingNotPending
    from user_api.admin import bind_recorded_for
    from user_api.sqlstore import BIND_RECORDED_MAINTAINERS
    from user_api.store import open_user_store

    (settings.content_dir / "broken").mkdir()
    (settings.content_dir / "broken" / "registry-meta.json").write_text("{not json")
    store = open_user_store(settings)
    try:
        store.create_user("olduser", "olduser-password-1")
        with pytest.raises(BindingNotPending, match="--force"):
            bind_recorded_for(settings, store)
        assert bind_recorded_for(settings, store, apply=False).unreadable == ["broken/registry-meta.json"]
        assert bind_recorded_for(settings, store, force=True).unreadable == ["broken/registry-meta.json"]
    finally:
        store.close()
    db = sqlite3.connect(settings.data_dir / "users.sqlite3")
    db.execute("PRAGMA user_version = 1")  # the previous release's schema, accounts in it
    db.close()
    store = open_user_store(settings)
    try:
        assert store.pending_upgrade_steps() == [BIND_RECORDED_MAINTAINERS]
        bind_recorded_for(settings, store)
        assert store.pending_upgrade_steps() == [BIND_RECORDED_MAINTAINERS]  # broken/ is still to do
        (settings.content_dir / "broken" / "registry-meta.json").unlink()
        bind_recorded_for(settings, store)
        assert store.pending_upgrade_steps() == []
    finally:
        store.close()
