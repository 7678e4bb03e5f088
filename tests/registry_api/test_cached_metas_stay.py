"""A parsed meta is shared: `parse_meta` hands the same object to every caller of the same bytes
(registry_gen.meta keeps recent metas by digest), so no rule may change one in place. Every write
rule of registry_gen.publish, the owner rules, the mirror's rules, the renderers and a whole build
run here over cached metas holding every field; each meta must still equal the deep copy taken
when it was parsed, and its bytes must still give that same object.

Why a test and not frozen metas: a mirrored meta holds the upstream's document (2 MB for
@types/node), and freezing it deeply or copying it costs more than parsing it again (measured on
@types/node: parse 44 ms, deepcopy 96 ms), which is what the cache saves (bench/PROFILE.md)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from registry_gen import ownership, publish
from registry_gen.build import run_build
from registry_gen.layout import PACKAGE_DOCUMENT
from registry_gen.meta import META_FILENAME, PackageMeta, dump_meta, parse_meta
from registry_gen.mirror.config import Uplink
from registry_gen.mirror.policy import MirrorPolicy
from registry_gen.mirror.record import with_verdicts
from registry_gen.mirror.taking import judged, mirrored_meta, take_document
from registry_gen.packument import document_revision, mirrored_packument
from registry_gen.publish import Actor, PackageState
from registry_gen.settings import Limits, Settings
from registry_gen.storage import archive_key
from tests.registry_api.helpers import publish_body, tarball

NOW = "2025-03-01T12:00:00.000Z"
ALICE = Actor("alice", "alice@example.com", account_id="acct-alice")
NAME, MIRRORED = "kept", "upstream-pkg"
UPLINK = Uplink("npmjs", "https://registry.npmjs.org/")


def _published_meta() -> PackageMeta:
    staged = {"name": NAME, "version": "2.0.0", "_tag": "next", "_staged": NOW, "dependencies": {"a": "^1.0.0"}}
    return PackageMeta(
        NAME,
        dist_tags={"latest": "1.1.0", "beta": "1.0.0"},
        maintainers=[{"name": "alice", "email": "alice@example.com", "account": "acct-alice"}, {"name": "carol", "email": "carol@example.com"}],
        deprecated={"1.0.0": "use 1.1.0"},
        time={"0.9.0": NOW, "1.0.0": NOW, "1.1.0": NOW},
        unpublished={"0.9.0": NOW},
        pending={"2.0.0": staged},
        created=NOW, modified=NOW, revision=3,
    )  # fmt: skip


def _upstream_document() -> dict[str, Any]:
    def manifest(version: str) -> dict[str, Any]:
        dist = {"tarball": f"https://registry.npmjs.org/{MIRRORED}/-/{MIRRORED}-{version}.tgz", "integrity": "sha512-" + "A" * 86 + "==", "shasum": "0" * 40}
        return {"name": MIRRORED, "version": version, "dependencies": {"b": "^2.0.0"}, "maintainers": [{"name": "up", "email": "up@example.com"}], "dist": dist}

    return {
        "name": MIRRORED, "dist-tags": {"latest": "1.1.0", "old": "1.0.0"},
        "versions": {v: manifest(v) for v in ("1.0.0", "1.1.0")},
        "time": {"created": NOW, "modified": NOW, "1.0.0": NOW, "1.1.0": NOW},
        "maintainers": [{"name": "up", "email": "up@example.com"}], "readme": "# upstream",
    }  # fmt: skip


def _mirrored_meta() -> PackageMeta:
    record = take_document(_upstream_document(), MIRRORED, UPLINK, None, NOW)
    return mirrored_meta(with_verdicts(record, {"1.0.0": "too young"}), None, MIRRORED)


def _write_rules(state: PackageState) -> dict[str, Callable[[], object]]:
    """Each rule of registry_gen.publish, given inputs that change what it can change."""
    upload = publish.decode_publish(NAME, publish_body(NAME, "2.0.0", tarball(NAME, "2.0.0")), Limits())
    unheld = PackageState(NAME, state.meta, frozenset())  # every version unpublished: step 1 reopens it
    carol = {"name": "carol", "email": "carol@example.com", "account": "acct-carol"}
    return {
        "apply_publish": lambda: publish.apply_publish(state, upload, ALICE, NOW),
        "apply_create": lambda: publish.apply_create(unheld, ALICE, NOW),
        "apply_stage": lambda: (
            publish.apply_stage(state, "1.0.0", "next", None, ALICE, NOW),
            publish.apply_stage(state, "2.1.0", "next", {"name": NAME, "version": "2.1.0"}, ALICE, NOW),
        ),
        "apply_deprecations": lambda: publish.apply_deprecations(state, {"1.0.0": {"deprecated": ""}, "1.1.0": {"deprecated": "old"}}, ALICE, NOW),
        "apply_unpublish_all": lambda: publish.apply_unpublish_all(state, ALICE, NOW),
        "apply_version_set": lambda: publish.apply_version_set(state, {"1.1.0"}, {"latest": "1.1.0", "beta": "1.0.0"}, ALICE, NOW),
        "apply_unpublish_version": lambda: publish.apply_unpublish_version(state, "1.1.0", ALICE, NOW),
        "apply_owners": lambda: publish.apply_owners(state, [{"name": "carol"}, {"name": "bob"}], ALICE, NOW, lambda name: {"name": name, "account": f"acct-{name}"}),
        "apply_dist_tag": lambda: publish.apply_dist_tag(state, "beta", "1.1.0", ALICE, NOW),
        "apply_dist_tag_removal": lambda: publish.apply_dist_tag_removal(state, "beta", ALICE, NOW),
        "apply_claim": lambda: publish.apply_claim(state, carol, NOW),
    }  # fmt: skip


def _owner_rules(state: PackageState) -> list[object]:
    accounts = {"carol": ownership.AccountFacts("acct-carol", datetime(2020, 1, 1, tzinfo=timezone.utc))}
    return [
        ownership.erase_email(state, "carol"),
        ownership.erase_email(state, "alice"),
        ownership.with_bindings(state.meta, ownership.decide_bindings(state.meta, accounts)),
    ]


def _mirror_rules(meta: PackageMeta) -> list[object]:
    record = meta.mirror
    assert record is not None
    taken = take_document(_upstream_document(), MIRRORED, UPLINK, record, NOW)
    return [
        taken, mirrored_meta(taken, meta, MIRRORED), judged(MIRRORED, record, MirrorPolicy(), (), 1e10),
        with_verdicts(record, {}), mirrored_packument(MIRRORED, meta, record, base_url="http://r.example/", signer=None),
        document_revision(meta, record.allowed),
    ]  # fmt: skip


def _content(root: Path, metas: dict[str, PackageMeta]) -> dict[str, bytes]:
    """content/ holding each meta (and the published package's tarballs); each meta's bytes."""
    raws = {}
    for name, meta in metas.items():
        folder = root / "content" / name
        folder.mkdir(parents=True)
        raws[name] = dump_meta(meta)
        (folder / META_FILENAME).write_bytes(raws[name])
    for version in ("1.0.0", "1.1.0"):
        (root / "content" / archive_key(NAME, version)).write_bytes(tarball(NAME, version))
    return raws


def test_no_rule_changes_a_cached_meta_in_place(tmp_path: Path) -> None:
    raws = _content(tmp_path, {NAME: _published_meta(), MIRRORED: _mirrored_meta()})
    cached = {name: parse_meta(raw) for name, raw in raws.items()}
    before = copy.deepcopy(cached)
    state = PackageState(NAME, cached[NAME], frozenset({"1.0.0", "1.1.0"}))

    rules = _write_rules(state)
    assert set(rules) == {rule for rule in dir(publish) if rule.startswith("apply_")}, "a write rule this test does not run"
    results = [rule() for rule in rules.values()]
    results += _owner_rules(state) + _mirror_rules(cached[MIRRORED])
    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data", base_url="http://r.example/")
    run_build(settings)

    assert all(result is not None for result in results)
    assert json.loads((tmp_path / "public" / NAME / PACKAGE_DOCUMENT).read_bytes())["dist-tags"]["latest"] == "1.1.0"
    for name, raw in raws.items():
        assert parse_meta(raw) is cached[name]  # the build and the rules were handed this same object
        assert cached[name] == before[name], f"a rule changed the cached meta of {name} in place"
