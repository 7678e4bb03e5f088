"""`registry-gen migrate` (issue 28, acceptance 4): a slice of the real-world corpus, accounts, tokens, groups
and a hook moved from the embedded default onto a real PostgreSQL and a bucket (moto's server,
a process on loopback), then back into a new embedded registry, by the real command each way.

Afterwards the tree built from the round-tripped registry equals the original's byte for byte, the
ledger's rows (pins, first-seen times, keyring, writes, journal with its numbers, import origins) are the same, a
token made before authenticates on PostgreSQL and after the return, the hook's secret opens with
the shared key, and the source was never touched."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from registry_gen.build import run_build
from registry_gen.hooks.secrets import KEY_FILE, SecretBox, secret_box
from registry_gen.importers.origins import FileMark, OriginLedger, OriginRecord
from registry_gen.publish import Actor
from registry_gen.settings import Settings, load_settings
from registry_gen.writes import WriteService
from tests.hosts.servers import free_port, stop_process, wait_for_api
from tests.migrate.conftest import migrate, write_config
from tests.realworld.corpus import Corpus, ensure_corpus, odd_packages, split_spec
from tests.registry_api.helpers import tarball
from tests.storage.s3servers import make_bucket, s3_credentials, s3_server
from tests.user_api.conftest import FAST_HASHER
from user_api.hooks_service import hook_store
from user_api.store import open_user_store

BUCKET = "moved"
HOOK_SECRET = "the-hook-secret-of-alice"
LEDGER_ROWS = {
    "pins": "name, version, shasum, record", "first_seen": "name, version, stamp", "keyring": "id, public_keys",
    "writes": "id, status, started, actor, actor_id, files, events, who",
    "journal": "seq, write_id, time, actor, actor_id, kind, package, versions, detail, who",
    "import_origins": "name, origin, files",
}  # fmt: skip


def corpus_slice(corpus: Corpus, content: Path) -> int:
    """Copies a slice of the real-world corpus into `content`; the number of tarballs copied.

    Byte equality of the whole tree holds on any slice, and the migration's cost grows with the
    number of tarballs (each one goes to the bucket and back): so the packages of the odd shapes
    (odd.json: legacy upper-case name, scoped with a foreign top folder, `main: false`...) and the
    first 30 with several versions (pins, dist-tags, first-seen times to order), not all 1,200."""
    versions = Counter(entry.name for entry in corpus.entries)
    chosen = {split_spec(spec)[0] for spec in odd_packages()} | set(sorted(n for n, count in versions.items() if count > 1)[:30])
    entries = [entry for entry in corpus.entries if entry.name in chosen]
    for entry in entries:
        target = content / entry.relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(corpus.content / entry.relpath, target)  # copy2: the files keep their times
    return len(entries)


def tree(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def fingerprint(*paths: Path) -> dict[str, str]:
    """Every file under `paths` (the source's stores) by its bytes' digest. SQLite's own `-wal` and
    `-shm` files are left out: a reader of a database in WAL mode, read-only too, makes them."""
    files = [p for f in paths for p in ([f] if f.is_file() else sorted(f.rglob("*"))) if p.is_file()]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if not p.name.endswith(("-wal", "-shm"))}


def ledger_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
        return {table: db.execute(f"SELECT {columns} FROM {table} ORDER BY 1, 2").fetchall() for table, columns in LEDGER_ROWS.items()}


def users_and_hook(settings: Settings) -> dict[str, str]:
    """Two accounts (one admin), a token each, groups, a hook with a sealed secret: what must survive."""
    store = open_user_store(settings, hasher=FAST_HASHER)
    try:
        alice = store.create_user("alice", "correct horse battery", role="admin")
        bob = store.create_user("bob", "another long password", email="bob@example.test")
        alice_token, _ = store.create_token(alice.id)
        bob_token, _ = store.create_token(bob.id, readonly=True, cidr=["127.0.0.1/32"], description="ci")
        store.change_groups(bob.id, add=["builders", "readers"])
        cipher = secret_box(settings, create=True).seal(HOOK_SECRET)
        hook_store(store).create_hook(alice.id, "package", "moved-pkg", "http://203.0.113.9/hook", cipher, limit=10)
    finally:
        store.close()
    return {"alice": alice_token, "bob": bob_token}


def whoami_through_api(config: Path, token: str) -> str:
    """The token's account as a real `registry-gen api` process on `config` answers `/-/whoami`."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    with open(config.parent / f"api-{port}.log", "w") as log:
        api = subprocess.Popen([sys.executable, "-m", "registry_gen", "api", "--config", str(config), "--host", "127.0.0.1",
                                "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_for_api(port, api, deadline=60)
            request = urllib.request.Request(f"http://127.0.0.1:{port}/-/whoami", headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, timeout=20) as answer:
                return str(json.loads(answer.read())["username"])
        finally:
            stop_process(api)


def check_accounts(settings: Settings, tokens: dict[str, str], key: str) -> None:
    store = open_user_store(settings, hasher=FAST_HASHER)
    try:
        for name, token in tokens.items():
            user = store.authenticate(token)
            assert user is not None and user.username == name
        assert store.verify_password("bob", "another long password") is not None
        assert store.groups_of(store.get_by_username("bob").id) == frozenset({"builders", "readers"})  # type: ignore[union-attr]
        (hook,) = hook_store(store).stored_hooks()
        assert SecretBox(key).open(hook.secret_cipher) == HOOK_SECRET
    finally:
        store.close()


def test_the_corpus_and_its_accounts_go_to_postgresql_and_a_bucket_and_back_unchanged(tmp_path: Path, database: str) -> None:
    original_config = write_config(tmp_path / "a")
    original = load_settings(original_config)
    tarballs = corpus_slice(ensure_corpus(), original.content_dir)
    assert not run_build(original).errors
    WriteService(original).land_archive("moved-pkg", tarball("moved-pkg", "1.0.0"), Actor("alice", account_id="acct"))
    tokens = users_and_hook(original)
    imported = OriginRecord("lodash", "https://registry.npmjs.org/", {"lodash/lodash-4.17.21.tgz": FileMark(1, "sha512-x", 2)})
    OriginLedger(original).write(imported)
    key = (original.data_dir / KEY_FILE).read_text().strip()
    before_tree, before_rows = tree(original.out_dir), ledger_rows(original.state_folder / "ledger.sqlite3")
    assert len(before_rows["pins"]) == tarballs + 1 and before_rows["journal"] and before_rows["import_origins"]  # the slice, a publish, an import
    untouched = fingerprint(original.content_dir, original.data_dir, original.state_folder / "ledger.sqlite3")

    with s3_credentials(), s3_server("moto", tmp_path / "s3") as server:
        make_bucket(server.endpoint, BUCKET)
        out = migrate(original_config, "--to", "postgres", "--database-url", database,
                      "--storage", f"s3://{BUCKET}/registry", "--storage-endpoint-url", server.endpoint)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert f"storage: s3://{BUCKET}/registry" in out.stdout and "database_url: postgresql://" in out.stdout
        assert f"secret_key: <the text of {original.data_dir / KEY_FILE}>" in out.stdout
        assert fingerprint(original.content_dir, original.data_dir, original.state_folder / "ledger.sqlite3") == untouched
        moved = original.with_updates(database_url=database)
        check_accounts(dataclass_with_key(moved, key), tokens, key)
        on_postgres = write_config(tmp_path / "a", database_url=database, hooks={"secret_key": key})  # content stays local
        assert whoami_through_api(on_postgres, tokens["alice"]) == "alice"

        back_config = write_config(tmp_path / "b", database_url=database, storage=f"s3://{BUCKET}/registry",
                                   storage_endpoint_url=server.endpoint, hooks={"secret_key": key})  # fmt: skip
        out = migrate(back_config, "--to", "embedded")
        assert out.returncode == 0, out.stderr
    back_config.write_text(yaml.safe_dump({k: v for k, v in yaml.safe_load(back_config.read_text()).items()
                                           if k not in ("database_url", "storage", "storage_endpoint_url")}))  # as the report says
    back = load_settings(back_config)
    assert ledger_rows(back.state_folder / "ledger.sqlite3") == before_rows  # first-seen times, pins, journal numbers
    assert not run_build(back).errors
    after_tree = tree(back.out_dir)
    assert sorted(after_tree) == sorted(before_tree)
    assert after_tree == before_tree
    check_accounts(dataclass_with_key(back, key), tokens, key)
    assert whoami_through_api(back_config, tokens["alice"]) == "alice"
    assert OriginLedger(back).read("lodash") == imported  # a later import decides as it would have


def dataclass_with_key(settings: Settings, key: str) -> Settings:
    import dataclasses

    return dataclasses.replace(settings, hooks=dataclasses.replace(settings.hooks, secret_key=key))
