"""A full build plans and writes every package from cursors over the state, a batch at a time, with
what it needs per package (the plans, who will link to whom) in temporary tables of the state: the
tree it writes, Dependents lists included, must be the one builds of a few packages at a time write."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from registry_gen.build import plan as plan_module
from registry_gen.build import packages
from registry_gen.build import write as write_phase
from registry_gen.build import NameLog, run_build
from registry_gen.errors import PruneRefused, RegistryError
from registry_gen.settings import Settings
from tests.support import make_tarball

NAMES = [f"web-{index:02d}" for index in range(9)]
FIXED_NS = 1_600_000_000 * 10**9


def _web(folder: Path) -> list[Path]:
    """Nine packages that link to each other across plan batches (and to a name not served)."""
    archives = []
    for index, name in enumerate(NAMES):
        dependencies = {NAMES[(index * 4 + 1) % 9]: "^1.0.0", NAMES[(index + 5) % 9]: "^1.0.0", "not-here": "^1.0.0"}
        archive = make_tarball(folder, name, "1.0.0", dependencies=dependencies)
        os.utime(archive, ns=(FIXED_NS + index, FIXED_NS + index))
        archives.append(archive)
    return archives


def _tree(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _settings(root: Path) -> Settings:
    return Settings(content_dir=root / "content", out_dir=root / "public", base_url="http://127.0.0.1:9/", data_dir=root / "data")


def _dependents(settings: Settings, name: str) -> list[str]:
    """The names in the Dependents section of the package's page."""
    page = (settings.out_dir / f"-/web/package/{name}/index.html").read_text()
    section = page.split('id="dependents"', 1)[1].split("</section>", 1)[0]
    return [n for n in [*NAMES, "web-new"] if f'href="../../package/{n}/index.html"' in section]


def test_a_full_build_in_small_batches_writes_what_builds_of_a_few_packages_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packages, "PLAN_BATCH", 2)  # five batches of plans for nine packages
    monkeypatch.setattr(NameLog, "KEPT", 4)
    full, steps = _settings(tmp_path / "full"), _settings(tmp_path / "steps")
    archives = _web(full.content_dir)
    result = run_build(full)
    assert not result.errors and result.rebuilt == 9 and result.skipped == 0
    assert result.rebuilt_packages == NAMES[:4]  # named up to NameLog.KEPT, counted all the same
    steps.content_dir.mkdir(parents=True)
    run_build(steps)
    for start in (0, 3, 6):  # three packages a build: each build writes several, by the incremental path
        for archive in archives[start : start + 3]:
            shutil.copy2(archive, steps.content_dir / archive.name)
        assert not run_build(steps).errors
    assert _tree(full.out_dir) == _tree(steps.out_dir)
    # web-01 is depended on by web-00 (0 * 4 + 1) and web-05 (5 + 5 = 10 -> 1): rendered once, complete.
    assert _dependents(full, "web-01") == ["web-00", "web-05"]


def test_a_forced_full_build_of_a_changed_state_writes_what_an_incremental_build_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package gone (others link to it), one new, one kept as it was (a second meta file for it):
    the full build removes, plans and links from the state's tables what the incremental build
    takes from the plans it holds, and brings the kept package's Dependents list up to date."""
    monkeypatch.setattr(packages, "PLAN_BATCH", 2)
    first = _settings(tmp_path / "first")
    archives = _web(first.content_dir)
    meta = {"name": "web-05", "dist-tags": {"latest": "1.0.0"}}
    (first.content_dir / "web-05").mkdir()
    (first.content_dir / "web-05" / "registry-meta.json").write_text(json.dumps(meta))
    assert not run_build(first).errors
    assert _dependents(first, "web-05") == ["web-00", "web-01"]  # 0 + 5 and 1 * 4 + 1
    incremental = _settings(tmp_path / "incremental")
    for folder in ("out_dir", "state_folder", "data_dir"):
        if getattr(first, folder).exists():
            shutil.copytree(getattr(first, folder), getattr(incremental, folder))
    forced = first.with_updates(content_dir=incremental.content_dir)  # one content/ for both
    shutil.move(first.content_dir, incremental.content_dir)
    (incremental.content_dir / archives[2].name).unlink()  # web-06 and web-07 link to it
    make_tarball(incremental.content_dir, "web-new", "1.0.0", dependencies={"web-05": "^1.0.0", "web-03": "^1.0.0"})
    (incremental.content_dir / "zz-web-05").mkdir()
    (incremental.content_dir / "zz-web-05" / "registry-meta.json").write_text(json.dumps(meta))
    by_steps, by_full = run_build(incremental), run_build(forced, full=True)
    assert [str(e) for e in by_full.errors] == [str(e) for e in by_steps.errors] == [
        "zz-web-05/registry-meta.json: a second registry-meta.json for web-05"
    ]
    assert by_full.rebuilt == 8 and by_steps.rebuilt < 8  # all but web-05 written again, or the ones the change touched
    assert _tree(forced.out_dir) == _tree(incremental.out_dir)
    assert not (forced.out_dir / "web-02").exists()
    assert _dependents(forced, "web-05") == ["web-00", "web-01", "web-new"]  # its page rendered again, from its document


