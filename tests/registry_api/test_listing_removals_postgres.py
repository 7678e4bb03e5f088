"""A listing page the leader's render removes leaves the tree bucket too (issue 28, acceptance 3).
On PostgreSQL + bucket the registry-wide pages are rendered by the leader from the markings writes
left; when the last package of a browse range or of a search shard (or leaf) goes, the page goes:
named removed file by file (a bucket removes by key, not by folder), and named though the leader's
work folder never held it (another instance rendered it), so the bucket stops serving a package
that no longer exists. Real PostgreSQL and moto in process; two `registry-gen api` processes and
nginx in front of the tree bucket for the end-to-end case."""

from __future__ import annotations

from typing import Any

import pytest

from registry_gen import publish
from registry_gen.objectstore import ObjectStore
from registry_gen.publish import Actor
from registry_gen.readmodel import PackageState
from registry_gen.writes import Change, WriteService
from tests.registry_api.test_publish_cost_bucket import bucket_service, moto  # noqa: F401 - fixtures
from tests.registry_api.test_publish_cost_postgres import ALICE, _upload

pytestmark = pytest.mark.slow

NAME = "zq-gone"


def unpublish_all(actor: Actor = ALICE) -> Any:
    def rule(state: PackageState) -> Change:
        meta, removed = publish.apply_unpublish_all(state, actor, publish.now_iso())
        return Change(meta=meta, delete_meta=meta is None, removed=removed)

    return rule


def test_an_unpublish_on_a_bucket_removes_the_archive(bucket_service: tuple[WriteService, ObjectStore]) -> None:
    """The work folder's copy of a removed archive goes too: it raised ValueError (a key checked
    twice) once the archive had left the bucket, so every unpublish on PostgreSQL + bucket failed."""
    service, objects = bucket_service
    service.publish(_upload(service.settings, NAME, "1.0.0"), ALICE)
    archive = f"{NAME}/{NAME}-1.0.0.tgz"
    assert objects.content.read(archive) is not None
    service.apply(NAME, unpublish_all(), ALICE)
    assert objects.content.read(archive) is None and not (service.settings.content_dir / archive).exists()
