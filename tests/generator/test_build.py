"""run_build against a temp content/ and out/: incremental, stable, atomic, and never stopped by one bad input."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from registry_gen.build import run_build
from registry_gen.settings import Settings
from tests.demo_packages import deterministic_zip
from tests.support import make_tarball

OLD_NS = 1_600_000_000 * 10**9  # 2020-09-13T12:26:40Z


def _doc(settings: Settings, name: str) -> dict[str, Any]:
    return json.loads((settings.out_dir / name / "index.html").read_bytes())


def _age(path: Path, ns: int = OLD_NS) -> Path:
    os.utime(path, ns=(ns, ns))
    return path


def test_first_build_writes_every_document(settings: Settings) -> None:
    # A README long enough that the full document passes write.GZIP_SIBLING_FROM and gets its sibling.
    make_tarball(settings.content_dir, "demo-a", "1.0.0", files={"README.md": "# demo-a\n" + "A line of the readme.\n" * 80})
    make_tarball(settings.content_dir / "scoped", "@demo/b", "1.0.0", dependencies={"demo-a": "^1.0.0"})
    deterministic = deterministic_zip({"name": "demo-zip", "version": "0.1.0"}, {"index.js": "1"})
    (settings.content_dir / "demo-zip.zip").write_bytes(deterministic)
    result = run_build(settings)
    assert result.errors == []
    assert (result.packages, result.versions, result.archives_read) == (3, 3, 3)
    assert sorted(result.rebuilt_packages) == ["@demo/b", "demo-a", "demo-zip"]
    for relative in (
        "demo-a/index.html",
        "demo-a/abbreviated.json",
        "demo-a/index.html.gz",
        "demo-a/-/demo-a-1.0.0.tgz",
        "@demo/b/index.html",
        "@demo/b/-/b-1.0.0.tgz",
        "demo-zip/-/demo-zip-0.1.0.tgz",
        "-/package/@demo/b/dist-tags",
        "-/all/index.html",
        "-/search.json",
        "-/ping",
        "-/web/index.html",
        "-/web/package/@demo/b/index.html",
    ):
        assert relative in result.written
        assert (settings.out_dir / relative).is_file()
    assert json.loads((settings.out_dir / "-/package/@demo/b/dist-tags").read_bytes()) == {"latest": "1.0.0"}
    assert set(json.loads((settings.out_dir / "-/all/index.html").read_bytes())) == {
        "_updated",
        "@demo/b",
        "demo-a",
        "demo-zip",
    }
    assert _doc(settings, "@demo/b")["versions"]["1.0.0"]["dependencies"] == {"demo-a": "^1.0.0"}


def test_a_rebuild_with_no_change_writes_nothing(settings: Settings) -> None:
    make_tarball(settings.content_dir, "demo-a", "1.0.0")
    make_tarball(settings.content_dir, "demo-a", "1.1.0")
    run_build(settings)
    before = {
        p: p.stat().st_mtime_ns for p in settings.out_dir.rglob("*") if p.is_file() and ".registry-gen" not in p.parts
    }
    again = run_build(settings)
    assert (again.written, again.removed, again.rebuilt_packages, again.archives_read) == ([], [], [], 0)
    assert again.skipped == 1
    after = {
        p: p.stat().st_mtime_ns for p in settings.out_dir.rglob("*") if p.is_file() and ".registry-gen" not in p.parts
    }
    assert before == after


def test_touching_an_archive_rereads_it_but_rewrites_nothing(settings: Settings) -> None:
    archive = make_tarball(settings.content_dir, "demo-a", "1.0.0")
    _age(archive)
    run_build(settings)
    _age(archive, OLD_NS + 5 * 10**9)
    again = run_build(settings)
    assert again.archives_read == 1
    assert again.written == []


def test_publish_times_are_stable_across_rebuilds(settings: Settings) -> None:
    archive = _age(make_tarball(settings.content_dir, "demo-a", "1.0.0"))
    run_build(settings)
    first = _doc(settings, "demo-a")["time"]
    assert first["1.0.0"] == "2020-09-13T12:26:40.000Z"  # the archive's mtime: the last fallback
    _age(archive, OLD_NS + 86_400 * 10**9)  # copied around, mtime changed: the first-seen time stays
    _age(make_tarball(settings.content_dir, "demo-a", "1.1.0"), OLD_NS + 3600 * 10**9)
    run_build(settings)
    second = _doc(settings, "demo-a")["time"]
    assert second["1.0.0"] == first["1.0.0"]
    assert second["created"] == first["created"] == "2020-09-13T12:26:40.000Z"
    assert second["1.1.0"] == second["modified"] == "2020-09-13T13:26:40.000Z"


def test_meta_time_wins_over_every_fallback(settings: Settings) -> None:
    _age(make_tarball(settings.content_dir, "demo-a", "1.0.0"))
    (settings.content_dir / "registry-meta.json").write_text(
        json.dumps({"name": "demo-a", "time": {"1.0.0": "2015-05-05T05:05:05.000Z"}})
    )
    run_build(settings)
    assert _doc(settings, "demo-a")["time"]["1.0.0"] == "2015-05-05T05:05:05.000Z"


def test_removing_an_archive_removes_the_version_and_moves_latest(settings: Settings) -> None:
    make_tarball(settings.content_dir, "demo-a", "1.0.0")
    newest = make_tarball(settings.content_dir, "demo-a", "1.1.0")
    make_tarball(settings.content_dir, "demo-other", "1.0.0")
    run_build(settings)
    assert _doc(settings, "demo-a")["dist-tags"]["latest"] == "1.1.0"
    newest.unlink()
    result = run_build(settings)
    doc = _doc(settings, "demo-a")
    assert list(doc["versions"]) == ["1.0.0"]
    assert doc["dist-tags"] == {"latest": "1.0.0"}
    assert "demo-a/-/demo-a-1.1.0.tgz" in result.removed
    assert not (settings.out_dir / "demo-a/-/demo-a-1.1.0.tgz").exists()
    assert result.rebuilt_packages == ["demo-a"]
    assert json.loads((settings.out_dir / "-/package/demo-a/dist-tags").read_bytes()) == {"latest": "1.0.0"}


def test_removing_the_last_archive_removes_the_package_folders(settings: Settings) -> None:
    only = make_tarball(settings.content_dir, "@demo/gone", "1.0.0")
    make_tarball(settings.content_dir, "demo-stays", "1.0.0")
    run_build(settings)
    only.unlink()
    result = run_build(settings)
    out = settings.out_dir
    assert not (out / "@demo").exists()  # the empty scope folder goes too
    assert not (out / "-/package/@demo").exists()
    assert not (out / "-/web/package/@demo").exists()
    assert "@demo/gone/index.html" in result.removed
    assert result.packages == 1
    assert set(json.loads((out / "-/all/index.html").read_bytes())) == {"_updated", "demo-stays"}
    assert b"@demo/gone" not in (out / "-/search.json").read_bytes()
    assert (out / "demo-stays/index.html").is_file()


def test_errors_are_collected_and_never_stop_the_rest(settings: Settings) -> None:
    content = settings.content_dir
    make_tarball(content, "demo-good", "1.0.0")
    (content / "truncated.tgz").write_bytes(make_tarball(content / "x", "demo-trunc", "1.0.0").read_bytes()[:-30])
    (content / "x" / "demo-trunc-1.0.0.tgz").unlink()
    (content / "notes.zip").write_bytes(b"this is not a zip")
    make_tarball(content, "de mo", "1.0.0", filename="space.tgz")  # no URL can carry it
    make_tarball(content, "Demo-Upper", "1.0.0", filename="upper.tgz")  # legacy capitals: hosted
    make_tarball(content / "one", "demo-twin", "1.0.0", files={"index.js": "1"})
    make_tarball(content / "two", "demo-twin", "1.0.0", files={"index.js": "2"})
    make_tarball(content / "same", "demo-good", "1.0.0")  # identical bytes twice is not a conflict
    (content / "broken-meta").mkdir()
    (content / "broken-meta" / "registry-meta.json").write_text("{oops")
    result = run_build(settings)
    by_path = {issue.path: issue.reason for issue in result.errors}
    assert set(by_path) == {
        "truncated.tgz",
        "notes.zip",
        "space.tgz",
        "one/demo-twin-1.0.0.tgz",
        "two/demo-twin-1.0.0.tgz",
        "broken-meta/registry-meta.json",
    }
    assert "corrupt" in by_path["truncated.tgz"]
    assert "may only contain" in by_path["space.tgz"]
    assert "different bytes" in by_path["one/demo-twin-1.0.0.tgz"]
    assert "two/demo-twin-1.0.0.tgz" in by_path["one/demo-twin-1.0.0.tgz"]
    assert result.packages == 2
    assert _doc(settings, "demo-good")["dist-tags"] == {"latest": "1.0.0"}
    assert _doc(settings, "Demo-Upper")["name"] == "Demo-Upper"
    assert not (settings.out_dir / "demo-twin").exists()


def _served(settings: Settings, name: str, version: str) -> tuple[dict, bytes]:
    doc = _doc(settings, name)
    tarball = (settings.out_dir / name / "-" / f"{name}-{version}.tgz").read_bytes()
    return doc["versions"][version]["dist"], tarball


def test_a_later_archive_with_other_bytes_never_replaces_a_published_version(settings: Settings) -> None:
    make_tarball(settings.content_dir / "one", "demo-twin", "1.0.0", files={"index.js": "1"})
    make_tarball(settings.content_dir / "one", "demo-twin", "1.1.0")
    run_build(settings)
    dist, tarball = _served(settings, "demo-twin", "1.0.0")
    document = (settings.out_dir / "demo-twin" / "index.html").read_bytes()
    make_tarball(settings.content_dir / "two", "demo-twin", "1.0.0", files={"index.js": "2"})
    result = run_build(settings)
    assert [e.path for e in result.errors] == ["two/demo-twin-1.0.0.tgz"]
    assert "already published" in result.errors[0].reason and dist["integrity"] in result.errors[0].reason
    assert result.refused == 1
    assert _served(settings, "demo-twin", "1.0.0") == (dist, tarball)
    assert (settings.out_dir / "demo-twin" / "index.html").read_bytes() == document
    # Reported by every build until it is removed; removing it clears the report.
    assert [e.path for e in run_build(settings).errors] == ["two/demo-twin-1.0.0.tgz"]
    (settings.content_dir / "two" / "demo-twin-1.0.0.tgz").unlink()
    assert run_build(settings).errors == []


def test_an_archive_copied_over_the_published_one_is_refused_and_the_tree_keeps_the_original(settings: Settings) -> None:
    original = make_tarball(settings.content_dir, "demo-twin", "1.0.0", files={"index.js": "1"})
    run_build(settings)
    dist, tarball = _served(settings, "demo-twin", "1.0.0")
    replacement = make_tarball(settings.content_dir / "elsewhere", "demo-twin", "1.0.0", files={"index.js": "2"})
    replacement.replace(original)  # `cp new.tgz content/demo-twin-1.0.0.tgz`
    result = run_build(settings)
    assert [e.path for e in result.errors] == [original.relative_to(settings.content_dir).as_posix()]
    assert _served(settings, "demo-twin", "1.0.0") == (dist, tarball)
    # A full rebuild (new settings) still serves the published bytes, not the newcomer's.
    rebuilt = run_build(settings.with_updates(site_title="Renamed"))
    assert [e.path for e in rebuilt.errors] == [original.relative_to(settings.content_dir).as_posix()]
    assert _served(settings, "demo-twin", "1.0.0") == (dist, tarball)


def test_a_tree_built_before_pinning_pins_what_it_serves(settings: Settings) -> None:
    make_tarball(settings.content_dir, "demo-twin", "1.0.0", files={"index.js": "1"})
    run_build(settings)
    served = _served(settings, "demo-twin", "1.0.0")
    with sqlite3.connect(settings.state_folder / "ledger.sqlite3") as db:  # a ledger made from a state without pins
        db.execute("DELETE FROM pins")
    make_tarball(settings.content_dir / "two", "demo-twin", "1.0.0", files={"index.js": "2"})
    assert [e.path for e in run_build(settings).errors] == ["two/demo-twin-1.0.0.tgz"]
    assert _served(settings, "demo-twin", "1.0.0") == served


def test_meta_file_drives_tags_deprecations_and_maintainers(settings: Settings) -> None:
    make_tarball(settings.content_dir, "demo-a", "1.0.0")
    make_tarball(settings.content_dir, "demo-a", "2.0.0")
    make_tarball(settings.content_dir, "demo-a", "3.0.0-rc.1")
    meta = settings.content_dir / "meta-anywhere" / "registry-meta.json"
    meta.parent.mkdir()
    meta.write_text(
        json.dumps(
            {
                "name": "demo-a",
                "dist-tags": {"latest": "1.0.0", "next": "3.0.0-rc.1"},
                "deprecated": {"2.0.0": "broken, use 1.0.0"},
                "maintainers": [{"name": "owner", "email": "owner@example.org"}],
            }
        )
    )
    run_build(settings)
    doc = _doc(settings, "demo-a")
    assert doc["dist-tags"] == {"latest": "1.0.0", "next": "3.0.0-rc.1"}
    assert doc["versions"]["2.0.0"]["deprecated"] == "broken, use 1.0.0"
    assert doc["maintainers"] == [{"name": "owner", "email": "owner@example.org"}]
    # Changing only the meta file rebuilds only that package's documents.
    meta.write_text(json.dumps({"name": "demo-a"}))
    result = run_build(settings)
    assert result.rebuilt_packages == ["demo-a"] and result.archives_read == 0
    assert _doc(settings, "demo-a")["dist-tags"] == {"latest": "2.0.0"}


def test_a_broken_meta_keeps_the_last_good_tree(settings: Settings) -> None:
    make_tarball(settings.content_dir, "demo-a", "1.0.0")
    make_tarball(settings.content_dir, "demo-a", "2.0.0")
    meta = settings.content_dir / "registry-meta.json"
    meta.write_text(json.dumps({"name": "demo-a", "dist-tags": {"latest": "1.0.0"}}))
    run_build(settings)
    meta.write_text('{"name": "demo-a", "dist-tags": [')
    # A full build (new settings, a key rotation) reads every meta file afresh: the broken one
    # must not publish its package without its dist-tags, as if it had none.
    for full in (False, True, False):
        result = run_build(settings, full=full)
        assert [e.path for e in result.errors] == ["registry-meta.json"]
        assert _doc(settings, "demo-a")["dist-tags"] == {"latest": "1.0.0"}
        assert result.packages == 1
    meta.write_text(json.dumps({"name": "demo-a", "dist-tags": {"latest": "2.0.0"}}))
    assert run_build(settings, full=True).errors == []
    assert _doc(settings, "demo-a")["dist-tags"] == {"latest": "2.0.0"}


def test_two_meta_files_for_one_package_are_reported(settings: Settings) -> None:
    make_tarball(settings.content_dir, "demo-a", "1.0.0")
    for folder in ("a", "b"):
        (settings.content_dir / folder).mkdir()
        (settings.content_dir / folder / "registry-meta.json").write_text(json.dumps({"name": "demo-a"}))
    result = run_build(settings)
    assert [e.path for e in result.errors] == ["b/registry-meta.json"]
    assert "second registry-meta.json" in result.errors[0].reason
    assert [e.path for e in run_build(settings).errors] == ["b/registry-meta.json"]  # every build reports it
    (settings.content_dir / "a" / "registry-meta.json").write_text('{"name": "demo-a", "dist-tags": [')
    assert [e.path for e in run_build(settings).errors] == ["a/registry-meta.json"]  # b is now the valid one
    (settings.content_dir / "a" / "registry-meta.json").write_text(json.dumps({"name": "demo-b"}))
    assert run_build(settings).errors == []  # renamed: one meta file per name again
    (settings.content_dir / "c").mkdir()
    (settings.content_dir / "c" / "registry-meta.json").write_text(json.dumps({"name": "demo-a"}))
    assert [e.path for e in run_build(settings).errors] == ["c/registry-meta.json"]
    (settings.content_dir / "b" / "registry-meta.json").unlink()
    assert run_build(settings).errors == []


def test_hidden_and_temporary_files_are_ignored(settings: Settings) -> None:
    make_tarball(settings.content_dir, "demo-a", "1.0.0")
    (settings.content_dir / ".upload.tgz").write_bytes(b"partial")
    (settings.content_dir / "demo-b-1.0.0.tgz.part").write_bytes(b"partial")
    (settings.content_dir / "notes.txt").write_text("not an archive")
    result = run_build(settings)
    assert result.errors == [] and result.packages == 1


def test_the_build_leaves_no_temp_files(settings: Settings) -> None:
    make_tarball(settings.content_dir, "demo-a", "1.0.0")
    run_build(settings)
    assert [p for p in settings.out_dir.rglob("*") if p.name.endswith(".tmp")] == []


def test_a_changed_base_url_rewrites_every_tarball_url(settings: Settings) -> None:
    make_tarball(settings.content_dir, "demo-a", "1.0.0")
    run_build(settings)
    moved = settings.with_updates(base_url="https://npm.example.org/sub/")
    result = run_build(moved)
    assert result.rebuilt_packages == ["demo-a"]
    tarball = _doc(moved, "demo-a")["versions"]["1.0.0"]["dist"]["tarball"]
    assert tarball == "https://npm.example.org/sub/demo-a/-/demo-a-1.0.0.tgz"
    assert "demo-a/-/demo-a-1.0.0.tgz" not in result.written  # the tarball's bytes did not change


def test_the_readme_is_capped_at_max_readme_bytes(tmp_path: Path) -> None:
    from registry_gen.settings import Limits

    content = tmp_path / "content"
    readme = "# Title\n" + "".join(f"line {n:05d} of a long readme\n" for n in range(400))  # about 11 KB
    make_tarball(content, "wordy", "1.0.0", files={"README.md": readme, "index.js": "1;\n"})
    settings = Settings(content_dir=content, out_dir=tmp_path / "public", limits=Limits(max_readme_bytes=2000))
    assert not run_build(settings).errors
    document = json.loads((settings.out_dir / "wordy/index.html").read_bytes())
    assert document["readme"] == readme[:2000]
    page = (settings.out_dir / "-/web/package/wordy/index.html").read_text()
    assert "line 00010 of" in page and "line 00399 of" not in page


def test_first_seen_times_from_mtimes_are_not_rounded_up(tmp_path: Path) -> None:
    """An archive dropped at …:20.9999999 s was first seen at …:20.999Z, never …:21.999Z."""
    content = tmp_path / "content"
    archive = make_tarball(content, "edge-time", "1.0.0")
    mtime_ns = 1_700_000_020_999_999_999  # 2023-11-14T22:13:40.999999999Z
    os.utime(archive, ns=(mtime_ns, mtime_ns))
    settings = Settings(content_dir=content, out_dir=tmp_path / "public")
    assert not run_build(settings).errors
    document = json.loads((settings.out_dir / "edge-time/index.html").read_bytes())
    assert document["time"]["1.0.0"] == "2023-11-14T22:13:40.999Z"


def test_a_failing_build_closes_its_database_connections(tmp_path: Path, monkeypatch: Any) -> None:
    """serve and watch run many builds in one process: a build that raises must not leak a connection."""
    import pytest

    from registry_gen.state import sqlite as build

    opened: list[Any] = []
    for name in ("ManifestCache", "SqliteSession"):  # the build session's class
        real = getattr(build, name)

        class Tracked(real):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.closed = False
                opened.append(self)

            def close(self) -> None:
                self.closed = True
                super().close()

        monkeypatch.setattr(build, name, Tracked)
    theme = tmp_path / "theme"
    theme.mkdir()
    (theme / "index.html").write_text("{% for %}")
    make_tarball(tmp_path / "content", "leaky", "1.0.0")
    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", template_dir=theme)
    with pytest.raises(Exception, match="index.html"):
        run_build(settings)
    assert len(opened) == 2 and all(c.closed for c in opened)
    assert opened[0].ledger.db is not None  # the session's ledger: closed with it (a closed connection refuses work)
    with pytest.raises(sqlite3.ProgrammingError):
        opened[0].ledger.db.execute("SELECT 1")


def test_first_seen_times_survive_a_corrupt_or_outdated_state(tmp_path: Path) -> None:
    """The state database may be dropped (corrupt, new schema); the first-seen times, which nothing
    can rebuild once the file's mtime changed, come back from the durable ledger beside it."""
    import sqlite3

    content = tmp_path / "content"
    archive = make_tarball(content, "dated", "1.0.0")
    first = 1_600_000_000_123_000_000  # 2020-09-13T12:26:40.123Z
    os.utime(archive, ns=(first, first))
    settings = Settings(content_dir=content, out_dir=tmp_path / "public")
    assert not run_build(settings).errors

    def served_time() -> str:
        return str(json.loads((settings.out_dir / "dated/index.html").read_bytes())["time"]["1.0.0"])

    assert served_time() == "2020-09-13T12:26:40.123Z"
    later = first + 86_400 * 10**9 * 400  # the same archive copied again (a restore, a sync): a new mtime
    os.utime(archive, ns=(later, later))
    settings.state_file.write_bytes(b"this is not a database" * 100)  # corrupt state
    for suffix in ("-wal", "-shm"):
        Path(str(settings.state_file) + suffix).unlink(missing_ok=True)
    assert not run_build(settings).errors
    assert served_time() == "2020-09-13T12:26:40.123Z"
    with sqlite3.connect(settings.state_file) as db:  # an older schema: the state is dropped again
        db.execute("PRAGMA user_version=1")
    assert not run_build(settings).errors
    assert served_time() == "2020-09-13T12:26:40.123Z"
    (content / archive.name).unlink()  # a version that left the registry is forgotten
    run_build(settings)
    make_tarball(content, "dated", "1.0.0")
    os.utime(archive, ns=(later, later))
    run_build(settings)
    assert served_time() != "2020-09-13T12:26:40.123Z"


def test_the_write_sides_state_view_is_read_only_and_sees_the_build(tmp_path: Path) -> None:
    """`BuildState.reading` (what a publish asks before its build) answers from the state the build
    wrote, cannot write, and opens a missing or outdated state the ordinary way."""
    from registry_gen.state.sqlite_cache import BuildState
    from registry_gen.state.sqlite_schema import SCHEMA_VERSION

    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public")
    make_tarball(tmp_path / "content" / "pkg", "pkg", "1.0.0")
    run_build(settings)
    view = BuildState.reading(settings.state_file)
    try:
        assert set(view.live_of("pkg")) == {"1.0.0"}
        try:
            view.db.execute("DELETE FROM packages")
        except sqlite3.OperationalError as exc:
            assert "readonly" in str(exc)
        else:
            raise AssertionError("the view could write")
    finally:
        view.close()
    with sqlite3.connect(settings.state_file) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION - 1}")
    migrated = BuildState.reading(settings.state_file)  # another schema: recreated, writable
    try:
        assert migrated.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        migrated.close()
    fresh = BuildState.reading(tmp_path / "elsewhere" / "state.sqlite3")
    fresh.close()