def test_a_full_build_that_would_remove_most_packages_stops_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count of packages going is taken batch by batch as the plans are made, before anything is written."""
    monkeypatch.setattr(packages, "PLAN_BATCH", 2)
    settings = _settings(tmp_path)
    archives = _web(settings.content_dir)
    run_build(settings)
    tree = _tree(settings.out_dir)
    for archive in archives[:6]:
        archive.unlink()
    with pytest.raises(PruneRefused, match="would remove 6 of the 9 packages"):
        run_build(settings, full=True)
    assert _tree(settings.out_dir) == tree
    result = run_build(settings.with_updates(prune=True), full=True)
    assert result.packages == 3 and not (settings.out_dir / "web-00").exists()


def test_a_full_build_mends_the_dependents_lists_its_predictions_got_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages are rendered with Dependents lists predicted from the latest manifests; a package whose
    links came out otherwise has its targets' pages rendered again, so the tree is the same."""
    right = _settings(tmp_path / "right")
    _web(right.content_dir)
    assert not run_build(right).errors
    monkeypatch.setattr(packages, "PLAN_BATCH", 2)
    monkeypatch.setattr(packages.PackageWriting, "predicted_links", lambda phase, inputs: [])  # every prediction wrong
    wrong = _settings(tmp_path / "wrong")
    shutil.copytree(right.content_dir, wrong.content_dir)
    result = run_build(wrong)
    assert not result.errors
    assert _tree(wrong.out_dir) == _tree(right.out_dir)
    assert _dependents(wrong, "web-01") == ["web-00", "web-05"]


def _fail_writing(monkeypatch: pytest.MonkeyPatch, failing: str) -> object:
    """Makes every write of package `failing` fail as a package error does; returns the real writer."""
    write_package = write_phase._write_package

    def write(context: object, job: write_phase.PackageJob, local: object) -> object:
        if job.name == failing:
            raise RegistryError("the disk said no")
        return write_package(context, job, local)  # type: ignore[arg-type]

    monkeypatch.setattr(write_phase, "_write_package", write)
    return write_package


def test_a_full_build_takes_a_failed_package_out_of_the_dependents_lists_it_predicted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """web-01 links to web-05 and web-06, whose pages are rendered expecting it; its write fails, so
    they are rendered again without it. Each later build tries it again, with nothing changed in
    content/ (and reports it while it fails), so once the cause is gone it is written."""
    settings = _settings(tmp_path)
    _web(settings.content_dir)
    write_package = _fail_writing(monkeypatch, "web-01")
    result = run_build(settings)
    assert [str(e) for e in result.errors] == ["web-01: the disk said no"]
    assert "web-01" not in _dependents(settings, "web-05") + _dependents(settings, "web-06")
    assert _dependents(settings, "web-05") == ["web-00"] and _dependents(settings, "web-06") == ["web-08"]
    assert [str(e) for e in run_build(settings).errors] == ["web-01: the disk said no"]  # tried again
    monkeypatch.setattr(write_phase, "_write_package", write_package)
    assert not run_build(settings).errors
    assert (settings.out_dir / "web-01" / "index.html").is_file()
    with sqlite3.connect(settings.state_file) as db:
        assert db.execute("SELECT name FROM unwritten").fetchall() == []  # not tried again once written
    assert _dependents(settings, "web-05") == ["web-00", "web-01"] and _dependents(settings, "web-06") == ["web-01", "web-08"]


def test_a_package_whose_write_failed_and_whose_archive_went_is_not_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path)
    archives = _web(settings.content_dir)
    _fail_writing(monkeypatch, "web-01")
    assert run_build(settings).errors
    archives[1].unlink()  # web-01 is gone from content/ before it was ever written
    assert not run_build(settings).errors
    planned: list[str] = []
    plan = plan_module.plan_package
    monkeypatch.setattr(packages, "plan_package", lambda s, inputs, broken: planned.append(inputs.name) or plan(s, inputs, broken))
    assert not run_build(settings).errors and planned == []  # nothing left to try
