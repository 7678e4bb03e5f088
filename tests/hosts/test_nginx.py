"""The nginx config from `registry-gen host-config nginx`, against a real nginx.

Reads are checked over raw HTTP (http.client sends the path exactly as written, so each
scoped-name spelling really reaches nginx); writes are checked against a recording stand-in for
`registry-gen api` (the real API is driven by real clients in test_publish.py).
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_gen.build.write import GZIP_SIBLING_FROM
from registry_gen.writer import atomic_write_bytes
from tests.hosts.conftest import build_tree
from tests.hosts.servers import Recorded, free_port, nginx_server, recording_upstream
from tests.support import make_tarball

pytestmark = pytest.mark.slow

CORGI = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"


@dataclass(frozen=True)
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def header(self, name: str) -> str:
        return ", ".join(self.headers.get_all(name) or [])

    @property
    def json(self) -> object:
        return json.loads(self.body)


def request(base: str, method: str, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None) -> Reply:
    host, port = base.removeprefix("http://").rstrip("/").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return Reply(response.status, response.headers, response.read())
    finally:
        connection.close()


@dataclass(frozen=True)
class Served:
    base: str
    tree: Path
    records: list[Recorded]


def _content(folder: Path) -> Path:
    make_tarball(folder, "plain-dep", "1.0.0")
    # A README long enough that the full document passes write.GZIP_SIBLING_FROM and gets its sibling.
    readme = "# widget\n" + "A line of the widget's readme.\n" * 80
    make_tarball(folder, "@acme/widget", "1.2.0", dependencies={"plain-dep": "^1.0.0"}, files={"README.md": readme, "index.js": ""})
    return folder


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """nginx over a small tree, writes going to a recording upstream."""
    root = tmp_path_factory.mktemp("nginx-behaviour")
    port = free_port()
    build_tree(_content(root / "content"), root / "public", f"http://127.0.0.1:{port}/")
    with recording_upstream() as (api_port, records):
        with nginx_server(root / "public", root / "nginx", port, api_upstream=f"127.0.0.1:{api_port}") as base:
            yield Served(base, root / "public", records)


@pytest.mark.parametrize("path", ["/@acme%2fwidget", "/@acme%2Fwidget", "/@acme/widget", "/@acme/widget/"])
def test_every_scoped_spelling_is_the_json_document_without_a_redirect(served: Served, path: str) -> None:
    reply = request(served.base, "GET", path)
    assert reply.status == 200
    assert reply.header("Content-Type") == "application/json"
    assert reply.body == (served.tree / "@acme/widget/index.html").read_bytes()
    assert reply.json["name"] == "@acme/widget"  # type: ignore[index]


def test_unscoped_document_and_generator_files(served: Served) -> None:
    plain = request(served.base, "GET", "/plain-dep")
    assert plain.status == 200 and plain.header("Content-Type") == "application/json"
    assert plain.json["dist-tags"] == {"latest": "1.0.0"}  # type: ignore[index]
    tags = request(served.base, "GET", "/-/package/@acme%2fwidget/dist-tags")
    assert (tags.status, tags.header("Content-Type"), tags.json) == (200, "application/json", {"latest": "1.2.0"})
    ping = request(served.base, "GET", "/-/ping")
    assert (ping.status, ping.header("Content-Type"), ping.json) == (200, "application/json", {})
    page = request(served.base, "GET", "/-/web/")
    assert page.status == 200 and page.header("Content-Type") == "text/html; charset=utf-8"


def test_accept_header_picks_the_abbreviated_document(served: Served) -> None:
    corgi = request(served.base, "GET", "/@acme%2fwidget", headers={"Accept": CORGI})
    assert corgi.status == 200
    assert corgi.header("Content-Type") == "application/vnd.npm.install-v1+json"
    assert corgi.body == (served.tree / "@acme/widget/abbreviated.json").read_bytes()
    assert "Accept" in corgi.header("Vary")
    full = request(served.base, "GET", "/@acme%2fwidget", headers={"Accept": "application/json"})
    assert full.body == (served.tree / "@acme/widget/index.html").read_bytes()
    assert "Accept" in full.header("Vary")
    assert corgi.header("ETag") != full.header("ETag")  # caches keep the two apart


@pytest.mark.parametrize("path", ["/@acme/widget/-/widget-1.2.0.tgz", "/@acme%2fwidget/-/widget-1.2.0.tgz"])
def test_tarballs_are_immutable_octet_streams(served: Served, path: str) -> None:
    reply = request(served.base, "GET", path, headers={"Accept-Encoding": "gzip"})
    assert reply.status == 200
    assert reply.header("Content-Type") == "application/octet-stream"
    assert reply.header("Cache-Control") == "public, max-age=31536000, immutable"
    assert reply.header("Content-Encoding") == ""  # already gzip: never compressed twice
    assert reply.body == (served.tree / "@acme/widget/-/widget-1.2.0.tgz").read_bytes()


def test_documents_revalidate_with_etag_and_change_at_once(served: Served) -> None:
    first = request(served.base, "GET", "/plain-dep")
    assert first.header("Cache-Control") == "public, max-age=0, must-revalidate"
    etag = first.header("ETag")
    assert etag and first.header("Last-Modified")
    assert request(served.base, "GET", "/plain-dep", headers={"If-None-Match": etag}).status == 304
    # A rebuild replaces the file: the next request sees the new bytes and a new ETag.
    document = served.tree / "plain-dep/index.html"
    original = document.read_bytes()
    changed = json.loads(original)
    changed["description"] = "rewritten by a publish"
    try:
        atomic_write_bytes(document, json.dumps(changed).encode())
        stat = document.stat()
        os.utime(document, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))  # mtime moves on, as a real write's does
        again = request(served.base, "GET", "/plain-dep", headers={"If-None-Match": etag})
        assert again.status == 200 and again.json["description"] == "rewritten by a publish"  # type: ignore[index]
        assert again.header("ETag") != etag
    finally:
        atomic_write_bytes(document, original)


def test_precompressed_siblings_are_served_to_gzip_clients(served: Served) -> None:
    reply = request(served.base, "GET", "/@acme%2fwidget", headers={"Accept-Encoding": "gzip"})
    assert reply.status == 200 and reply.header("Content-Encoding") == "gzip"
    assert reply.body == (served.tree / "@acme/widget/index.html.gz").read_bytes()  # the file, not on-the-fly
    assert gzip.decompress(reply.body) == (served.tree / "@acme/widget/index.html").read_bytes()
    assert "Accept-Encoding" in reply.header("Vary")
    plain = request(served.base, "GET", "/@acme%2fwidget")
    assert plain.header("Content-Encoding") == "" and plain.body == (served.tree / "@acme/widget/index.html").read_bytes()


def test_a_document_gzip_would_grow_has_no_sibling_and_is_served_plain(served: Served) -> None:
    """A dist-tags document (~20 bytes) gzips to more than it holds: the build writes no sibling
    for it, and nginx (gzip_static, then gzip on the fly) still gives gzip clients the document."""
    path = "/-/package/@acme%2fwidget/dist-tags"
    assert not (served.tree / "-/package/@acme/widget/dist-tags.gz").exists()
    reply = request(served.base, "GET", path, headers={"Accept-Encoding": "gzip"})
    body = gzip.decompress(reply.body) if reply.header("Content-Encoding") == "gzip" else reply.body
    assert reply.status == 200 and body == (served.tree / "-/package/@acme/widget/dist-tags").read_bytes()
    assert "latest" in json.loads(body)  # type: ignore[operator]


def test_a_document_under_one_segment_has_no_sibling_and_is_gzipped_on_the_fly(served: Served) -> None:
    """The abbreviated document is under write.GZIP_SIBLING_FROM bytes: the build writes no sibling,
    and nginx's `gzip on` still compresses it for a gzip client (nothing is lost on the wire)."""
    document = served.tree / "@acme/widget/abbreviated.json"
    assert len(document.read_bytes()) < GZIP_SIBLING_FROM and not document.with_name("abbreviated.json.gz").exists()
    reply = request(served.base, "GET", "/@acme%2fwidget", headers={"Accept": CORGI, "Accept-Encoding": "gzip"})
    assert reply.status == 200 and reply.header("Content-Encoding") == "gzip"
    assert gzip.decompress(reply.body) == document.read_bytes()


