"""An instance's start must not put an older copy of a package back over a write acknowledged by
another instance meanwhile (issue 28, acceptance 1: every acknowledged write served, through a
rolling restart). The start reads the bucket and builds under the registry-wide lock; its upload
of what it built used to follow after the lock's release, where a write could land first."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import registry_gen.writes
from registry_gen.errors import LockTimeout
from registry_gen.layout import ABBREVIATED_DOCUMENT, ALL_DOCUMENT, PACKAGE_DOCUMENT, WEB_ROOT
from registry_gen.objectstore import ObjectStore, open_object_store
from registry_gen.refresher import WholeRewrite
from registry_gen.settings import Settings
from registry_gen.writes import WriteService
from tests.registry_api.test_publish_cost_bucket import bucket_service, moto  # noqa: F401 - fixtures
from tests.registry_api.test_publish_cost_postgres import ALICE, _upload

pytestmark = pytest.mark.slow


def _versions_in_bucket(objects: ObjectStore, name: str) -> dict[str, set[str]]:
    """The versions each of the package's documents in the tree bucket lists."""
    found = {}
    for document in (PACKAGE_DOCUMENT, ABBREVIATED_DOCUMENT):
        data = objects.tree.bucket.read(f"{name}/{document}")
        assert data is not None, f"{name}/{document} missing from the tree bucket"
        found[document] = set(json.loads(data)["versions"])
    return found


def _second_instance(settings: Settings, folder: Path) -> tuple[Settings, ObjectStore]:
    """Another instance of the same registry (same PostgreSQL and buckets), its work folders empty."""
    other = dataclasses.replace(settings, content_dir=folder / "content", out_dir=folder / "public", data_dir=folder / "data")
    starting = open_object_store(other)
    assert starting is not None
    return other, starting


def test_a_publish_during_another_instance_s_start_is_served_after_that_start(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Instance B starts (empty work folder) while A serves race-pkg 1.0.0. Between B's build and
    its upload, A publishes 2.0.0. A write acknowledged there must still be served once B's start
    is done; a write refused there (B's start holds the registry) is retried by its client, as
    any 503. Either way the bucket ends with both versions in both documents."""
    service, _ = bucket_service
    settings = service.settings
    service.publish(_upload(settings, "race-pkg", "1.0.0"), ALICE)
    other, starting = _second_instance(settings, tmp_path / "b")
    upload = starting.tree.publish
    # A's write gives up at once on a lock B's start holds, instead of waiting on this very thread.
    monkeypatch.setattr(registry_gen.writes, "LOCK_TIMEOUT_SECONDS", 1)
    outcome: list[str] = []

    def publish_before_the_start_uploads(result: Any, *early: Any) -> None:
        try:
            service.publish(_upload(settings, "race-pkg", "2.0.0"), ALICE)
            outcome.append("acknowledged")
        except LockTimeout:
            outcome.append("refused")
        upload(result, *early)

    monkeypatch.setattr(starting.tree, "publish", publish_before_the_start_uploads)
    starting.start(other)
    assert len(outcome) == 1
    if outcome == ["refused"]:
        service.publish(_upload(settings, "race-pkg", "2.0.0"), ALICE)  # the client's retry
    assert _versions_in_bucket(starting, "race-pkg") == {PACKAGE_DOCUMENT: {"1.0.0", "2.0.0"}, ABBREVIATED_DOCUMENT: {"1.0.0", "2.0.0"}}


def test_pages_a_leader_rendered_before_a_start_and_uploads_after_it_are_rendered_again(
    bucket_service: tuple[WriteService, ObjectStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's turn builds its listing pages and -/all; before it uploads them, A publishes
    late-kit (which marks them again) and B starts, rendering and uploading them with late-kit.
    The leader's older render then lands over B's. B must leave the write's markings to the
    leader, whose next turn renders them with late-kit: else the bucket's pages never list it."""
    service, objects = bucket_service
    settings = service.settings
    service.publish(_upload(settings, "early-kit", "1.0.0"), ALICE)
    other, starting = _second_instance(settings, tmp_path / "b")
    upload = objects.tree.publish
    turns: list[str] = []

    def a_write_and_a_start_before_the_leader_uploads(result: Any, *early: Any) -> None:
        if not turns:
            turns.append("the leader's upload")
            service.publish(_upload(settings, "late-kit", "1.0.0"), ALICE)  # its own upload goes through below
            starting.start(other)
        upload(result, *early)

    monkeypatch.setattr(objects.tree, "publish", a_write_and_a_start_before_the_leader_uploads)
    WholeRewrite(settings, objects)()
    assert b"late-kit" not in (objects.tree.bucket.read(ALL_DOCUMENT) or b"")  # the leader's older render, last
    WholeRewrite(settings, objects)()  # the leader's next turn
    assert b"late-kit" in (objects.tree.bucket.read(ALL_DOCUMENT) or b"")
    assert b"late-kit" in (objects.tree.bucket.read(f"{WEB_ROOT}/index.html") or b"")
