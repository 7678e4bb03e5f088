"""The ledger (`<state_folder>/ledger.sqlite3`) keeps what no build can redo from content/: the bytes
each served version was published with, first-seen times and the signing keyring. The cache
beside it may be dropped at any time (deleted, corrupt, a schema it does not know); the ledger is
never dropped, and a state folder of the layout before it hands its facts over, losing nothing."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.errors import LedgerUnreadable
from registry_gen.publish import Actor
from registry_gen.settings import Settings
from registry_gen.state import open_state
from registry_gen.writes import WriteService
from tests.core.test_cli_errors import assert_one_line, run
from tests.registry_api.helpers import tarball

ALICE = Actor("alice", account_id="acct-alice")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    (tmp_path / "content").mkdir()
    return Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data",
                    base_url="http://127.0.0.1:9/")  # fmt: skip


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchall()


def _served(settings: Settings, name: str, version: str) -> tuple[bytes, str, str]:
    """The tree's tarball, and the integrity and sha1 its package document gives for it."""
    tarball_bytes = (settings.out_dir / name / "-" / f"{name}-{version}.tgz").read_bytes()
    dist = json.loads((settings.out_dir / name / "index.html").read_bytes())["versions"][version]["dist"]
    return tarball_bytes, dist["integrity"], dist["shasum"]


def _drop_cache(settings: Settings, how: str) -> None:
    if how == "deleted":
        for name in ("state.sqlite3", "cache.sqlite3"):
            for suffix in ("", "-wal", "-shm"):
                Path(f"{settings.state_folder / name}{suffix}").unlink(missing_ok=True)
    else:  # a schema this version does not know: the cache drops its tables and starts afresh
        with contextlib.closing(sqlite3.connect(settings.state_file)) as db:
            db.execute("PRAGMA user_version=99")


@pytest.mark.parametrize("how", ["deleted", "unknown schema"])
def test_a_dropped_cache_keeps_serving_the_published_bytes_of_an_overwritten_archive(settings: Settings, how: str) -> None:
    """Publish, overwrite the archive in content/ with a valid archive of the same name@version
    and other bytes, drop the cache, build: the tree still serves the published bytes (tarball and
    document integrity), and the build reports the overwritten archive."""
    original = tarball("pinned", "1.0.0")
    WriteService(settings).land_archive("pinned", original, ALICE)
    served = _served(settings, "pinned", "1.0.0")
    assert served[0] == original and served[2] == hashlib.sha1(original).hexdigest()
    key = settings.content_dir / "pinned" / "pinned-1.0.0.tgz"
    key.write_bytes(tarball("pinned", "1.0.0", description="other bytes, same name and version"))
    _drop_cache(settings, how)
    result = run_build(settings)
    assert _served(settings, "pinned", "1.0.0") == served
    assert [(issue.path, issue.package) for issue in result.errors] == [("pinned/pinned-1.0.0.tgz", "pinned")]
    assert "already published with other bytes" in result.errors[0].reason
    again = run_build(settings)  # every later build keeps it, and says so
    assert _served(settings, "pinned", "1.0.0") == served and [i.path for i in again.errors] == ["pinned/pinned-1.0.0.tgz"]


def _as_layout_before_the_ledger(settings: Settings) -> None:
    """The state folder as the release before the ledger left it: pins, times and the keyring in
    state.sqlite3 (schema 11: `live`, `times`, a `signing_keys` setting), first-seen times in
    first-seen.jsonl, and no ledger."""
    ledger = settings.state_folder / "ledger.sqlite3"
    pins = _rows(ledger, "SELECT name, version, shasum, record FROM pins")
    seen = _rows(ledger, "SELECT name, version, stamp FROM first_seen")
    keys = _rows(ledger, "SELECT public_keys FROM keyring")
    with contextlib.closing(sqlite3.connect(settings.state_file)) as db:
        db.execute("CREATE TABLE live (name TEXT NOT NULL, version TEXT NOT NULL, shasum TEXT NOT NULL, record TEXT NOT NULL,"
                   " PRIMARY KEY (name, version)) WITHOUT ROWID")  # fmt: skip
        db.execute("CREATE TABLE times (name TEXT, version TEXT, stamp TEXT NOT NULL, PRIMARY KEY (name, version)) WITHOUT ROWID")
        db.executemany("INSERT INTO live VALUES (?, ?, ?, ?)", pins)
        db.executemany("INSERT INTO times VALUES (?, ?, ?)", seen)
        db.executemany("INSERT INTO settings (key, value) VALUES ('signing_keys', ?)", keys)
        db.execute("PRAGMA user_version=11")
        db.commit()
    lines = [json.dumps({"name": n, "time": {v: t}}) + "\n" for n, v, t in seen]
    (settings.state_folder / "first-seen.jsonl").write_text("".join(lines) + '{"name": "torn', encoding="utf-8")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)