@pytest.mark.parametrize(
    "path",
    ["/no-such-package", "/@acme%2fnope", "/@acme/widget/-/widget-9.9.9.tgz", "/.registry-gen/", "/.nojekyll",
     "/-/404.json", "/404.html", "/-/web/no/such/page"],
)  # fmt: skip
def test_missing_and_private_paths_are_json_404s(served: Served, path: str) -> None:
    reply = request(served.base, "GET", path)
    assert reply.status == 404
    assert reply.header("Content-Type") == "application/json"
    assert reply.json == {"error": "not found"}
    assert request(served.base, "HEAD", path).status == 404


@pytest.mark.parametrize("path", ["/plain-dep/../../x", "/plain-dep/..%2f..%2fx", "/x%00"])
def test_paths_nginx_cannot_parse_are_json_400s(served: Served, path: str) -> None:
    """nginx refuses these itself, before any location; the answer was a 500 (a named error
    location needs a URI, and these have none)."""
    reply = request(served.base, "GET", path)
    assert (reply.status, reply.header("Content-Type"), reply.json) == (400, "application/json", {"error": "bad request"})


def test_build_state_is_never_served(served: Served) -> None:
    state = served.tree.with_name(served.tree.name + ".state")
    assert (state / "state.sqlite3").is_file(), "the build keeps its state beside the tree"
    assert not (served.tree / ".registry-gen").exists()
    private = [served.tree / ".registry-gen" / p.relative_to(state) for p in state.rglob("*") if p.is_file()]
    for path in private:  # not even at the old in-tree place
        reply = request(served.base, "GET", "/" + path.relative_to(served.tree).as_posix())
        assert (reply.status, reply.json) == (404, {"error": "not found"})


