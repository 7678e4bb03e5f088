"""Operator mistakes lose nothing: a wrong content path or an emptied folder never empties the tree."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from registry_gen.cli import main
from tests.support import make_tarball

BASE = "http://127.0.0.1:9/"


def _snapshot(tree: Path) -> dict[str, str]:
    """Every served file and its digest (the build's own state folder is not served)."""
    return {
        p.relative_to(tree).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(tree.rglob("*"))
        if p.is_file() and not p.relative_to(tree).as_posix().startswith(".registry-gen/")
    }


@pytest.fixture
def populated(tmp_path: Path) -> tuple[Path, Path]:
    content, out = tmp_path / "content", tmp_path / "public"
    for index in range(4):
        make_tarball(content, f"pkg-{index}", "1.0.0")
    assert main(["build", str(content), "--out", str(out), "--base-url", BASE]) == 0
    return content, out


def test_a_misspelt_content_folder_is_an_error_and_changes_nothing(
    populated: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    content, out = populated
    before = _snapshot(out)
    typo = content.parent / "contnet"
    assert main(["build", str(typo), "--out", str(out), "--base-url", BASE]) == 1
    err = capsys.readouterr().err
    assert f"content folder {typo} does not exist" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert _snapshot(out) == before


def test_a_build_that_would_remove_most_packages_stops_until_told_to_prune(
    populated: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    content, out = populated
    before = _snapshot(out)
    empty = content.parent / "elsewhere"
    empty.mkdir()  # an existing but wrong folder (or a copy that has not arrived yet)
    assert main(["build", str(empty), "--out", str(out), "--base-url", BASE]) == 1
    err = capsys.readouterr().err
    assert "would remove 4 of the 4 packages" in err and "--prune" in err
    assert _snapshot(out) == before
    # The state was not touched either: the right folder builds as a no-op.
    assert main(["build", str(content), "--out", str(out), "--base-url", BASE]) == 0
    assert "0 files written" in capsys.readouterr().out
    assert main(["build", str(empty), "--out", str(out), "--base-url", BASE, "--prune"]) == 0
    assert not (out / "pkg-0").exists()


def test_removing_a_few_packages_by_hand_needs_no_prune(populated: tuple[Path, Path]) -> None:
    content, out = populated
    (content / "pkg-0-1.0.0.tgz").unlink()
    assert main(["build", str(content), "--out", str(out), "--base-url", BASE]) == 0
    assert not (out / "pkg-0").exists() and (out / "pkg-1" / "index.html").is_file()


def test_packages_content_records_as_unpublished_may_all_go(populated: tuple[Path, Path]) -> None:
    content, out = populated
    for index in range(4):
        (content / f"pkg-{index}-1.0.0.tgz").unlink()
        meta = content / f"pkg-{index}" / "registry-meta.json"
        meta.parent.mkdir()
        meta.write_text(json.dumps({"name": f"pkg-{index}", "unpublished": {"1.0.0": "2026-01-01T00:00:00.000Z"}}))
    assert main(["build", str(content), "--out", str(out), "--base-url", BASE]) == 0
    assert not (out / "pkg-0").exists()
