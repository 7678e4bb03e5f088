"""Watch mode on a real folder with real file system events, a real static server and real npm."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from registry_gen.build import build_lock
from registry_gen.errors import ConfigError
from registry_gen.settings import Settings
from registry_gen.watch import Watcher, _EventSink, is_relevant_path, wait_until_settled
from tests.support import Npm, make_tarball, poll, static_server

DEADLINE = 60.0


def settled(watcher: Watcher, condition: Callable[[], object], what: str) -> None:
    """Polls until `condition` holds with no build under way (a build writes the page after the JSON)."""
    poll(lambda: condition() and watcher.stats.phase == "idle", what)


def packument(settings: Settings, name: str) -> dict | None:
    try:
        return json.loads((settings.out_dir / name / "index.html").read_bytes())
    except (FileNotFoundError, ValueError):
        return None


def has_version(settings: Settings, name: str, version: str) -> bool:
    doc = packument(settings, name)
    return bool(doc and version in doc["versions"])


def errors_for(watcher: Watcher, fragment: str) -> list[str]:
    return [str(issue) for issue in watcher.stats.errors if fragment in issue.path]


@pytest.fixture
def served(settings: Settings) -> Iterator[Settings]:
    """Settings whose base_url is a real static server over the output folder."""
    settings.out_dir.mkdir(parents=True)
    with static_server(settings.out_dir) as url:
        yield dataclasses.replace(settings, base_url=url)


@pytest.fixture
def watcher(served: Settings) -> Iterator[Watcher]:
    with Watcher(served, settle_seconds=0.3, max_wait_seconds=20) as running:
        assert running.wait_for_builds(1, DEADLINE), "the first build did not finish"
        yield running
    assert running.stats.phase == "stopped"


@pytest.fixture
def staging(tmp_path: Path) -> Path:
    folder = tmp_path / "staging"
    folder.mkdir()
    return folder


@pytest.mark.slow
def test_a_dropped_archive_becomes_installable_with_npm(watcher: Watcher, staging: Path, tmp_path: Path) -> None:
    settings = watcher.settings
    archive = make_tarball(staging, "@drop/it.now_x-y", "1.0.0")
    # The usual way downloaders write: a temporary name, renamed when complete.
    partial = settings.content_dir / "incoming" / "it.tgz.part"
    partial.parent.mkdir()
    shutil.copyfile(archive, partial)
    partial.rename(partial.with_name("it.tgz"))
    settled(watcher, lambda: has_version(settings, "@drop/it.now_x-y", "1.0.0"), "@drop/it.now_x-y@1.0.0 in the tree")
    assert (settings.out_dir / "-/web/package/@drop/it.now_x-y/index.html").is_file()
    project = tmp_path / "project"
    project.mkdir()
    npm = Npm(tmp_path / "npm-home", settings.base_url)
    npm.run("install", "@drop/it.now_x-y@1.0.0", cwd=project)
    installed = json.loads((project / "node_modules/@drop/it.now_x-y/package.json").read_text())
    assert installed["version"] == "1.0.0"


def _installed_integrity(npm: Npm, project: Path, spec: str) -> str:
    project.mkdir()
    npm.run("install", spec, cwd=project)
    lock = json.loads((project / "package-lock.json").read_text())
    return lock["packages"][f"node_modules/{spec.rsplit('@', 1)[0]}"]["integrity"]


@pytest.mark.slow
def test_a_conflicting_archive_dropped_while_watching_never_replaces_the_live_version(
    watcher: Watcher, staging: Path, tmp_path: Path
) -> None:
    settings = watcher.settings
    original = settings.content_dir / "live-1.0.0.tgz"
    shutil.copy(make_tarball(staging, "live", "1.0.0", files={"index.js": "exports.v = 'original'"}), original)
    settled(watcher, lambda: has_version(settings, "live", "1.0.0"), "live@1.0.0")
    integrity = packument(settings, "live")["versions"]["1.0.0"]["dist"]["integrity"]
    impostor = make_tarball(staging / "other", "live", "1.0.0", files={"index.js": "exports.v = 'impostor'"})
    shutil.copy(impostor, settings.content_dir / "dropped-copy.tgz")  # beside the original
    settled(watcher, lambda: errors_for(watcher, "dropped-copy.tgz"), "the newcomer to be named")
    assert "already published" in errors_for(watcher, "dropped-copy.tgz")[0]
    shutil.copy(impostor, original)  # and over it
    settled(watcher, lambda: errors_for(watcher, "live-1.0.0.tgz"), "the overwritten archive to be named")
    assert packument(settings, "live")["versions"]["1.0.0"]["dist"]["integrity"] == integrity
    npm = Npm(tmp_path / "npm-home", settings.base_url)
    assert _installed_integrity(npm, tmp_path / "project", "live@1.0.0") == integrity
    assert "original" in (tmp_path / "project/node_modules/live/index.js").read_text()


def test_a_hundred_archives_at_once_are_a_few_builds(watcher: Watcher, staging: Path) -> None:
    settings = watcher.settings
    archives = [make_tarball(staging, f"bulk-{index:03d}", "1.0.0") for index in range(100)]
    builds_before = watcher.stats.builds
    for archive in archives:
        shutil.copy(archive, settings.content_dir / archive.name)
    settled(watcher, lambda: all(has_version(settings, f"bulk-{i:03d}", "1.0.0") for i in range(100)), "all 100 packages")
    builds = watcher.stats.builds - builds_before
    assert 1 <= builds <= 5, f"{builds} builds for one copy of 100 archives"
    shard = json.loads((settings.out_dir / "-/web/search/bu.json").read_bytes())  # every name starts "bulk"
    assert len(shard["packages"]) == 100
    assert watcher.stats.events >= 100  # it did see every file; it just did not build per file


def test_a_half_written_archive_is_never_published(watcher: Watcher, staging: Path) -> None:
    settings = watcher.settings
    data = make_tarball(staging, "half", "1.0.0", files={"index.js": os.urandom(64 * 1024).hex()}).read_bytes()
    target = settings.content_dir / "half-1.0.0.tgz"
    with open(target, "wb") as handle:
        handle.write(data[: len(data) // 2])
    settled(watcher, lambda: errors_for(watcher, "half-1.0.0.tgz"), "the watcher to report the half archive")
    assert packument(settings, "half") is None
    assert not (settings.out_dir / "half").exists()
    with open(target, "ab") as handle:
        handle.write(data[len(data) // 2 :])
    settled(watcher, lambda: has_version(settings, "half", "1.0.0"), "half@1.0.0 once complete")
    assert (settings.out_dir / "half/-/half-1.0.0.tgz").read_bytes() == data
    assert not errors_for(watcher, "half-1.0.0.tgz")


def test_a_broken_archive_leaves_the_tree_served(watcher: Watcher, staging: Path) -> None:
    settings = watcher.settings
    shutil.copy(make_tarball(staging, "good", "1.0.0"), settings.content_dir)
    settled(watcher, lambda: has_version(settings, "good", "1.0.0"), "good@1.0.0")
    served_before = (settings.out_dir / "good/index.html").read_bytes()
    (settings.content_dir / "broken-1.0.0.tgz").write_bytes(gzip.compress(b"this is not a tar archive" * 100))
    (settings.content_dir / "garbage.zip").write_bytes(b"PK\x03\x04 truncated")
    settled(watcher, lambda: errors_for(watcher, "broken-1.0.0.tgz") and errors_for(watcher, "garbage.zip"), "both bad files reported")
    assert watcher.running and watcher.stats.failed_builds == 0
    with urllib.request.urlopen(settings.base_url + "good/", timeout=30) as response:
        assert response.status == 200 and response.read() == served_before
    # Still alive and still building: the next good archive is published.
    shutil.copy(make_tarball(staging, "good", "1.1.0"), settings.content_dir)
    settled(watcher, lambda: has_version(settings, "good", "1.1.0"), "good@1.1.0 after the bad files")
    (settings.content_dir / "broken-1.0.0.tgz").unlink()
    settled(watcher, lambda: not errors_for(watcher, "broken-1.0.0.tgz"), "the removed bad file to stop being reported")


def test_deleting_archives_removes_versions_and_moves_latest(watcher: Watcher, staging: Path) -> None:
    settings = watcher.settings
    for version in ("1.0.0", "2.0.0"):
        make_tarball(settings.content_dir, "shrinking", version)
    settled(watcher, lambda: has_version(settings, "shrinking", "2.0.0") and has_version(settings, "shrinking", "1.0.0"), "both versions")
    assert packument(settings, "shrinking")["dist-tags"]["latest"] == "2.0.0"
    (settings.content_dir / "shrinking-2.0.0.tgz").unlink()
    settled(watcher, lambda: not has_version(settings, "shrinking", "2.0.0"), "2.0.0 to disappear")
    doc = packument(settings, "shrinking")
    assert doc["dist-tags"]["latest"] == "1.0.0" and list(doc["versions"]) == ["1.0.0"]
    assert not (settings.out_dir / "shrinking/-/shrinking-2.0.0.tgz").exists()
    page = (settings.out_dir / "-/web/package/shrinking/index.html").read_text()
    assert 'id="latest-version">1.0.0<' in page and "2.0.0" not in page
    (settings.content_dir / "shrinking-1.0.0.tgz").unlink()
    settled(watcher, lambda: not (settings.out_dir / "shrinking").exists(), "the package to disappear")
    assert not (settings.out_dir / "-/web/package/shrinking").exists()


def test_a_watch_build_waits_for_the_shared_build_lock(watcher: Watcher, staging: Path) -> None:
    settings = watcher.settings
    lock = build_lock(settings)
    with lock.acquire(timeout=30):
        make_tarball(settings.content_dir, "locked", "1.0.0")
        # The watcher says it waits for the lock we hold; a build that skipped the lock never would.
        poll(lambda: watcher.stats.phase == "waiting for the build lock", "the watcher to wait for the lock")
        assert packument(settings, "locked") is None
    settled(watcher, lambda: has_version(settings, "locked", "1.0.0"), "locked@1.0.0 after the lock is released")


def test_the_watcher_outlives_a_broken_template(served: Settings, tmp_path: Path) -> None:
    theme = tmp_path / "theme"
    theme.mkdir()
    settings = dataclasses.replace(served, template_dir=theme)
    make_tarball(settings.content_dir, "themed", "1.0.0")
    with Watcher(settings, settle_seconds=0.3) as watcher:
        assert watcher.wait_for_builds(1, DEADLINE)
        (theme / "index.html").write_text("{% for %}")
        poll(lambda: watcher.stats.failed_builds >= 1, "the failed build to be reported")
        report = watcher.stats.last_report
        assert report is not None and "index.html, line 1" in (report.failure or "")
        (theme / "index.html").write_text('{% extends "_base.html" %}{% block content %}<p id="ok">themed</p>{% endblock %}')
        settled(watcher, lambda: 'id="ok"' in (settings.out_dir / "-/web/index.html").read_text(), "the fixed theme to be used")
        assert watcher.running


def test_polling_mode_sees_changes_too(served: Settings, staging: Path) -> None:
    """--poll, for network shares that deliver no file system events."""
    with Watcher(served, settle_seconds=0.3, poll=True) as watcher:
        assert watcher.wait_for_builds(1, DEADLINE)
        shutil.copy(make_tarball(staging, "polled", "1.0.0"), served.content_dir)
        settled(watcher, lambda: has_version(served, "polled", "1.0.0"), "polled@1.0.0")
        (served.content_dir / "polled-1.0.0.tgz").unlink()
        settled(watcher, lambda: packument(served, "polled") is None, "polled to disappear")


def test_file_events_become_build_hints_and_folder_events_a_full_look(settings: Settings) -> None:
    from watchdog.events import DirMovedEvent, FileClosedNoWriteEvent, FileCreatedEvent, FileMovedEvent, FileOpenedEvent

    watcher = Watcher(settings)  # not started: only its bookkeeping is looked at
    sink = _EventSink(watcher)
    content = settings.content_dir.resolve()
    assert watcher._take_hints() is None  # the first build looks at everything
    watcher._last_full_scan = time.monotonic()
    sink.on_any_event(FileCreatedEvent(str(content / "a-1.0.0.tgz")))
    sink.on_any_event(FileMovedEvent(str(content / "b.tgz.part"), str(content / "b.tgz")))
    sink.on_any_event(FileCreatedEvent(str(content / ".hidden.tgz")))
    sink.on_any_event(FileOpenedEvent(str(content / "c.tgz")))  # the build reading: no change
    sink.on_any_event(FileClosedNoWriteEvent(str(content / "c.tgz")))
    assert watcher._take_hints() == [str(content / "a-1.0.0.tgz"), str(content / "b.tgz")]
    assert watcher.stats.events == 2
    sink.on_any_event(DirMovedEvent(str(settings.content_dir.parent / "elsewhere"), str(content / "batch")))
    assert watcher._take_hints() is None


def test_watch_refuses_an_output_folder_inside_content(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="must not be inside"):
        Watcher(dataclasses.replace(settings, out_dir=settings.content_dir / "public"))
    with pytest.raises(ConfigError, match="does not exist"):
        Watcher(dataclasses.replace(settings, content_dir=settings.content_dir / "missing"))


@pytest.mark.parametrize(
    ("relative", "is_directory", "expected"),
    [
        ("a-1.0.0.tgz", False, True),
        ("deep/er/A-1.0.0.TAR.GZ", False, True),
        ("pkg.zip", False, True),
        ("pkg/registry-meta.json", False, True),
        ("new-folder", True, True),
        (".a-1.0.0.tgz", False, False),
        (".hidden/a-1.0.0.tgz", False, False),
        ("a-1.0.0.tgz.part", False, False),
        ("a-1.0.0.tgz.crdownload", False, False),
        ("a-1.0.0.tgz~", False, False),
        ("a-1.0.0.tgz.tmp", False, False),
        ("notes.txt", False, False),
        (".git", True, False),
    ],
)
def test_which_paths_count(tmp_path: Path, relative: str, is_directory: bool, expected: bool) -> None:
    assert is_relevant_path(tmp_path / relative, tmp_path, is_directory=is_directory) is expected
    assert is_relevant_path(tmp_path.parent / "elsewhere.tgz", tmp_path) is False


def test_settling_waits_until_two_snapshots_agree() -> None:
    sizes = iter([10, 20, 30, 30, 30])  # a file still growing for the first snapshots
    pauses: list[float] = []

    def pause(seconds: float) -> bool:
        pauses.append(seconds)
        return False  # not stopping

    assert wait_until_settled(lambda: next(sizes), pause, settle_seconds=0.5, max_wait_seconds=60)
    assert pauses == [0.5, 0.5, 0.5]


def test_settling_gives_up_after_max_wait_and_on_stop() -> None:
    counter = iter(range(1000))
    now = iter(float(t) for t in range(1000))
    assert not wait_until_settled(lambda: next(counter), lambda s: False, settle_seconds=1, max_wait_seconds=5, clock=lambda: next(now))
    assert not wait_until_settled(lambda: 1, lambda s: True, settle_seconds=1, max_wait_seconds=5)


@pytest.mark.slow
def test_the_watch_command_builds_rebuilds_and_stops_on_sigterm(settings: Settings, staging: Path) -> None:
    settings.out_dir.mkdir()
    with static_server(settings.out_dir) as url:
        process = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "registry_gen", "watch", str(settings.content_dir), "--out",
             str(settings.out_dir), "--base-url", url, "--settle", "0.2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            poll(lambda: (settings.out_dir / "-/web/index.html").is_file() or process.poll() is not None, "the first build")
            assert process.poll() is None, process.communicate()
            (settings.content_dir / "bad.tgz").write_bytes(b"\x1f\x8b junk")
            shutil.copy(make_tarball(staging, "from-cli", "3.0.0"), settings.content_dir)
            page = settings.out_dir / "-/web/package/from-cli/index.html"
            poll(lambda: page.is_file() and has_version(settings, "from-cli", "3.0.0"), "from-cli@3.0.0 and its page")
            with urllib.request.urlopen(url + "-/web/package/from-cli/index.html", timeout=30) as response:
                assert b"npm install from-cli --registry=" + url.encode() in response.read()
        finally:
            process.send_signal(signal.SIGTERM)
            stdout, stderr = _stopped(process)
    assert process.returncode == 0, stderr
    assert "watching" in stdout and "build 1 (initial build)" in stdout and "rebuilt from-cli" in stdout
    assert "error: bad.tgz" in stderr
    assert "stopped after" in stdout


def test_a_stop_signal_that_lands_before_the_wait_is_kept_and_taken_by_it() -> None:
    """Held from start-up on, a SIGTERM sent while watch is still starting (or while the main
    thread is anywhere else) is kept pending and taken by the wait, never a handler run at a random
    point of the main thread (one that set an Event could hang on that Event's own lock)."""
    code = (
        "import os, signal\n"
        "from registry_gen.commands_watch import stop_signals_held, wait_for_stop_signal\n"
        "with stop_signals_held():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    print('still here')\n"
        "    print(int(wait_for_stop_signal()))\n"
        "print('mask restored:', signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, []))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["still here", str(int(signal.SIGTERM)), "mask restored: True"]


def _stopped(process: subprocess.Popen[str]) -> tuple[str, str]:
    """The output of a process sent SIGTERM. One that does not end within 60 s is sent SIGABRT,
    which makes `-X faulthandler` print every thread's stack: the failure then says where it hung
    (a CI run saw `watch` not stop once, with nothing to tell why)."""
    try:
        return process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        stdout, stderr = process.communicate(timeout=60)
        raise AssertionError(f"watch did not stop within 60 s of SIGTERM; its threads:\n{stderr}\n{stdout}") from None


def test_a_watch_build_purges_the_cache_in_front(served: Settings) -> None:
    """A hand-dropped archive is a change like a publish: the cache in front is told its paths."""
    from registry_gen.purge import PurgeSettings
    from tests.hosts.servers import recording_upstream

    with recording_upstream() as (port, records):
        settings = dataclasses.replace(served, purge=PurgeSettings(url=f"http://127.0.0.1:{port}{{path}}"))
        with Watcher(settings, settle_seconds=0.3, max_wait_seconds=20) as running:
            assert running.wait_for_builds(1, DEADLINE)
            make_tarball(settings.content_dir, "watched-purge", "1.0.0")
            settled(running, lambda: has_version(settings, "watched-purge", "1.0.0"), "the dropped version")
            poll(lambda: any(r.path == "/watched-purge" for r in list(records)), "the purge of its document")
    assert all(r.method == "PURGE" for r in records)
    assert "/watched-purge/-/watched-purge-1.0.0.tgz" in {r.path for r in records}
