"""Content and the built tree in a bucket (issue 28): two `registry-gen api` processes on one real
PostgreSQL and one real S3 server (moto's server mode, then SeaweedFS), each with its own EMPTY
work folder. Real npm publishes through A, then another version of the same package through B;
both are served from the tree bucket through a real nginx in front of it (the config of
`registry-gen host-config nginx --from-bucket`), to a real `npm install`; A's work folder wiped and A restarted serves and writes; `registry-gen verify` passes
on the bucket's tree; B restarted on its stale folder holds every file with the stat A's holds; with the bucket
stopped, a write gets a prompt 503."""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from registry_gen.hosting import public_read_policy

from tests.conftest import postgres_state_url
from tests.hosts.clients import CLIENTS, ClientRun, install_client
from tests.hosts.servers import free_port, nginx_server, stop_process
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import Api, postgres  # noqa: F401 - the module's PostgreSQL fixture
from tests.storage.s3servers import S3Server, client, make_bucket, s3_credentials, s3_server

pytestmark = pytest.mark.slow

BUCKET = "registry"
PREFIX = "reg"
TREE = f"{PREFIX}/_tree/"  # the tree's default place: beside the content, under `_tree`
CANARY = "canary.json"  # public, but outside the tree (and the content): no spelling of a URL may reach it
ABBREVIATED = {"Accept": "application/vnd.npm.install-v1+json"}  # what npm, pnpm and yarn ask an install's documents with


@dataclass
class Site:
    s3: S3Server
    reads: str  # nginx in front of the tree bucket: what npm installs from
    apis: list[Api]
    works: list[Path]  # each instance's work folder (content_dir and out_dir: a disposable cache)
    root: Path

    @functools.cached_property
    def client(self) -> Any:
        return client(self.s3.endpoint)

    def objects(self) -> dict[str, dict[str, Any]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=TREE)
        return {item["Key"][len(TREE) :]: item for page in pages for item in page.get("Contents", [])}

    def read(self, key: str) -> tuple[bytes, dict[str, Any]]:
        answer = self.client.get_object(Bucket=BUCKET, Key=TREE + key)
        return answer["Body"].read(), answer


def bucket_policy(*prefixes: str) -> str:
    """Anyone may read the objects under each prefix (the tree's, and a canary's outside it)."""
    statements = [json.loads(public_read_policy(BUCKET, prefix))["Statement"][0] | {"Sid": f"Read{i}"} for i, prefix in enumerate(prefixes)]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


@contextlib.contextmanager
def bucket_site(kind: str, database_url: str, root: Path, hosts: tuple[str, ...] = ("a", "b"), *, private: bool = False,
                extra: str = "", envs: tuple[dict[str, str], ...] = (),
                endpoint_of: Callable[[int, str], str] | None = None) -> Iterator[Site]:
    """One S3 server of `kind` holding the bucket, an api instance per host (own EMPTY work folder,
    all on `database_url`, `extra` appended to each registry.yaml), started, and nginx in front with
    the config `host-config nginx --from-bucket` emits, one `--api-upstream` per instance; with
    `private`, `--private-bucket` too and no bucket policy at all, so the bucket refuses anonymous reads;
    `envs`, each instance's own environment, in the order of `hosts` (e.g. REGISTRY_GEN_FAILPOINT);
    `endpoint_of(n, endpoint)`, the S3 endpoint instance n talks to (e.g. a proxy in front of it)."""
    reads_port = free_port()
    with s3_credentials(), s3_server(kind, root / "s3") as s3:
        make_bucket(s3.endpoint, BUCKET)
        if not private:  # readers are anonymous: the tree is public-read, and so is a canary outside it
            client(s3.endpoint).put_bucket_policy(Bucket=BUCKET, Policy=bucket_policy(TREE, CANARY))
        client(s3.endpoint).put_object(Bucket=BUCKET, Key=CANARY, Body=b'{"canary": true}', ContentType="application/json")
        apis, works = [], []
        for n, host in enumerate(hosts):
            (root / host).mkdir()
            works.append(root / host / "work")
            config = root / host / "registry.yaml"
            config.write_text(
                f"content_dir: work/content\nout_dir: work/public\ndata_dir: data\nbase_url: http://127.0.0.1:{reads_port}/\n"
                f"database_url: '{database_url}'\nsignup: open\nstorage: s3://{BUCKET}/{PREFIX}\n"
                f"storage_endpoint_url: {endpoint_of(n, s3.endpoint) if endpoint_of else s3.endpoint}\nindex_refresh_seconds: 1\n{extra}"
            )
            apis.append(Api(config, env=envs[n] if n < len(envs) else {}))
        # The emitted config: reads from the tree bucket, writes to any instance.
        origin = ["--config", str(apis[0].config), "--from-bucket", *(["--private-bucket"] if private else [])]
        origin += [arg for api in apis[1:] for arg in ("--api-upstream", f"127.0.0.1:{api.port}")]
        with nginx_server(root / "no-tree", root / "nginx", reads_port, f"127.0.0.1:{apis[0].port}", origin) as reads:
            try:
                for api in apis:
                    started(api)
                yield Site(s3, reads, apis, works, root)
            finally:
                for api in apis:
                    api.stop()


