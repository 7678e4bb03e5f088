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
