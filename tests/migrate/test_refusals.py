"""`registry-gen migrate` refuses a target that holds anything, in one `error:` line, before it
writes a thing: a database with a ledger or accounts, a bucket with objects, a state folder with a
ledger. The source is never changed, and a refused move can be run again into an empty target."""

from __future__ import annotations

from pathlib import Path

import psycopg

from registry_gen.publish import Actor
from registry_gen.settings import load_settings
from registry_gen.writes import WriteService
from tests.migrate.conftest import migrate, write_config
from tests.registry_api.helpers import tarball
from tests.storage.s3servers import client, make_bucket, s3_credentials, s3_server
from tests.user_api.conftest import FAST_HASHER
from user_api.store import open_user_store

ALICE = Actor("alice", account_id="acct-alice")


def small_registry(folder: Path, package: str) -> Path:
    """A registry with one published package (pins, first-seen times, a journal) and one account."""
    config = write_config(folder)
    settings = load_settings(config)
    WriteService(settings).land_archive(package, tarball(package, "1.0.0"), ALICE)
    store = open_user_store(settings, hasher=FAST_HASHER)
    try:
        store.create_user(f"owner-of-{package}", "a long enough password")
    finally:
        store.close()
    return config


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def error_line(out: str) -> str:
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    return lines[0]


def test_a_database_holding_a_registry_is_refused_and_left_as_it_was(tmp_path: Path, database: str) -> None:
    first = small_registry(tmp_path / "first", "first-pkg")
    assert migrate(first, "--to", "postgres", "--database-url", database).returncode == 0
    held = rows(database, "SELECT name, version, shasum FROM pins"), rows(database, "SELECT seq, package FROM journal"), rows(database, "SELECT username FROM users")
    assert held[0] == [("first-pkg", "1.0.0", held[0][0][2])] and held[2] == [("owner-of-first-pkg",)]

    second = small_registry(tmp_path / "second", "second-pkg")
    out = migrate(second, "--to", "postgres", "--database-url", database)
    assert out.returncode == 1
    line = error_line(out.stderr)
    assert "the target is not empty: it holds a ledger (the database), accounts (the database); nothing was copied" in line
    assert (rows(database, "SELECT name, version, shasum FROM pins"), rows(database, "SELECT seq, package FROM journal"),
            rows(database, "SELECT username FROM users")) == held  # fmt: skip


def test_a_bucket_holding_objects_is_refused_before_the_database_is_touched(tmp_path: Path, database: str) -> None:
    config = small_registry(tmp_path / "source", "bucket-pkg")
    with s3_credentials(), s3_server("moto", tmp_path / "s3") as server:
        make_bucket(server.endpoint, "busy")
        client(server.endpoint).put_object(Bucket="busy", Key="registry/somebody/registry-meta.json", Body=b"{}")
        out = migrate(config, "--to", "postgres", "--database-url", database, "--storage", "s3://busy/registry",
                      "--storage-endpoint-url", server.endpoint)  # fmt: skip
        assert out.returncode == 1
        assert "it holds content (s3://busy/registry)" in error_line(out.stderr)
        listed = client(server.endpoint).list_objects_v2(Bucket="busy")["Contents"]
        assert [item["Key"] for item in listed] == ["registry/somebody/registry-meta.json"]
    assert rows(database, "SELECT to_regclass('registry_ledger_steps'), to_regclass('users')") == [(None, None)]


def test_moving_back_into_a_folder_holding_a_ledger_is_refused(tmp_path: Path, database: str) -> None:
    """The original's ledger stays where it was after a move: moving back onto it would mix two
    histories (the database's may have gone on), so the operator names other folders."""
    config = small_registry(tmp_path / "original", "kept-pkg")
    assert migrate(config, "--to", "postgres", "--database-url", database).returncode == 0
    settings = load_settings(config)
    ledger = settings.state_folder / "ledger.sqlite3"
    before = ledger.read_bytes()
    on_postgres = write_config(tmp_path / "original", database_url=database)
    out = migrate(on_postgres, "--to", "embedded")
    assert out.returncode == 1
    assert f"it holds a ledger ({ledger})" in error_line(out.stderr)
    assert ledger.read_bytes() == before
    elsewhere = tmp_path / "elsewhere"
    out = migrate(on_postgres, "--to", "embedded", "--state-dir", str(elsewhere / "state"), "--data-dir", str(elsewhere / "data"))
    assert out.returncode == 0, out.stderr
    assert "state_dir: " in out.stdout and "data_dir: " in out.stdout  # the lines to set name the new folders


def test_options_that_do_not_fit_the_direction_are_one_error_line(tmp_path: Path) -> None:
    config = write_config(tmp_path / "any")
    out = migrate(config, "--to", "postgres")
    assert out.returncode == 1 and "--to postgres takes --database-url" in error_line(out.stderr)
    out = migrate(config, "--to", "embedded")
    assert out.returncode == 1 and "this registry is embedded already" in error_line(out.stderr)
    out = migrate(config, "--to", "postgres", "--database-url", "mysql://x")
    assert out.returncode == 1 and "--database-url must start with postgresql://" in error_line(out.stderr)
