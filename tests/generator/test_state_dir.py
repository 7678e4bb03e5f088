"""The build's state lives beside the tree (OUT.state/), never in it: a static host serving the
tree as it is serves none of it; a tree built with the old layout (OUT/.registry-gen/) is moved
on the next build, its ledger (first-seen publish times, pinned versions) included."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.settings import Settings, load_settings
from tests.core.test_cli_errors import run
from tests.registry_api.helpers import tarball

STATE_NAMES = ("state.sqlite3", "ledger.sqlite3", "cache.sqlite3")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name, version in (("alpha", "1.0.0"), ("alpha", "1.1.0"), ("beta", "2.0.0")):
        (tmp_path / "content" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "content" / name / f"{name}-{version}.tgz").write_bytes(tarball(name, version))
    (tmp_path / "content" / "broken.tgz").write_bytes(b"not an archive")  # a refused archive, recorded in the state
    (tmp_path / "registry.yaml").write_text("base_url: http://127.0.0.1:4873/\n")
    return tmp_path


def times(public: Path) -> dict[str, dict[str, str]]:
    return {name: json.loads((public / name / "index.html").read_bytes())["time"] for name in ("alpha", "beta")}


@pytest.fixture
def http_server(folder: Path) -> Iterator[str]:
    """`python -m http.server -d public`, as the docs' simplest host, on an ephemeral port."""
    assert run(["build"], folder).returncode == 1  # broken.tgz is refused; the rest is built
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "-b", "127.0.0.1", "-d", str(folder / "public")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert process.stdout is not None
        found = re.search(r"port (\d+)", process.stdout.readline())
        assert found, "http.server did not say its port"
        yield f"http://127.0.0.1:{found.group(1)}/"
    finally:
        process.terminate()
        process.wait(timeout=20)


def status(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def test_a_plain_static_host_serves_no_state(folder: Path, http_server: str) -> None:
    state = folder / "public.state"
    assert {p.name for p in state.iterdir()} >= set(STATE_NAMES)
    assert not (folder / "public" / ".registry-gen").exists()
    for path in (p for p in state.rglob("*") if p.is_file()):
        relative = path.relative_to(state).as_posix()
        assert status(http_server + relative)[0] == 404
        assert status(http_server + ".registry-gen/" + relative)[0] == 404
    served = [p for p in (folder / "public").rglob("*") if p.is_file()]
    assert served and not [p for p in served if p.name in STATE_NAMES or "broken.tgz" in p.read_bytes().decode("latin-1")]
    code, listing = status(http_server)
    assert code == 200 and b"registry-gen" not in listing and b"state" not in listing
    assert status(http_server + "alpha/")[0] == 200  # the tree itself is served


def first_seen(ledger: Path) -> list[tuple[str, str, str]]:
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        return db.execute("SELECT name, version, stamp FROM first_seen ORDER BY name, version").fetchall()


def old_layout(folder: Path) -> list[tuple[str, str, str]]:
    """A tree as an earlier version left it: the state inside, at public/.registry-gen/."""
    assert run(["build"], folder).returncode == 1
    (folder / "public.state").rename(folder / "public" / ".registry-gen")
    return first_seen(folder / "public" / ".registry-gen" / "ledger.sqlite3")


def test_an_old_tree_is_migrated_keeping_first_seen_times(folder: Path) -> None:
    ledger = old_layout(folder)
    before = times(folder / "public")
    assert before["alpha"]["1.0.0"] and ledger
    built = run(["build"], folder)
    moved = [line for line in built.stderr.splitlines() if "moved the build state out of the tree" in line]
    assert len(moved) == 1 and "public.state" in moved[0], built.stderr
    assert not (folder / "public" / ".registry-gen").exists()
    assert first_seen(folder / "public.state" / "ledger.sqlite3") == ledger
    assert times(folder / "public") == before
    # The cache may be dropped at any time; the ledger alone brings the times back (the archives'
    # mtimes, which a build without the ledger would take, say something else now).
    for archive in (folder / "content").rglob("*.tgz"):
        os.utime(archive, (1_000_000_000, 1_000_000_000))
    (folder / "public.state" / "state.sqlite3").unlink()
    assert run(["build"], folder).returncode == 1
    assert times(folder / "public") == before
    assert "moved the build state" not in run(["build"], folder).stderr  # once


def test_an_old_state_next_to_a_new_one_is_kept_not_merged(folder: Path) -> None:
    ledger = old_layout(folder)
    assert run(["build"], folder).returncode == 1  # migrates
    (folder / "public" / ".registry-gen").mkdir()
    copy = (folder / "public.state" / "ledger.sqlite3").read_bytes()
    (folder / "public" / ".registry-gen" / "ledger.sqlite3").write_bytes(copy)  # an old copy comes back
    built = run(["build"], folder)
    kept = list((folder / "public.state").glob("from-tree-*/ledger.sqlite3"))
    assert len(kept) == 1 and kept[0].read_bytes() == copy and first_seen(kept[0]) == ledger
    assert not (folder / "public" / ".registry-gen").exists() and "kept it as" in built.stderr


def test_state_dir_setting_and_a_deleted_tree(folder: Path) -> None:
    # content_dir and out_dir named: their defaults are relative to the working folder, not the file.
    (folder / "registry.yaml").write_text("base_url: http://127.0.0.1:4873/\ncontent_dir: content\nout_dir: public\nstate_dir: var/build-state\n")
    settings = load_settings(folder / "registry.yaml")
    assert settings.state_folder == folder / "var" / "build-state"
    run_build(settings)
    assert (folder / "var" / "build-state" / "state.sqlite3").is_file() and not (folder / "public.state").exists()
    files = sorted(p.relative_to(folder / "public") for p in (folder / "public").rglob("*") if p.is_file())
    # The tree deleted on its own (state kept): the next build writes it all again.
    for path in sorted((folder / "public").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    run_build(settings)
    assert sorted(p.relative_to(folder / "public") for p in (folder / "public").rglob("*") if p.is_file()) == files


def test_default_state_folder_is_beside_the_tree() -> None:
    assert Settings(out_dir=Path("site/public")).state_folder == Path("site/public.state")
    assert Settings(out_dir=Path(".")).state_folder == Path(os.getcwd() + ".state")