def test_a_state_folder_from_before_the_ledger_hands_over_everything(tmp_path: Path, settings: Settings) -> None:
    key = tmp_path / "keys" / "signing.pem"
    assert run(["keys", "generate", "--out", str(key)], tmp_path).returncode == 0
    signed = settings.with_updates(signing_key=key)
    for name, version, when in (("alpha", "1.0.0", 1_600_000_000), ("alpha", "1.1.0", 1_650_000_000), ("beta", "2.0.0", 1_700_000_000)):
        archive = settings.content_dir / name / f"{name}-{version}.tgz"
        archive.parent.mkdir(exist_ok=True)
        archive.write_bytes(tarball(name, version))
        os.utime(archive, (when, when))
    assert not run_build(signed).errors
    ledger = signed.state_folder / "ledger.sqlite3"
    before = {table: sorted(_rows(ledger, f"SELECT * FROM {table}")) for table in ("pins", "first_seen", "keyring")}
    assert len(before["pins"]) == 3 and len(before["first_seen"]) == 3 and before["keyring"]
    tree = {p: p.read_bytes() for p in sorted(signed.out_dir.rglob("*")) if p.is_file()}
    _as_layout_before_the_ledger(signed)
    for archive in signed.content_dir.rglob("*.tgz"):  # mtimes changed since: only the old files know the times
        os.utime(archive, (1_800_000_000, 1_800_000_000))
    with open_state(signed).journal():  # the ledger made from the old files alone, before any build re-pins
        pass
    assert {table: sorted(_rows(ledger, f"SELECT * FROM {table}")) for table in before} == before
    result = run_build(signed)
    assert not result.errors and result.rebuilt_packages == [] and result.written == []  # migrated in place
    assert {table: sorted(_rows(ledger, f"SELECT * FROM {table}")) for table in before} == before
    assert {p: p.read_bytes() for p in sorted(signed.out_dir.rglob("*")) if p.is_file()} == tree
    assert not (signed.state_folder / "first-seen.jsonl").exists()
    assert (signed.state_folder / "first-seen.jsonl.migrated").is_file()  # read once, left beside it
    tables = {row[0] for row in _rows(signed.state_file, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables.isdisjoint({"live", "times"}) and not _rows(signed.state_file, "SELECT 1 FROM settings WHERE key = 'signing_keys'")
    _drop_cache(signed, "deleted")  # and from now on the cache may go: the ledger brings it all back
    assert not run_build(signed).errors
    assert {p: p.read_bytes() for p in sorted(signed.out_dir.rglob("*")) if p.is_file()} == tree


def test_times_reach_the_ledger_only_when_the_build_commits(settings: Settings) -> None:
    theme = settings.state_folder.parent / "theme"
    theme.mkdir()
    (theme / "index.html").write_text("{% for %}")  # a template that does not compile: the build fails
    archive = settings.content_dir / "dated" / "dated-1.0.0.tgz"
    archive.parent.mkdir()
    archive.write_bytes(tarball("dated", "1.0.0"))
    with pytest.raises(Exception, match="index.html"):
        run_build(settings.with_updates(template_dir=theme))
    assert _rows(settings.state_folder / "ledger.sqlite3", "SELECT * FROM first_seen") == []
    assert not run_build(settings).errors
    assert [row[:2] for row in _rows(settings.state_folder / "ledger.sqlite3", "SELECT * FROM first_seen")] == [("dated", "1.0.0")]


def test_an_unreadable_ledger_stops_the_build_with_one_line_and_changes_nothing(tmp_path: Path, settings: Settings) -> None:
    (settings.content_dir / "kept").mkdir()
    (settings.content_dir / "kept" / "kept-1.0.0.tgz").write_bytes(tarball("kept", "1.0.0"))
    assert not run_build(settings).errors
    tree = {p: p.read_bytes() for p in sorted(settings.out_dir.rglob("*")) if p.is_file()}
    ledger = settings.state_folder / "ledger.sqlite3"
    for suffix in ("-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    ledger.write_bytes(b"not a database, but never dropped" * 200)
    (settings.content_dir / "kept" / "kept-1.1.0.tgz").write_bytes(tarball("kept", "1.1.0"))
    with pytest.raises(LedgerUnreadable, match="restore it from your backup"):
        run_build(settings)
    assert ledger.read_bytes().startswith(b"not a database")  # kept for whoever repairs it
    assert {p: p.read_bytes() for p in sorted(settings.out_dir.rglob("*")) if p.is_file()} == tree
    (tmp_path / "registry.yaml").write_text(f"content_dir: {settings.content_dir}\nout_dir: {settings.out_dir}\nbase_url: {settings.base_url}\n")
    assert_one_line(run(["build"], tmp_path), 1, "ledger.sqlite3 cannot be read", "restore it from your backup")


def test_the_journal_numbers_writes_in_the_order_they_became_done(any_state_settings: Settings) -> None:
    """A reader that has read up to a number never misses a write done later: a write left pending
    (a crash) and resolved after another one is numbered after it; an aborted one never shows."""
    from registry_gen.state import JournalEvent, open_state

    with open_state(any_state_settings).journal() as journal:
        first = journal.begin_write({"a/registry-meta.json": "0" * 64}, [JournalEvent("package:change", "a")], "alice", "id-a", "t1")
        second = journal.begin_write(
            {}, [JournalEvent("package:publish", "b", ("1.0.0",), {"dist-tags": {}})], "bob", None, "t2", who={"address": "192.0.2.7"}
        )
        third = journal.begin_write({}, [JournalEvent("package:publish", "c", ("1.0.0",))], "carol", None, "t3")
        assert journal.since(0) == [] and [w.id for w in journal.pending_writes()] == [first, second, third]
        journal.finish_write(second, done=True)
        read = journal.since(0)
        assert [(e.package, e.actor, e.time, e.who) for e in read] == [("b", "bob", "t2", {"address": "192.0.2.7"})]  # the audit log's who
        journal.finish_write(third, done=False)
        journal.finish_write(first, done=True)
        journal.finish_write(first, done=False)  # already finished: left as it is
        assert [(e.package, e.actor_id) for e in journal.since(read[-1].seq)] == [("a", "id-a")]
        assert [e.package for e in journal.since(0)] == ["b", "a"] and journal.pending_writes() == []
        assert journal.since(0, limit=1)[0].detail == {"dist-tags": {}}


def test_a_write_resolved_as_landed_names_every_file_of_its_package_for_the_readers_tree(settings: Settings) -> None:
    """A pending write resolved as landed may never have reached the readers' tree (its writer
    died before the bucket upload, or the bucket refused it), while the work folder it is resolved
    from already holds the render: the package is rendered again and every file of it is named as
    written, changed or not, so a tree sink (registry_gen.objectstore.BucketTree) uploads it whole."""
    from registry_gen.state import JournalEvent
    from registry_gen.state.ledger import content_digest

    archive = settings.content_dir / "healed" / "healed-1.0.0.tgz"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(tarball("healed", "1.0.0"))
    run_build(settings)
    untouched = run_build(settings)
    assert list(untouched.written) == []  # nothing pending: an unchanged tree names nothing
    with open_state(settings).journal() as journal:
        journal.begin_write(
            {"healed/healed-1.0.0.tgz": content_digest(archive.read_bytes(), None)},
            [JournalEvent("package:publish", "healed", ("1.0.0",))], "alice", "acct-alice", "2026-11-29T00:00:00Z",
        )
    healed = run_build(settings)
    written = set(healed.written)
    assert {"healed/-/healed-1.0.0.tgz", "healed/index.html", "healed/abbreviated.json"} <= written, sorted(written)
    with open_state(settings).journal() as journal:
        assert journal.pending_writes() == [] and [e.package for e in journal.since(0)] == ["healed"]
