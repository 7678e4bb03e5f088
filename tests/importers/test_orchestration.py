"""The orchestrators' guarantees on real files and a real local HTTP server: a tampered tarball is
reported and never imported, an interrupted run resumes from its staging folder, a re-run repairs a
missing meta, the client retries 5xx and names 401/unreachable, and htpasswd accounts of every
hash form log in and are re-hashed to argon2id."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import bcrypt
import pytest
from passlib.hash import apr_md5_crypt, des_crypt

from registry_gen.cli import main as registry_gen
from registry_gen.importers.client import RegistryClient
from registry_gen.importers.integrity import sri_sha512
from registry_gen.importers.model import ImportProblem, PackageRecord, VersionSource
from registry_gen.importers.run import Importer, import_verdaccio
from registry_gen.settings import Settings
from registry_gen.storage import archive_key, meta_key
from tests.support import make_tarball
from user_api.htpasswd import import_htpasswd, parse_htpasswd
from user_api.store import open_user_store


def settings_at(root: Path) -> Settings:
    return Settings(content_dir=root / "content", out_dir=root / "public", data_dir=root / "data")


def verdaccio_storage(root: Path, tamper: bool = False) -> Path:
    """Verdaccio's layout: storage/@s/b/{package.json,b-1.0.0.tgz,b-1.1.0.tgz}."""
    folder = root / "storage" / "@s" / "b"
    versions = {}
    for version in ("1.0.0", "1.1.0"):
        data = make_tarball(folder, "@s/b", version, filename=f"b-{version}.tgz").read_bytes()
        versions[version] = {"name": "@s/b", "version": version, "dist": {
            "integrity": sri_sha512(data), "shasum": hashlib.sha1(data).hexdigest(),
            "tarball": f"http://127.0.0.1:9/@s/b/-/@s/b-{version}.tgz"}}  # fmt: skip
    if tamper:
        (folder / "b-1.1.0.tgz").write_bytes((folder / "b-1.1.0.tgz").read_bytes() + b"\0")
    times = {"created": "2021-01-01T00:00:00.000Z", "modified": "2021-02-01T00:00:00.000Z",
             "1.0.0": "2021-01-01T00:00:00.000Z", "1.1.0": "2021-02-01T00:00:00.000Z"}  # fmt: skip
    doc = {"name": "@s/b", "versions": versions, "time": times, "dist-tags": {"latest": "1.1.0", "old": "1.0.0"}}
    (folder / "package.json").write_text(json.dumps(doc))
    return root / "storage"


def test_a_tampered_tarball_is_reported_and_not_imported(tmp_path: Path) -> None:
    settings = settings_at(tmp_path)
    summary = import_verdaccio(settings, verdaccio_storage(tmp_path, tamper=True))
    assert summary.imported == ["@s/b@1.0.0"]
    assert [(s.entry, s.error) for s in summary.skipped] == [("@s/b@1.1.0", True)]
    assert "sha512" in summary.skipped[0].reason
    assert not (settings.content_dir / archive_key("@s/b", "1.1.0")).exists()
    doc = json.loads((settings.out_dir / "@s/b" / "index.html").read_bytes())
    assert list(doc["versions"]) == ["1.0.0"] and doc["dist-tags"] == {"latest": "1.0.0", "old": "1.0.0"}


def test_versions_a_proxying_verdaccio_never_stored_are_skipped_not_failed(tmp_path: Path) -> None:
    storage = verdaccio_storage(tmp_path)
    (storage / "@s" / "b" / "b-1.0.0.tgz").unlink()  # a cached upstream document lists more than was fetched
    summary = import_verdaccio(settings_at(tmp_path), storage)
    assert summary.imported == ["@s/b@1.1.0"] and not summary.failed
    assert [s.entry for s in summary.skipped] == ["@s/b@1.0.0"] and "not stored by Verdaccio" in summary.skipped[0].reason


def test_a_rerun_writes_the_meta_an_interrupted_run_did_not(tmp_path: Path) -> None:
    settings = settings_at(tmp_path)
    storage = verdaccio_storage(tmp_path)
    import_verdaccio(settings, storage)
    (settings.content_dir / meta_key("@s/b")).unlink()  # as if killed between archives and meta
    summary = import_verdaccio(settings, storage)
    assert summary.imported == [] and len(summary.present) == 2
    doc = json.loads((settings.out_dir / "@s/b" / "index.html").read_bytes())
    assert doc["time"]["1.0.0"] == "2021-01-01T00:00:00.000Z" and doc["dist-tags"]["old"] == "1.0.0"


def test_a_missing_storage_folder_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ImportProblem, match="not a folder"):
        import_verdaccio(settings_at(tmp_path), tmp_path / "nowhere")


def test_staged_downloads_are_reused_and_bad_ones_fetched_again(tmp_path: Path) -> None:
    importer = Importer(settings_at(tmp_path))
    data = make_tarball(tmp_path / "src", "p", "1.0.0").read_bytes()
    source = VersionSource("p", "1.0.0", "http://127.0.0.1:9/p/-/p-1.0.0.tgz", integrity=sri_sha512(data))
    record = PackageRecord("p", (source,))
    fetched: list[str] = []

    def fetch(wanted: VersionSource) -> Path:
        fetched.append(wanted.version)
        target = importer.download_path(wanted)
        target.write_bytes(data)
        return target

    importer.fetch(record, fetch, stage=True)
    assert fetched == ["1.0.0"]

    def unreachable(wanted: VersionSource) -> Path:
        raise ImportProblem("network down")

    staged = tmp_path / "data" / "import-staging" / "p" / "p-1.0.0.tgz"
    reused = importer.fetch(record, unreachable, stage=True).archives["1.0.0"]  # from the staging folder
    assert reused.path == staged and reused.sha512 == sri_sha512(data)
    staged.write_bytes(b"half a download")
    fresh = importer.fetch(record, fetch, stage=True)
    assert fresh.archives["1.0.0"].path.read_bytes() == data and fetched == ["1.0.0", "1.0.0"]
    assert not (tmp_path / "content").exists()  # nothing lands before the verified whole
    importer.land(fresh)
    importer.build()
    assert (tmp_path / "content" / "p" / "p-1.0.0.tgz").read_bytes() == data
    assert not (tmp_path / "data" / "import-staging").exists()  # landed: the staged copy is gone


