"""Issue 26: a published version whose archive in content/ is damaged (unreadable, or refused) keeps
its served copy, document entry and tarball, and is reported by every build until its archive is
repaired (the original bytes put back) or removed (the deliberate way to remove a version)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from registry_gen.archive import build_npm_tarball
from registry_gen.build import BuildResult, run_build
from registry_gen.settings import Settings
from registry_gen.watch import Watcher
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball
from tests.support import make_tarball
from tests.watch.test_watch import DEADLINE, errors_for, settled

ARCHIVE = "demo-ms/demo-ms-2.0.0.tgz"
# What can happen to a file in content/: bytes that are no archive (a bad copy, a disk error), and
# an archive the build refuses (here: its package.json is not valid JSON).
DAMAGE: dict[str, Callable[[Path], None]] = {
    "random bytes": lambda path: path.write_bytes(os.urandom(path.stat().st_size)),
    "refused archive": lambda path: path.write_bytes(
        build_npm_tarball([("package.json", 0o644, b"{ not json"), ("index.js", 0o644, b"1;\n")])
    ),
}


def _served(settings: Settings) -> tuple[dict[str, Any], bytes]:
    document = json.loads((settings.out_dir / "demo-ms" / "index.html").read_bytes())
    return document, (settings.out_dir / "demo-ms" / "-" / "demo-ms-2.0.0.tgz").read_bytes()


def _published(settings: Settings) -> tuple[dict[str, Any], bytes, bytes]:
    make_tarball(settings.content_dir / "demo-ms", "demo-ms", "1.0.0")
    original = make_tarball(settings.content_dir / "demo-ms", "demo-ms", "2.0.0").read_bytes()
    assert run_build(settings).errors == []
    document, tarball = _served(settings)
    assert tarball == original and document["dist-tags"]["latest"] == "2.0.0"
    return document, tarball, original


def _reported(result: BuildResult) -> list[str]:
    return [str(issue) for issue in result.errors if issue.path == ARCHIVE]


def _kept_and_reported(settings: Settings, result: BuildResult, document: dict[str, Any], tarball: bytes) -> None:
    reports = _reported(result)
    assert any("demo-ms@2.0.0" in line and "put the original" in line for line in reports), result.errors
    assert _served(settings) == (document, tarball)


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_archive_keeps_the_published_version_until_repaired(settings: Settings, damage: str) -> None:
    document, tarball, original = _published(settings)
    DAMAGE[damage](settings.content_dir / ARCHIVE)
    _kept_and_reported(settings, run_build(settings), document, tarball)
    _kept_and_reported(settings, run_build(settings), document, tarball)  # every build, not only the first
    _kept_and_reported(settings, run_build(settings, changed=[ARCHIVE]), document, tarball)  # the write API's and watch's hint
    _kept_and_reported(settings, run_build(settings.with_updates(site_title="Full")), document, tarball)  # a full build
    (settings.content_dir / ARCHIVE).write_bytes(original)  # repaired
    assert run_build(settings.with_updates(site_title="Full")).errors == []
    assert _served(settings) == (document, tarball)


def test_a_full_build_that_first_sees_the_damage_keeps_the_version(settings: Settings) -> None:
    document, tarball, _ = _published(settings)
    DAMAGE["random bytes"](settings.content_dir / ARCHIVE)
    _kept_and_reported(settings, run_build(settings, full=True), document, tarball)
    _kept_and_reported(settings, run_build(settings), document, tarball)


def test_removing_a_damaged_archive_removes_the_version(settings: Settings) -> None:
    _published(settings)
    DAMAGE["random bytes"](settings.content_dir / ARCHIVE)
    run_build(settings)
    (settings.content_dir / ARCHIVE).unlink()
    result = run_build(settings)
    assert result.errors == []
    document = json.loads((settings.out_dir / "demo-ms" / "index.html").read_bytes())
    assert list(document["versions"]) == ["1.0.0"] and document["dist-tags"]["latest"] == "1.0.0"
    assert not (settings.out_dir / "demo-ms" / "-" / "demo-ms-2.0.0.tgz").exists()


def test_serves_startup_build_keeps_the_version_of_a_damaged_archive(tmp_path: Path) -> None:
    server = RegistryProcess(tmp_path)
    settings = Settings(content_dir=server.content, out_dir=server.out, data_dir=tmp_path / "data")
    server.content.mkdir()
    document, tarball, _ = _published(settings)
    DAMAGE["random bytes"](server.content / ARCHIVE)
    server.start()
    try:
        served = http("GET", server.base + "demo-ms", headers={"Accept": "application/json"}).json
        assert "2.0.0" in served["versions"] and served["dist-tags"]["latest"] == "2.0.0"
        reply = http("GET", served["versions"]["2.0.0"]["dist"]["tarball"])
        assert reply.status == 200 and reply.body == tarball
        assert any(ARCHIVE in line and "put the original" in line for line in server.output)
    finally:
        server.stop()


def test_watch_mode_keeps_the_version_of_an_archive_damaged_while_watching(settings: Settings) -> None:
    document, tarball, _ = _published(settings)
    with Watcher(settings, settle_seconds=0.3, max_wait_seconds=20) as watcher:
        assert watcher.wait_for_builds(1, DEADLINE), "the first build did not finish"
        DAMAGE["random bytes"](settings.content_dir / ARCHIVE)
        settled(watcher, lambda: any("put the original" in line for line in errors_for(watcher, ARCHIVE)), "the damage reported")
        assert _served(settings) == (document, tarball)


def test_unpublishing_a_version_whose_archive_is_damaged_removes_it(tmp_path: Path) -> None:
    """The damaged archive sits where an operator dropped it, not at the API's own path: an npm
    unpublish still removes it with the version (else the build would keep serving the version)."""
    server = RegistryProcess(tmp_path).start()
    try:
        token = add_user(server.base, "alice", "alice-password-1")
        for version in ("1.0.0", "2.0.0"):
            body = publish_body("demo-ms", version, tarball("demo-ms", version))
            assert http("PUT", server.base + "demo-ms", token=token, body=body).status == 201
        dropped = server.content / "incoming" / "demo-ms-2.0.0.tgz"
        dropped.parent.mkdir()

        def build() -> str:
            done = subprocess.run([sys.executable, "-m", "registry_gen", "build", str(server.content), "--out", str(server.out),
                                   "--base-url", server.base], capture_output=True, text=True, timeout=120)  # fmt: skip
            return done.stderr

        (server.content / ARCHIVE).replace(dropped)
        assert build() == ""  # the operator moved it: the same bytes, served from there
        DAMAGE["random bytes"](dropped)
        assert "incoming/demo-ms-2.0.0.tgz: demo-ms@2.0.0 was published from this archive" in build()
        revision = http("GET", server.base + "demo-ms").json["_rev"]
        assert http("DELETE", f"{server.base}demo-ms/-/demo-ms-2.0.0.tgz/-rev/{revision}", token=token).status == 200
        assert list(http("GET", server.base + "demo-ms").json["versions"]) == ["1.0.0"]
        assert not dropped.exists() and "demo-ms" not in build()
    finally:
        server.stop()
