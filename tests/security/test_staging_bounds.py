"""Legacy staged versions are bounded in number and size, and expire (issue 13, Medium)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from registry_gen.meta import PackageMeta
from registry_gen.publish import MAX_STAGED_VERSIONS, STAGE_TTL_SECONDS, Actor, BadRequest, PackageState, apply_stage, live_pending
from tests.registry_api.helpers import RegistryProcess, add_user, http

ACTOR = Actor("stager", account_id="acct-1")
T0 = "2026-01-01T00:00:00.000Z"


def _stage(meta: PackageMeta, version: str, now: str = T0, **fields: object) -> PackageMeta:
    return apply_stage(PackageState("staged-pkg", meta, frozenset()), version, "latest", {"name": "staged-pkg", "version": version, **fields}, ACTOR, now)


def test_stages_beyond_the_bound_are_refused_until_older_ones_expire() -> None:
    meta = PackageMeta(name="staged-pkg")
    for minor in range(MAX_STAGED_VERSIONS):
        meta = _stage(meta, f"1.{minor}.0")
    with pytest.raises(BadRequest, match="staged versions"):
        _stage(meta, "2.0.0")
    assert STAGE_TTL_SECONDS == 24 * 3600
    later = _stage(meta, "2.0.0", now="2026-01-02T00:00:01.000Z")
    assert list(later.pending) == ["2.0.0"]
    assert live_pending(later.pending, "2026-01-03T00:00:02.000Z") == {}


def test_a_large_staged_document_is_refused() -> None:
    with pytest.raises(BadRequest, match="at most"):
        _stage(PackageMeta(name="staged-pkg"), "1.0.0", description="x" * 100_000)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    process = RegistryProcess(tmp_path_factory.mktemp("stage")).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.slow
def test_the_meta_file_stays_small_under_a_staging_flood(served: RegistryProcess) -> None:
    token = add_user(served.base, "flooder", "flooder-password-1")
    statuses = []
    for minor in range(MAX_STAGED_VERSIONS + 3):
        document = {"name": "flood-pkg", "version": f"1.{minor}.0", "description": "x" * 900_000}
        statuses.append(http("PUT", f"{served.base}flood-pkg/1.{minor}.0/-tag/latest", token=token, body=document).status)
    assert set(statuses) == {400}
    small = [http("PUT", f"{served.base}flood-pkg/1.{minor}.0/-tag/latest", token=token,
                  body={"name": "flood-pkg", "version": f"1.{minor}.0"}).status for minor in range(MAX_STAGED_VERSIONS + 3)]
    assert small.count(400) == 3 and set(small[:MAX_STAGED_VERSIONS]) <= {200, 201}
    metas = list(served.content.rglob("registry-meta.json"))
    assert metas and all(path.stat().st_size < 64 * 1024 for path in metas)