class _Flaky(http.server.BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self.hits.append(self.path)
        if self.path == "/secret":
            status, body = (200, b'{"versions": {}}') if self.headers.get("Authorization") == "Bearer t0k" else (401, b"{}")
        elif self.path == "/flaky" and self.hits.count("/flaky") < 3:
            status, body = 503, b"busy"
        else:
            status, body = (200, b'{"name": "flaky", "versions": {}}') if self.path == "/flaky" else (404, b"{}")
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


@contextmanager
def flaky_registry() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Flaky,), {"hits": hits}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", hits
    finally:
        server.shutdown()
        server.server_close()


def test_client_retries_busy_answers_and_names_401_404_and_unreachable() -> None:
    with flaky_registry() as (url, hits):
        client = RegistryClient(url, backoff=0.01)
        assert client.document("flaky")["name"] == "flaky" and hits.count("/flaky") == 3
        with pytest.raises(ImportProblem, match=r"^secret: .*answered 401 \(the registry wants a login: pass --token\)"):
            client.document("secret")
        assert RegistryClient(url, token="t0k").document("secret") == {"versions": {}}
        with pytest.raises(ImportProblem, match=r"^absent: .*answered 404"):
            client.document("absent")
        port = url.rsplit(":", 1)[1].strip("/")
    with pytest.raises(ImportProblem, match=r"^gone: cannot reach"):
        RegistryClient(f"http://127.0.0.1:{port}/", attempts=2, backoff=0.01).document("gone")


def test_htpasswd_accounts_of_every_hash_form_log_in_and_are_rehashed(tmp_path: Path) -> None:
    sha = "{SHA}" + base64.b64encode(hashlib.sha1(b"pw-sha").digest()).decode()
    lines = [
        "carol:" + bcrypt.hashpw(b"pw-bcrypt", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$") + ":autocreated 2024-01-01T00:00:00Z",
        f"dave:{des_crypt.hash('pw-des')}", f"erin:{sha}", f"frank:{apr_md5_crypt.hash('pw-apr')}",
        "gina:{PLAIN}pw-plain", "hank:$unknown$zzz", "not a line",
    ]  # fmt: skip
    path = tmp_path / "htpasswd"
    path.write_text("\n".join(lines) + "\n")
    settings = settings_at(tmp_path)
    created, skipped = import_htpasswd(settings, path)
    assert list(created) == ["carol", "dave", "erin", "frank", "gina"]
    assert [name for name, _ in skipped] == ["hank", "line 7"]
    store = open_user_store(settings)
    try:
        for name, password in {"carol": "pw-bcrypt", "dave": "pw-des", "erin": "pw-sha", "frank": "pw-apr", "gina": "pw-plain"}.items():
            assert store.verify_password(name, password + "x") is None
            assert store.verify_password(name, password) is not None
            assert store.verify_password(name, password) is not None  # still works after the re-hash
    finally:
        store.close()
    import sqlite3

    with sqlite3.connect(tmp_path / "data" / "users.sqlite3") as db:
        assert all(h.startswith("$argon2id$") for (h,) in db.execute("SELECT password_hash FROM users"))
    again, skipped_again = import_htpasswd(settings, path)
    assert again == {} and "exists already" in dict(skipped_again)["carol"]


def test_htpasswd_parser_keeps_hashes_whole() -> None:
    accounts, _ = parse_htpasswd("a:$2a$10$" + "x" * 53 + ":autocreated 2024-01-01T00:00:00.000Z\n")
    assert accounts == [("a", "$2a$10$" + "x" * 53)]


def test_tree_survives_a_second_import_from_another_copy(tmp_path: Path) -> None:
    """Importing the same storage from a copied folder finds everything present (idempotent)."""
    settings = settings_at(tmp_path)
    storage = verdaccio_storage(tmp_path)
    import_verdaccio(settings, storage)
    copy = tmp_path / "copy"
    shutil.copytree(storage, copy)
    assert import_verdaccio(settings, copy).imported == []


def test_cli_names_a_malformed_lockfile_and_refuses_a_non_empty_export_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text(f"content_dir: {tmp_path / 'content'}\nout_dir: {tmp_path / 'public'}\ndata_dir: {tmp_path / 'data'}\n")
    lock = tmp_path / "package-lock.json"
    lock.write_text('{"lockfileVersion": 3, "packages": ')
    assert registry_gen(["import", "lockfile", str(lock), "--config", str(config)]) == 1
    assert capsys.readouterr().err.startswith("error: package-lock.json: not valid JSON")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    assert registry_gen(["export", "verdaccio", str(occupied), "--config", str(config)]) == 1
    assert "is not an empty folder" in capsys.readouterr().err
    assert (occupied / "keep.txt").read_text() == "mine"