@pytest.fixture(params=["moto", "seaweedfs"])
def site(request: pytest.FixtureRequest, postgres: Any, tmp_path: Path) -> Iterator[Site]:  # noqa: F811 - the imported fixture
    with bucket_site(request.param, postgres_state_url(postgres), tmp_path) as found:
        yield found


def poll(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)  # polling a condition with a deadline
    return True


def stats(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def started(api: Api) -> Api:
    """Starts `api` and waits until it answers: it listens before its start (the sync from the
    bucket, the build, the upload) is over."""
    api.start()

    def answers() -> bool:
        try:
            return http("GET", api.base + "-/ping", timeout=10).status == 200
        except OSError:
            return False

    assert poll(answers, 120), "the instance never became ready"
    return api


def npm_publish(run: ClientRun, folder: Path, name: str, version: str) -> None:
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps({"name": name, "version": version, "main": "index.js"}))
    (folder / "index.js").write_text(f"module.exports = {json.dumps(version)};\n")
    run.publish(folder)


def npm_for(site: Site, api: Api, token: str, name: str) -> ClientRun:
    spec = CLIENTS["npm11"]
    run = ClientRun(spec, install_client(spec), site.root / name, api.base)
    (run.home / ".npmrc").write_text(f"//127.0.0.1:{api.port}/:_authToken={token}\n")
    return run


def served_versions(site: Site, name: str) -> dict[str, Any]:
    document = http("GET", site.reads + name).json
    return document["versions"]


def assert_tarballs_in_bucket(site: Site, name: str) -> None:
    """Every tarball the bucket's document names is in the bucket with the integrity it states."""
    document = json.loads(site.read(name)[0])
    for version, manifest in document["versions"].items():
        data, answer = site.read(manifest["dist"]["tarball"].removeprefix(site.reads))
        assert "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode() == manifest["dist"]["integrity"], version
        # SeaweedFS replaces application/octet-stream with a type of its own from the extension.
        types = {"application/octet-stream"} | ({"application/x-compressed-tar"} if site.s3.kind == "seaweedfs" else set())
        assert "immutable" in answer["CacheControl"] and answer["ContentType"] in types


