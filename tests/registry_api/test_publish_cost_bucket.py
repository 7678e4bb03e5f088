"""What a publish costs in object-store requests and threads on PostgreSQL + bucket (issue 28,
acceptance 2: the server share). Counted on a real PostgreSQL and a real S3 server (moto's server
mode), for one publish through the write service as `registry-gen api` runs it (content and tree
in the bucket, deferred whole documents), into a small registry. The request list is what the
instance's S3Storage objects send (their `watchers`: operation and key)."""

from __future__ import annotations

import cProfile
import pstats
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_gen import site
from registry_gen.hosting import Upload
from registry_gen.objectstore import BucketTree, ObjectStore, open_object_store
from registry_gen.refresher import IndexRefresher, WholeRewrite
from registry_gen.settings import Settings
from registry_gen.state import open_state
from registry_gen import writes
from registry_gen.writes import WriteService
from tests.conftest import postgres_state_url
from tests.registry_api.test_publish_cost_postgres import ALICE, LISTINGS_LOCKED, _served_versions, _upload, counted_statements
from tests.storage.s3servers import S3Server, make_bucket, s3_credentials, s3_server
from tests.user_api.pg_server import PostgresServer

pytestmark = pytest.mark.slow

BUCKET = "registry"


@dataclass(frozen=True)
class Request:
    operation: str  # PutObject, GetObject, ListObjectsV2, HeadObject, DeleteObject
    key: str  # the key, or the prefix of a listing


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_credentials(), s3_server("moto", tmp_path_factory.mktemp("s3")) as server:
        make_bucket(server.endpoint, BUCKET)
        yield server


@pytest.fixture(params=["any"])
def bucket_service(
    request: pytest.FixtureRequest, tmp_path: Path, state_postgres: PostgresServer, moto: S3Server
) -> Iterator[tuple[WriteService, ObjectStore]]:
    """The write service as `registry-gen api` runs it; `tree_readers` from the test's indirect parameter."""
    settings = Settings(
        content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data", base_url="http://127.0.0.1:9/",
        database_url=postgres_state_url(state_postgres), index_refresh_seconds=3600,  # the refresher never runs by itself here
        storage=f"s3://{BUCKET}/{tmp_path.name}", storage_endpoint_url=moto.endpoint, tree_readers=request.param,
    )  # fmt: skip
    with s3_credentials():
        objects = open_object_store(settings)
        assert objects is not None
        objects.start(settings)
        yield WriteService(settings, refresher=IndexRefresher(settings), objects=objects), objects


def recorded(objects: ObjectStore) -> list[Request]:
    """Every request the instance's S3 clients send from now on, in order."""
    sent: list[Request] = []

    def record(operation: str, key: str) -> None:
        sent.append(Request(operation, key))

    for bucket in {id(b): b for b in (objects.content, objects.tree.bucket)}.values():
        bucket.watchers.append(record)
    return sent


@pytest.fixture
def started_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads started while the test runs."""
    names: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        names.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    return names


def test_a_publish_to_the_bucket_sends_each_changed_object_once_and_reads_back_nothing_it_wrote(
    bucket_service: tuple[WriteService, ObjectStore],
) -> None:
    service, objects = bucket_service
    for warm in ("alpha-kit", "beta-kit", "counted-kit"):
        service.publish(_upload(service.settings, warm, "1.0.0"), ALICE)
    sent = recorded(objects)
    service.publish(_upload(service.settings, "counted-kit", "1.0.1"), ALICE)
    assert "1.0.1" in _served_versions(service.settings, "counted-kit")
    listing = "\n".join(f"{request.operation} {request.key}" for request in sent)
    written = {request.key for request in sent if request.operation == "PutObject"}
    puts = [request for request in sent if request.operation == "PutObject"]
    assert len(puts) == len(written), listing  # no object uploaded twice
    reads = [request for request in sent if request.operation in ("GetObject", "HeadObject")]
    read_back = [r for i, r in enumerate(sent) if r in reads and Request("PutObject", r.key) in sent[:i]]
    assert not read_back, listing  # nothing read back that it wrote
    # The meta read once under the lock (the bucket is the truth: another instance may have written
    # it); the package folder listed once (the synced files' stat is the objects' LastModified).
    assert len(reads) <= 1 and len([r for r in sent if r.operation == "ListObjectsV2"]) <= 1, listing


# The requests of one new version's publish on the instance that wrote the package last (the
# reader's GET, the meta's and the archive's PUTs, then the tree: the tarball, the package's
# documents, its version document, dist-tags and its own two pages). 20 while the write's build
# also rendered and uploaded the registry-wide pages (the front page, the browse page, the four
# search shards; now the leader's) and listed the package's content folder (now only when its
# token moved since this instance's copy: test_sync_listing_skip.py).
REQUESTS_PER_PUBLISH = 13
REGISTRY_WIDE = (f"{site.WEB_ROOT}/index.html", f"{site.BROWSE_ROOT}/", f"{site.SEARCH_SHARD_ROOT}/")


def test_a_publish_to_the_bucket_leaves_the_registry_wide_pages_to_the_leader(bucket_service: tuple[WriteService, ObjectStore]) -> None:
    """No front page, browse page or search shard in the write's path: they are marked stale in the
    state, in the write's transaction, and rendered, uploaded and settled by the rewrite."""
    service, objects = bucket_service
    for warm in ("alpha-kit", "beta-kit", "paged-kit"):
        service.publish(_upload(service.settings, warm, "1.0.0"), ALICE)
    WholeRewrite(service.settings, objects)()  # what the warm-up left, rendered
    state = open_state(service.settings)
    assert not state.listings_stale()
    sent = recorded(objects)
    service.publish(_upload(service.settings, "paged-kit", "1.0.1"), ALICE)
    listing = "\n".join(f"{request.operation} {request.key}" for request in sent)
    tree_puts = [r.key.split("/_tree/", 1)[-1] for r in sent if r.operation == "PutObject"]
    assert [key for key in tree_puts if key.startswith(REGISTRY_WIDE)] == [], listing
    assert f"{site.WEB_ROOT}/package/paged-kit/index.html" in tree_puts, listing  # the package's own pages stay in the write
    assert len(sent) == REQUESTS_PER_PUBLISH, listing
    assert state.listings_stale()  # left in the state for the leader

    del sent[:]
    WholeRewrite(service.settings, objects)()
    tree_puts = [r.key.split("/_tree/", 1)[-1] for r in sent if r.operation == "PutObject"]
    assert f"{site.WEB_ROOT}/index.html" in tree_puts and any(key.startswith(f"{site.SEARCH_SHARD_ROOT}/") for key in tree_puts), tree_puts
    assert not state.listings_stale()  # settled once uploaded
    front = objects.tree.bucket.read(f"{site.WEB_ROOT}/index.html")
    assert front is not None and b"1.0.1" in front


