"""The upgrade's binding rule (registry_gen.ownership.decide_binding and its orchestrator), on metas
shaped as the previous release wrote them: a recorded name is bound only to an account that existed
at the package's first publish, an entry already bound is never touched, a dry run writes nothing."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from pathlib import Path

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
