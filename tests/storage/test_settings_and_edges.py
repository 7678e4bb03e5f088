"""The content store as the operator configures it (registry.yaml, $REGISTRY_STORAGE, boto3's
endpoint variable) and as the web edge reports it (503 with Retry-After when the store is down)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import webtest

from registry_gen.cli import main
from registry_gen.errors import ConfigError
from registry_gen.settings import Settings, load_settings
from registry_gen.storage import FolderStorage, S3Location, S3Storage, archive_key, open_content_storage
from tests.registry_api.helpers import publish_body, tarball
from tests.storage.conftest import BUCKET, Servers
from tests.storage.s3servers import client, distinct_free_ports, s3_credentials


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("storage: http://bucket/x\n", "storage must be s3://BUCKET or s3://BUCKET/PREFIX"),
        ("storage: s3://Bad_Bucket/x\n", "'Bad_Bucket' is not a bucket name"),
        ("storage: s3://bucket/a/../b\n", "the prefix 'a/../b' has an empty or dot segment"),
        ("storage: 42\n", "storage must be a string such as s3://BUCKET/PREFIX, got int 42"),
        ("storage: s3://bucket\nstorage_endpoint_url: ftp://x\n", "storage_endpoint_url must be an http(s) URL"),
        ("storage_endpoint_url: http://127.0.0.1:9000\n", "storage_endpoint_url is set but storage is not"),
        ("storage: s3://bucket\nstorage_conditional_writes: maybe\n", "storage_conditional_writes must be auto, true or false"),
        ("tree: s3://bucket/tree\n", "tree is set but storage is not"),
        ("storage: s3://bucket\ntree: s3://Bad_Bucket\n", "'Bad_Bucket' is not a bucket name"),
    ],
)
def test_bad_storage_settings_are_one_line_naming_the_file_and_key(tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(config)
    assert main(["build", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:") and str(config) in err and message in err


@pytest.mark.slow
def test_the_settings_open_a_bucket_from_the_file_the_environment_and_boto3s_endpoint_variable(
    tmp_path: Path, s3_servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = s3_servers.get("moto").endpoint
    config = tmp_path / "registry.yaml"
    config.write_text(f"storage: s3://{BUCKET}/from-file\nstorage_endpoint_url: {endpoint}\nstorage_conditional_writes: auto\n")
    for name in ("REGISTRY_STORAGE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    with s3_credentials():
        from_file = open_content_storage(load_settings(config), building=False)
        monkeypatch.setenv("REGISTRY_STORAGE", f"s3://{BUCKET}/from-env")
        config.write_text("storage_conditional_writes: false\n")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        from_env = open_content_storage(load_settings(config), building=False)
    assert isinstance(from_file, S3Storage) and isinstance(from_env, S3Storage)
    assert from_env.atomic_create is False and from_env.endpoint_url == endpoint
    key = archive_key("@acme/widget", "1.0.0")
    from_file.create(key, b"file")
    from_env.create(key, b"env")
    names = {item["Key"] for item in client(endpoint).list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert {f"from-file/{key}", f"from-env/{key}"} <= names


def test_without_storage_the_content_folder_is_the_store_and_a_bucket_is_refused_to_the_writers(tmp_path: Path) -> None:
    assert isinstance(open_content_storage(Settings(content_dir=tmp_path)), FolderStorage)
    with pytest.raises(ConfigError, match="this command builds from the local content folder"):
        open_content_storage(Settings(content_dir=tmp_path, storage="s3://content/x"))


@pytest.mark.slow
@pytest.mark.parametrize(("command", "said"), [("serve", "serves a local tree"), ("api", "set database_url")])
def test_serve_with_a_bucket_stops_at_start_with_one_line(tmp_path: Path, command: str, said: str) -> None:
    """`serve` serves a local tree, and `api` needs the state on a shared database: with content
    in a bucket either stops with one line before it takes a write."""
    (tmp_path / "registry.yaml").write_text("storage: s3://content/registry\n")
    proc = subprocess.run(
        [sys.executable, "-m", "registry_gen", command, "--host", "127.0.0.1", "--port", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and len(errors) == 1 and "storage: s3://content/registry" in errors[0], proc.stderr
    assert said in errors[0]
    assert "Traceback" not in proc.stderr


def test_a_store_that_is_down_answers_503_with_retry_after_and_keeps_nothing(tmp_path: Path) -> None:
    """The write API over S3Storage whose endpoint refuses connections (a stopped server)."""
    from user_api.registry_routes import create_registry_app
    from user_api.store import open_user_store

    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data",
                        base_url="http://registry.test/", signup="open")  # fmt: skip
    (port,) = distinct_free_ports(1)  # nothing listens there
    with s3_credentials():
        storage = S3Storage(S3Location(BUCKET, "registry"), endpoint_url=f"http://127.0.0.1:{port}", conditional_writes=True)
    users = open_user_store(settings)
    try:
        app = webtest.TestApp(create_registry_app(settings, users, storage=storage))
        token = app.put_json("/-/user/org.couchdb.user:sam", {"name": "sam", "password": "password-123", "email": "sam@example.com"}).json["token"]
        reply = app.put_json("/down-pkg", publish_body("down-pkg", "1.0.0", tarball("down-pkg", "1.0.0")),
                             headers={"Authorization": f"Bearer {token}"}, status=503)  # fmt: skip
        assert reply.headers["Retry-After"] == "5" and "retry shortly" in reply.json["error"]
        assert not (tmp_path / "public" / "down-pkg").exists()
    finally:
        users.close()