# PostgreSQL statements of one new version's publish with content in the bucket (a row of an
# executemany counts as one), at most: the filesystem path's (test_publish_cost_postgres.py) plus
# the build's folder-token read. Of them, the reads of the pending writes and the folder tokens:
# before the write reads (a writer killed before it), before the build's sync, in the build's
# transaction. 77 and 4 while the sync's check and its token read were two statements (PROFILE.md,
# foldcheck).
STATEMENTS_PER_BUCKET_PUBLISH = 76
PENDING_AND_TOKEN_READS = 3


def _pending_or_token_read(statement: str) -> bool:
    return statement.startswith("SELECT") and ("FROM writes WHERE status = 'pending'" in statement or "FROM content_folders" in statement)


def test_a_publish_to_the_bucket_reads_the_pending_writes_and_folder_tokens_in_one_statement_before_its_sync(
    bucket_service: tuple[WriteService, ObjectStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    service, objects = bucket_service
    for warm in ("alpha-kit", "token-kit"):
        service.publish(_upload(service.settings, warm, "1.0.0"), ALICE)
    requests = recorded(objects)
    with counted_statements(monkeypatch) as sent:
        service.publish(_upload(service.settings, "token-kit", "1.0.1"), ALICE)
    assert "1.0.1" in _served_versions(service.settings, "token-kit")
    assert not [r for r in requests if r.operation == "ListObjectsV2"]  # the token was read, and matched: no LIST
    statements = [statement for statement in sent if statement != LISTINGS_LOCKED]
    assert len([s for s in statements if _pending_or_token_read(s)]) <= PENDING_AND_TOKEN_READS, "\n".join(statements)
    assert len(statements) <= STATEMENTS_PER_BUCKET_PUBLISH, "\n".join(statements)


# The package document's and the version document's folder keys (`name`, `name/latest`): only a
# reader without the emitted nginx config needs them (registry.yaml `tree_readers`).
FOLDER_KEYS_PER_PUBLISH = 2


@pytest.mark.parametrize("bucket_service", ["nginx"], indirect=True)
def test_a_publish_to_a_bucket_read_through_nginx_only_sends_one_key_per_document(bucket_service: tuple[WriteService, ObjectStore]) -> None:
    service, objects = bucket_service
    for warm in ("alpha-kit", "beta-kit", "single-kit"):
        service.publish(_upload(service.settings, warm, "1.0.0"), ALICE)
    sent = recorded(objects)
    service.publish(_upload(service.settings, "single-kit", "1.0.1"), ALICE)
    listing = "\n".join(f"{request.operation} {request.key}" for request in sent)
    tree_puts = {r.key.split("/_tree/", 1)[-1] for r in sent if r.operation == "PutObject" and "/_tree/" in r.key}
    assert {"single-kit/index.html", "single-kit/abbreviated.json", "single-kit/latest/index.html"} <= tree_puts, listing
    assert not tree_puts & {"single-kit", "single-kit/latest"}, listing
    assert len(sent) == REQUESTS_PER_PUBLISH - FOLDER_KEYS_PER_PUBLISH, listing
    assert objects.tree.bucket.read("single-kit") is None and b"1.0.1" in (objects.tree.bucket.read("single-kit/index.html") or b"")


@pytest.fixture
def upload_waves(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The tree keys of each upload phase the instance waits for from now on, in order."""
    waves: list[list[str]] = []
    together = BucketTree._upload_together

    def counted(self: BucketTree, uploads: list[Upload]) -> None:
        if uploads:
            waves.append([upload.source for upload in uploads])
        together(self, uploads)

    monkeypatch.setattr(BucketTree, "_upload_together", counted)
    return waves


def test_a_publishs_tarball_goes_to_the_bucket_while_the_build_runs(
    bucket_service: tuple[WriteService, ObjectStore], upload_waves: list[list[str]]
) -> None:
    """The new version's tarball is the archive's bytes: it is sent as soon as the archive is
    stored, and the upload after the build waits for it, then sends the package's own files (its
    documents, dist-tags and pages) together: one wave after the build (three before onekey, two
    before sharewall); each object still sent once, the tarball before any document."""
    service, objects = bucket_service
    for warm in ("alpha-kit", "early-kit"):
        service.publish(_upload(service.settings, warm, "1.0.0"), ALICE)
    sent = recorded(objects)
    del upload_waves[:]
    service.publish(_upload(service.settings, "early-kit", "1.0.1"), ALICE)
    listing = "\n".join(f"{request.operation} {request.key}" for request in sent)
    tarball = "early-kit/-/early-kit-1.0.1.tgz"
    assert len(upload_waves) == 1 and tarball not in upload_waves[0], upload_waves
    puts = [r.key.split("/_tree/", 1)[-1] for r in sent if r.operation == "PutObject" and "/_tree/" in r.key]
    assert puts.count(tarball) == 1 and puts.index(tarball) < puts.index("early-kit/index.html"), listing
    assert len(sent) == REQUESTS_PER_PUBLISH, listing
    assert objects.tree.bucket.read(tarball) == objects.content.read("early-kit/early-kit-1.0.1.tgz")


def test_a_publish_whose_build_fails_leaves_no_early_tarball_in_the_bucket(
    bucket_service: tuple[WriteService, ObjectStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tarball sent early is removed again when the write does not happen (its build raised, or
    refused the archive: the same path), before the write's archive is: no document named it, and
    a later publish of that version with other bytes must not find these served."""
    service, objects = bucket_service
    service.publish(_upload(service.settings, "failed-kit", "1.0.0"), ALICE)

    def failing(*_: Any, **__: Any) -> None:
        raise RuntimeError("the build failed")

    monkeypatch.setattr(writes, "build_locked", failing)
    with pytest.raises(RuntimeError, match="the build failed"):
        service.publish(_upload(service.settings, "failed-kit", "1.0.1"), ALICE)
    assert objects.tree.bucket.read("failed-kit/-/failed-kit-1.0.1.tgz") is None
    assert objects.content.read("failed-kit/failed-kit-1.0.1.tgz") is None  # the write's archive rolled back
    assert objects.tree.bucket.read("failed-kit/-/failed-kit-1.0.0.tgz") is not None


def test_a_publish_to_the_bucket_starts_no_thread(
    bucket_service: tuple[WriteService, ObjectStore], started_threads: list[str]
) -> None:
    service, _ = bucket_service
    for version in ("1.0.0", "1.0.1"):  # the upload pool's threads start once, with the first publishes
        service.publish(_upload(service.settings, "threaded-kit", version), ALICE)
    started_threads.clear()
    service.publish(_upload(service.settings, "threaded-kit", "1.0.2"), ALICE)
    assert "1.0.2" in _served_versions(service.settings, "threaded-kit")
    # Each publish uploads a dozen tree objects in two parallel phases: a pool per phase started
    # up to 13 threads per publish (~5 ms each on a loaded machine).
    assert started_threads == []


# The Python calls one small PUT of the instance's S3Storage makes (a publish sends ~20): 4,873
# through boto3 with botocore's default User-Agent, ~4,000 with a fixed one; ~40 through obstore,
# whose signing, HTTP and XML parsing are Rust (registry_gen.storage.s3). Counted, not timed.
CLIENT_CALLS_PER_PUT = 200


def test_a_request_to_the_bucket_costs_the_client_a_bounded_number_of_python_calls(
    bucket_service: tuple[WriteService, ObjectStore],
) -> None:
    _, objects = bucket_service
    bucket = objects.content
    bucket.replace("calls-kit/warm.json", b"{}")  # the connection and the first call's caches are warm
    profile = cProfile.Profile()
    profile.enable()
    for index in range(5):
        bucket.replace(f"calls-kit/{index}.json", b"x" * 2048)
    profile.disable()
    per_put = pstats.Stats(profile).total_calls / 5  # type: ignore[attr-defined]
    assert per_put <= CLIENT_CALLS_PER_PUT, per_put
    assert all(bucket.read(f"calls-kit/{index}.json") == b"x" * 2048 for index in range(5))