def test_two_instances_with_empty_work_folders_serve_every_write_from_the_bucket(site: Site) -> None:
    a, b = site.apis
    token = add_user(a.base, "alice", "alice-password-1")
    npm_publish(npm_for(site, a, token, "via-a"), site.root / "pkg-1.0.0", "bucket-pkg", "1.0.0")
    npm_publish(npm_for(site, b, token, "via-b"), site.root / "pkg-1.1.0", "bucket-pkg", "1.1.0")

    # Read-your-writes at the origin: both 201s came after the documents were in the bucket.
    document, answer = site.read("bucket-pkg")
    assert sorted(json.loads(document)["versions"]) == ["1.0.0", "1.1.0"]
    assert answer["ContentType"] == "application/json" and "must-revalidate" in answer["CacheControl"]
    assert_tarballs_in_bucket(site, "bucket-pkg")
    # -/all is the index refresher's, a second after the writes: it goes to the bucket too.
    assert poll(lambda: "bucket-pkg" in json.loads(site.read("-/all/index.html")[0]), 30)

    scoped = publish_body("@scope/pkg", "1.0.0", tarball("@scope/pkg", "1.0.0"))
    assert http("PUT", site.reads + "@scope%2fpkg", token=token, body=scoped).status == 201  # a write through nginx
    assert_bucket_reads(site, token)

    installer = ClientRun(CLIENTS["npm11"], install_client(CLIENTS["npm11"]), site.root / "installer", site.reads)
    project = installer.new_project(site.root / "project")
    installer.add(project, "bucket-pkg@1.0.0")
    assert json.loads((project / "node_modules/bucket-pkg/package.json").read_text())["version"] == "1.0.0"
    installer.add(project, "bucket-pkg@latest")
    assert json.loads((project / "node_modules/bucket-pkg/package.json").read_text())["version"] == "1.1.0"

    # A's disk held nothing B needs, nor anything A needs: wipe it and restart A.
    a.stop()
    shutil.rmtree(site.works[0])
    started(a)
    data = tarball("bucket-pkg", "1.2.0")
    assert http("PUT", a.base + "bucket-pkg", token=token, body=publish_body("bucket-pkg", "1.2.0", data)).status == 201
    assert sorted(served_versions(site, "bucket-pkg")) == ["1.0.0", "1.1.0", "1.2.0"]
    assert http("PUT", b.base + "other-pkg", token=token, body=publish_body("other-pkg", "1.0.0", tarball("other-pkg", "1.0.0"))).status == 201
    assert sorted(served_versions(site, "other-pkg")) == ["1.0.0"]
    assert_tarballs_in_bucket(site, "bucket-pkg")
    assert poll(lambda: "other-pkg" in json.loads(site.read("-/all/index.html")[0]), 30)  # the refresher's, a second later
    verify_bucket_tree(site)

    # B restarted on its own (stale) work folder: its sync gives every file the stat A's gave it,
    # the one recorded in the shared state, so no instance sees a change that did not happen.
    b.stop()
    started(b)
    content_a, content_b = (stats(work / "content") for work in site.works)
    assert {key: content_b.get(key) for key in content_a} == content_a and len(content_a) == 6  # bucket-pkg: 3 archives, 1 meta; @scope/pkg: 1, 1
    assert "other-pkg/registry-meta.json" in content_b  # written by B after A's start: A fetches it when it needs it

    # The bucket stopped: a write gets a prompt 503, never a hang or a 201.
    stop_process(site.s3.process, grace=10)
    asked = time.monotonic()
    reply = http("PUT", b.base + "bucket-pkg", token=token, body=publish_body("bucket-pkg", "1.3.0", tarball("bucket-pkg", "1.3.0")), timeout=90)
    assert reply.status == 503 and "retry-after" in reply.headers, (reply.status, reply.body)
    assert time.monotonic() - asked < 60


def assert_bucket_reads(site: Site, token: str) -> None:
    """What nginx serves from the bucket: the folder config's mapping and headers, npm's token kept
    from the bucket, and no spelling that reaches another key than the path it names."""
    full = http("GET", site.reads + "bucket-pkg", token=token)  # S3 would refuse a Bearer token: nginx drops it
    assert full.status == 200 and full.headers["content-type"] == "application/json" and "time" in full.json
    assert full.headers["cache-control"] == "public, max-age=0, must-revalidate" and "x-amz-request-id" not in full.headers
    short = http("GET", site.reads + "bucket-pkg", headers={"Accept": "application/vnd.npm.install-v1+json"})
    assert short.headers["content-type"] == "application/vnd.npm.install-v1+json" and short.json != full.json
    assert http("GET", site.reads + "bucket-pkg/latest").json["version"] == "1.1.0"  # a tag folder: its index.html
    assert http("GET", site.reads + "-/all").status == 200  # a registry folder under its own key
    assert (scoped := http("GET", site.reads + "@scope%2fpkg")).status == 200 and scoped.json["name"] == "@scope/pkg"
    assert http("GET", site.reads + "@scope%2Fpkg").json == http("GET", site.reads + "@scope/pkg").json == scoped.json
    # A folder's URL reads the folder's files, as the folder config's try_files does.
    assert http("GET", site.reads + "bucket-pkg/").json == full.json
    assert http("GET", site.reads + "bucket-pkg/", headers={"Accept": "application/vnd.npm.install-v1+json"}).json == short.json
    assert http("GET", site.reads + "bucket-pkg/latest/").json["version"] == "1.1.0"
    front = http("GET", site.reads + "-/web/")
    assert front.status == 200 and front.headers["content-type"].startswith("text/html") and front.body == site.read("-/web/index.html")[0]
    missing = http("GET", site.reads + "no-such-pkg")  # S3 answers 403 to anonymous readers for a missing key
    assert missing.status == 404 and missing.json == {"error": "not found"}
    hostile = ["..%2f..%2fcanary.json", "%2e%2e/%2e%2e/canary.json", "bucket-pkg/%2e%2e/%2e%2e/%2e%2e/canary.json", "-/..%2f..%2f..%2fcanary.json",
               "bucket-pkg%3Facl", "bucket-pkg%252Findex.html", "bucket-pkg%23x", "bucket-pkg%20"]  # fmt: skip
    for spelling in hostile:
        reply = http("GET", site.reads + spelling)
        assert reply.status in (400, 404) and b"canary" not in reply.body and b"<" not in reply.body, (spelling, reply.status, reply.body)


