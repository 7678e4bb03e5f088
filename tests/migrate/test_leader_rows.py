"""What `registry-gen migrate` does with the rows only the PostgreSQL side keeps for its instances:
`content_folders` (the folder tokens that let a build skip a LIST) and `stale_listings` with the
-/all mark (pages writes left to the leader). Neither is copied, and neither needs to be: each
instance's start moves every token and syncs the whole bucket, so a target without token rows
skips no LIST it should make; and the first build of either target is a full one, which renders
every listing page and -/all from the content, so pages owed on the source are not lost. Tested
here both ways, with instances that write between the moves and no leader to render their pages.
Moving back once an instance had run also failed before: the tree bucket, under the content's
prefix by default, was copied into content/ (`-/all` both a file and a folder)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import yaml

from registry_gen import site
from registry_gen.build import run_build
from registry_gen.layout import ALL_DOCUMENT, PACKAGE_DOCUMENT
from registry_gen.objectstore import open_object_store
from registry_gen.refresher import IndexRefresher
from registry_gen.settings import load_settings
from registry_gen.site_search import search_keys
from registry_gen.writes import WriteService
from tests.migrate.conftest import migrate, write_config
from tests.migrate.test_refusals import small_registry
from tests.registry_api.test_publish_cost_postgres import ALICE, _upload
from tests.storage.s3servers import make_bucket, s3_credentials, s3_server

BUCKET = "moved"


def _count(url: str, table: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def _instance(folder: Path, database: str, storage: str, endpoint: str) -> WriteService:
    """An `api` instance's write service on its own work folder, started (no leader: its pages stay owed)."""
    config = write_config(folder, database_url=database, storage=storage, storage_endpoint_url=endpoint, index_refresh_seconds=3600)
    settings = load_settings(config)
    objects = open_object_store(settings)
    assert objects is not None
    objects.start(settings)
    return WriteService(settings, refresher=IndexRefresher(settings), objects=objects)


def test_neither_the_folder_tokens_nor_the_pages_owed_to_the_leader_need_to_move(tmp_path: Path, database: str) -> None:
    original = small_registry(tmp_path / "original", "moved-kit")
    storage = f"s3://{BUCKET}/registry"
    with s3_credentials(), s3_server("moto", tmp_path / "s3") as server:
        make_bucket(server.endpoint, BUCKET)
        out = migrate(original, "--to", "postgres", "--database-url", database, "--storage", storage, "--storage-endpoint-url", server.endpoint)
        assert out.returncode == 0, out.stderr
        assert _count(database, "content_folders") == 0 == _count(database, "stale_listings")  # none copied

        first = _instance(tmp_path / "a", database, storage, server.endpoint)
        second = _instance(tmp_path / "b", database, storage, server.endpoint)  # synced moved-kit before the first writes it
        first.publish(_upload(first.settings, "moved-kit", "2.0.0"), ALICE)
        second.publish(_upload(second.settings, "moved-kit", "3.0.0"), ALICE)
        assert second.objects is not None
        served = json.loads(second.objects.tree.bucket.read(f"moved-kit/{PACKAGE_DOCUMENT}") or b"{}")
        assert set(served["versions"]) == {"1.0.0", "2.0.0", "3.0.0"}  # the second listed the folder again
        first.publish(_upload(first.settings, "late-kit", "1.0.0"), ALICE)
        assert _count(database, "stale_listings") > 0  # its pages are owed to a leader that never ran

        back = write_config(tmp_path / "back", database_url=database, storage=storage, storage_endpoint_url=server.endpoint)
        out = migrate(back, "--to", "embedded")
        assert out.returncode == 0, out.stderr
    back.write_text(yaml.safe_dump({k: v for k, v in yaml.safe_load(back.read_text()).items()
                                    if k not in ("database_url", "storage", "storage_endpoint_url")}))  # fmt: skip
    settings = load_settings(back)
    assert not run_build(settings).errors  # the target's first build: a full one
    out_dir = settings.out_dir
    assert b"late-kit" in (out_dir / site.WEB_ROOT / "index.html").read_bytes()
    assert b"late-kit" in (out_dir / site.browse_page_path("la")).read_bytes()
    assert b"late-kit" in (out_dir / site.search_shard_path(search_keys({"name": "late-kit"})[0])).read_bytes()
    assert "late-kit" in json.loads((out_dir / ALL_DOCUMENT).read_bytes())
