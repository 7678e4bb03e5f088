"""The API never produces a tree `registry-gen verify` rejects (issue 13, Medium: version-less entries)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.registry_api.helpers import RegistryProcess, add_user, http

pytestmark = pytest.mark.slow


def _verify(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "registry_gen", "verify", str(out)], capture_output=True, text=True, cwd=out.parent)


def test_an_empty_create_and_a_legacy_stage_leave_a_tree_verify_accepts(tmp_path: Path) -> None:
    process = RegistryProcess(tmp_path).start()
    try:
        token = add_user(process.base, "squatter", "squatter-password-1")
        assert http("PUT", process.base + "empty-entry", token=token, body={}).status in (200, 201)
        staged = http("PUT", f"{process.base}staged-entry/1.0.0/-tag/latest", token=token, body={"name": "staged-entry", "version": "1.0.0"})
        assert staged.status in (200, 201)
        result = _verify(process.out)
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        process.stop()


# ---------------------------------------------------------------- a version-less entry expires

from registry_gen.errors import Forbidden  # noqa: E402
from registry_gen.meta import PackageMeta  # noqa: E402
from registry_gen.publish import STAGE_TTL_SECONDS, Actor, PackageState, apply_create, apply_stage, authorize  # noqa: E402

OPENED = "2026-01-01T00:00:00.000Z"
WITHIN = "2026-01-01T23:59:00.000Z"
AFTER = "2026-01-02T00:00:01.000Z"
SQUATTER = Actor("squatter", account_id="acct-squatter")
NEWCOMER = Actor("newcomer", account_id="acct-newcomer")


def _open_entry() -> PackageMeta:
    meta = apply_create(PackageState("free-name", PackageMeta(name="free-name"), frozenset(), OPENED), SQUATTER, OPENED)
    assert meta is not None
    return meta


def test_an_open_entry_holds_the_name_only_for_the_staging_lifetime() -> None:
    assert STAGE_TTL_SECONDS == 24 * 3600
    meta = _open_entry()
    with pytest.raises(Forbidden):
        authorize(PackageState("free-name", meta, frozenset(), WITHIN), NEWCOMER, "publish")
    later = PackageState("free-name", meta, frozenset(), AFTER)
    assert not later.is_held
    authorize(later, NEWCOMER, "publish")
    assert later.holders_after(NEWCOMER) == [{"name": "newcomer", "account": "acct-newcomer"}]


def test_re_sending_the_first_step_does_not_extend_the_hold() -> None:
    meta = _open_entry()
    again = apply_create(PackageState("free-name", meta, frozenset(), WITHIN), SQUATTER, WITHIN)
    assert again is not None and again.created == OPENED
    assert not PackageState("free-name", again, frozenset(), AFTER).is_held


def test_a_staged_version_holds_the_name_until_it_expires() -> None:
    meta = apply_stage(PackageState("free-name", _open_entry(), frozenset(), WITHIN), "1.0.0", "latest",
                       {"name": "free-name", "version": "1.0.0"}, SQUATTER, WITHIN)
    assert PackageState("free-name", meta, frozenset(), AFTER).is_held  # staged at WITHIN: live for 24 h more
    assert not PackageState("free-name", meta, frozenset(), "2026-01-03T00:00:00.000Z").is_held