def verify_bucket_tree(site: Site) -> None:
    """`registry-gen verify` on a copy of the tree bucket (the files only: a package document's
    second key, `<name>` beside `<name>/index.html`, is an alias for readers without index files)."""
    objects = site.objects()
    copy = site.root / "bucket-copy"
    for key in objects:
        if f"{key}/index.html" in objects or key.endswith("/"):
            continue
        target = copy / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(site.read(key)[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    proc = subprocess.run([sys.executable, "-m", "registry_gen", "verify", str(copy), "--config", str(site.apis[1].config)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=site.root)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


SECRET_RULES = "packages:\n  'secret-*': {read: [insiders]}\n  '**': {read: all}\n"


@pytest.mark.parametrize("kind", ["moto", "seaweedfs"])
def test_a_private_tree_bucket_is_read_through_urls_the_read_check_signs(kind: str, postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    """No bucket policy: the bucket refuses every anonymous read (both servers prove it). nginx
    (`--from-bucket --private-bucket`) reads it with the URLs the API's read decision presigned
    for exactly the key asked; real npm installs through it; a denied package stays denied with
    the answers of the public-bucket config; no URL nor bucket error reaches the client."""
    # `tree_readers: nginx`: one key per document, so a tag folder's abbreviated read needs the full document's URL.
    with bucket_site(kind, postgres_state_url(postgres), tmp_path, ("a",), private=True, extra=SECRET_RULES + "tree_readers: nginx\n") as site:
        (api,) = site.apis
        token = add_user(api.base, "alice", "alice-password-1")
        for name in ("open-pkg", "secret-pkg"):
            assert http("PUT", site.reads + name, token=token, body=publish_body(name, "1.0.0", tarball(name, "1.0.0"))).status == 201
        direct = http("GET", f"{site.s3.endpoint}/{BUCKET}/{TREE}open-pkg/index.html")
        assert direct.status == 403 and "open-pkg/index.html" in site.objects()  # the object is there; only a signed URL reads it

        full = http("GET", site.reads + "open-pkg")
        assert full.status == 200 and full.json["name"] == "open-pkg" and full.headers["cache-control"] == "public, max-age=0, must-revalidate"
        assert_nothing_signed_leaks(full, site)
        short = http("GET", site.reads + "open-pkg/", headers={"Accept": "application/vnd.npm.install-v1+json"})
        assert short.headers["content-type"] == "application/vnd.npm.install-v1+json" and short.json != full.json
        tag = http("GET", site.reads + "open-pkg/latest", headers=ABBREVIATED)  # no abbreviated document there: the full one
        assert tag.status == 200 and tag.json["version"] == "1.0.0" and "open-pkg" not in site.objects(), (tag.status, tag.body)
        assert_nothing_signed_leaks(tag, site)
        archive = http("GET", full.json["versions"]["1.0.0"]["dist"]["tarball"])
        assert archive.status == 200 and archive.body == tarball("open-pkg", "1.0.0") and "immutable" in archive.headers["cache-control"]
        head = http("HEAD", site.reads + "open-pkg")  # the URL is signed for GET: nginx asks GET and drops the body
        assert head.status == 200 and head.headers["content-type"] == "application/json"
        assert http("GET", site.reads + "-/web/").status == 200

        # Denied reads: the answers of the public-bucket config (401 without a token, 404 with one without access).
        secret = site.read("secret-pkg/index.html")[0]
        anonymous, stranger = http("GET", site.reads + "secret-pkg"), http("GET", site.reads + "secret-pkg", token=token)
        assert anonymous.status == 401 and stranger.status == 404 and stranger.json == {"error": "not found"}
        assert http("GET", site.reads + "secret-pkg/-/secret-pkg-1.0.0.tgz").status == 401 and secret not in anonymous.body + stranger.body
        missing = http("GET", site.reads + "no-such-pkg")  # the bucket's own 403/404 body stays in nginx
        assert missing.status == 404 and missing.json == {"error": "not found"}
        assert_nothing_signed_leaks(missing, site)
        for spelling in ["..%2f..%2fcanary.json", "%2e%2e/%2e%2e/canary.json", "open-pkg/%2e%2e/%2e%2e/%2e%2e/canary.json", "open-pkg%3Facl", "open-pkg%20"]:
            reply = http("GET", site.reads + spelling)
            assert reply.status in (400, 404) and b"canary" not in reply.body and b"<" not in reply.body, (spelling, reply.status, reply.body)

        assert_signed_for_exactly_one_key(site)
        installer = ClientRun(CLIENTS["npm11"], install_client(CLIENTS["npm11"]), site.root / "installer", site.reads)
        project = installer.new_project(site.root / "project")
        installer.add(project, "open-pkg@1.0.0")
        assert json.loads((project / "node_modules/open-pkg/package.json").read_text())["version"] == "1.0.0"


def assert_nothing_signed_leaks(reply: Any, site: Site) -> None:
    """No presigned URL (nor a piece of one), no bucket error body and no tree object's digest
    metadata (BucketTree's, for the start's check) in what the client gets."""
    seen = (json.dumps(reply.headers) + reply.body.decode("utf-8", "replace")).lower()
    words = ("x-amz-signature", "x-amz-credential", "awsaccesskeyid", "x-registry-gen", "<error", site.s3.endpoint.lower(), f"/{BUCKET}/{PREFIX}/",
             "registry-gen-md5")  # fmt: skip
    leaked = [word for word in words if word in seen]
    assert not leaked, (leaked, " ".join(sorted(reply.headers)))


def assert_signed_for_exactly_one_key(site: Site) -> None:
    """The read decision, asked as nginx asks it: URLs for the path's keys only, none for a path
    that is not a file of the tree. SeaweedFS checks signatures: a URL signed for one key reads no
    other (moto does not check them, so this part is proved on SeaweedFS only)."""
    ask = {"X-Registry-Gen-Path": "/open-pkg/", "X-Registry-Gen-Document": "index.html"}
    answer = http("GET", site.apis[0].base + "-/registry-gen/read-access", headers=ask)
    document, own = answer.headers["x-registry-gen-signed-document"], answer.headers["x-registry-gen-signed-file"]
    assert document.startswith(f"/{BUCKET}/{TREE}open-pkg/index.html?") and own.startswith(f"/{BUCKET}/{TREE}open-pkg?")
    short = http("GET", site.apis[0].base + "-/registry-gen/read-access", headers={**ask, "X-Registry-Gen-Document": "abbreviated.json"})
    assert short.headers["x-registry-gen-signed-full"].startswith(f"/{BUCKET}/{TREE}open-pkg/index.html?")
    assert http("GET", site.s3.endpoint + document).json["name"] == "open-pkg"
    for path in ("/open-pkg/../../canary.json", "/open-pkg/./index.html", "/open-pkg//x", "/open-pkg/.hidden", "/a b", "/open-pkg?x"):
        refused = http("GET", site.apis[0].base + "-/registry-gen/read-access", headers={**ask, "X-Registry-Gen-Path": path})
        assert refused.status == 403 and "x-registry-gen-signed-file" not in refused.headers, path
    if site.s3.kind == "seaweedfs":
        other = document.replace("open-pkg/index.html?", "secret-pkg/index.html?")
        assert http("GET", site.s3.endpoint + other).status == 403


def test_an_instance_answers_503_with_retry_after_until_its_start_is_done(postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    """While its start waits (here: for the build lock this test holds, as another build would
    hold it), an instance answers every request with a 503 problem and Retry-After, never a hang
    nor a 500; once started, the same requests succeed."""
    from registry_gen.buildlock import holding_build_lock

    with bucket_site("moto", postgres_state_url(postgres), tmp_path, ("a",)) as site:
        (api,) = site.apis
        token = add_user(api.base, "alice", "alice-password-1")
        api.stop()
        with holding_build_lock(site.works[0] / ".public.lock", 10):
            api.start(ready=False)
            for method, path, body in (("GET", "-/ping", None), ("GET", "-/whoami", None), ("PUT", "early-pkg", publish_body("early-pkg", "1.0.0", tarball("early-pkg", "1.0.0")))):
                reply = http(method, api.base + path, token=token, body=body, timeout=10)
                assert reply.status == 503 and reply.headers["retry-after"].isdigit(), (path, reply.status, reply.body)
                assert reply.headers["content-type"] == "application/problem+json" and reply.json["status"] == 503 and "starting" in reply.json["detail"]
            assert api.process is not None and api.process.poll() is None
        assert poll(lambda: http("GET", api.base + "-/ping", timeout=10).status == 200, 60)
        assert http("PUT", api.base + "early-pkg", token=token, body=publish_body("early-pkg", "1.0.0", tarball("early-pkg", "1.0.0"))).status == 201


def test_switching_an_existing_bucket_to_tree_readers_nginx_serves_no_folder_key_left_behind(postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    """An instance of a bucket written with `tree_readers: any` (each document also under its
    folder key) restarted with `tree_readers: nginx`: its writes put each document under its tree
    path only, so the folder keys of before stay behind, stale. The emitted nginx config reads the
    tree path first, and an abbreviated read of a tag folder (which has no abbreviated document) the
    full document next: the stale keys are never served. A removed document's folder key is removed."""
    with bucket_site("moto", postgres_state_url(postgres), tmp_path, ("a",)) as site:
        (api,) = site.apis
        token = add_user(api.base, "alice", "alice-password-1")
        assert http("PUT", site.reads + "switch-pkg", token=token, body=publish_body("switch-pkg", "1.0.0", tarball("switch-pkg", "1.0.0"))).status == 201
        assert http("PUT", f"{site.reads}-/package/switch-pkg/dist-tags/beta", token=token, body="1.0.0").status == 201
        assert {"switch-pkg", "switch-pkg/latest", "switch-pkg/beta"} <= set(site.objects())  # the folder keys of `any`

        api.stop()
        api.config.write_text(api.config.read_text() + "tree_readers: nginx\n")
        started(api)
        assert http("PUT", site.reads + "switch-pkg", token=token, body=publish_body("switch-pkg", "1.1.0", tarball("switch-pkg", "1.1.0"))).status == 201
        assert http("DELETE", f"{site.reads}-/package/switch-pkg/dist-tags/beta", token=token).status == 200

        objects = site.objects()
        assert "switch-pkg/beta" not in objects and "switch-pkg/beta/index.html" not in objects  # removed with its document
        assert json.loads(site.read("switch-pkg")[0])["dist-tags"] == {"latest": "1.0.0", "beta": "1.0.0"}  # left behind, stale
        assert json.loads(site.read("switch-pkg/latest")[0])["version"] == "1.0.0"
        for headers in ({}, ABBREVIATED):
            document = http("GET", site.reads + "switch-pkg", headers=headers)
            assert document.status == 200 and sorted(document.json["versions"]) == ["1.0.0", "1.1.0"], (headers, document.json)
            latest = http("GET", site.reads + "switch-pkg/latest", headers=headers)
            assert latest.status == 200 and latest.json["version"] == "1.1.0", (headers, latest.status, latest.body)
            gone = http("GET", site.reads + "switch-pkg/beta", headers=headers)
            assert gone.status == 404 and gone.json == {"error": "not found"}, (headers, gone.status)
        assert http("GET", site.reads + "-/package/switch-pkg/dist-tags", headers=ABBREVIATED).json == {"latest": "1.1.0"}  # a file: its own key