def test_writes_and_caller_dependent_reads_go_to_the_api(served: Served) -> None:
    served.records.clear()
    payload = json.dumps({"name": "@acme/widget", "blob": "x" * 2_000_000}).encode()  # above nginx's 1m default
    put = request(served.base, "PUT", "/@acme%2fwidget", body=payload, headers={"Content-Type": "application/json"})
    assert put.status == 201 and put.json["method"] == "PUT"  # type: ignore[index]
    request(served.base, "DELETE", "/@acme%2fwidget/-/widget-1.2.0.tgz/-rev/1-abc")
    request(served.base, "POST", "/-/v1/login", body=b"{}", headers={"Content-Type": "application/json"})
    for path in ("/-/whoami", "/-/v1/search?text=widget&size=5", "/-/npm/v1/tokens", "/-/user/org.couchdb.user:alice",
                 "/-/v1/done/abc", "/user", "/user/search?keyword=a", "/-/user-api/openapi.json"):  # fmt: skip
        assert request(served.base, "GET", path).status == 201, path
    seen = [(r.method, r.path) for r in served.records]
    assert seen[:3] == [("PUT", "/@acme%2fwidget"), ("DELETE", "/@acme%2fwidget/-/widget-1.2.0.tgz/-rev/1-abc"), ("POST", "/-/v1/login")]
    assert ("GET", "/-/v1/search?text=widget&size=5") in seen and ("GET", "/user") in seen
    first = served.records[0]
    assert first.body == payload  # the whole body, untouched
    assert first.headers["x-forwarded-for"] == "127.0.0.1"
    assert first.headers["host"] == served.base.removeprefix("http://").rstrip("/")


def test_api_down_and_read_only_configs_answer_in_json(tmp_path: Path) -> None:
    port = free_port()
    build_tree(_content(tmp_path / "content"), tmp_path / "public", f"http://127.0.0.1:{port}/")
    config = tmp_path / "small.yaml"
    config.write_text("limits:\n  max_archive_bytes: 1048576\n")  # -> client_max_body_size 3m
    dead_api = f"127.0.0.1:{free_port()}"
    with nginx_server(tmp_path / "public", tmp_path / "nginx-a", port, dead_api, ["--config", str(config)]) as base:
        down = request(base, "PUT", "/some-package", body=b"{}")
        assert (down.status, down.header("Content-Type")) == (502, "application/json")
        assert down.json == {"error": "the registry API is not running"}
        assert request(base, "GET", "/-/whoami").status == 502
        assert request(base, "GET", "/plain-dep").status == 200  # reads never need the API
        too_big = request(base, "PUT", "/some-package", body=b"x" * (4 * 1024 * 1024))
        assert (too_big.status, too_big.json) == (413, {"error": "request body too large"})
    port = free_port()
    with nginx_server(tmp_path / "public", tmp_path / "nginx-b", port) as base:
        refused = request(base, "PUT", "/some-package", body=b"{}")
        assert (refused.status, refused.header("Content-Type"), refused.header("Allow")) == (405, "application/json", "GET, HEAD")
        assert refused.json == {"error": "method not allowed: this registry is read-only"}
        assert request(base, "GET", "/-/whoami").status == 404  # no API: nothing answers for the caller
