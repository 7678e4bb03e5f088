"""The site search's shards on real hosts: a shard too big for one file is a list of leaves
(`-/web/search/<key>.json` -> `-/web/search/<key>/<id>.json`), and http.server, nginx (with its
gzip siblings) and an S3 bucket deployed by `registry-gen deploy` serve the list and every leaf
as JSON, so the search box can put the shard back together."""

from __future__ import annotations

import contextlib
import gzip
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen import site
from tests.hosts.conftest import build_tree, deployed_bucket
from tests.hosts.servers import free_port, nginx_server
from tests.support import make_tarball, static_server

pytestmark = pytest.mark.slow

CROWD = [f"crowd-{i:02d}" for i in range(9)]


def _content(folder: Path) -> Path:
    for name in CROWD:
        make_tarball(folder, name, "1.0.0")
    return folder


@contextlib.contextmanager
def _host(kind: str, root: Path) -> Iterator[str]:
    content, tree = _content(root / "content"), root / "public"
    if kind == "object-store":
        with deployed_bucket(root, content, bucket="leaves") as (host, _endpoint):
            yield host.registry
        return
    if kind == "nginx":
        port = free_port()
        build_tree(content, tree, f"http://127.0.0.1:{port}/")
        with nginx_server(tree, root / "nginx", port) as url:
            yield url
        return
    tree.mkdir()
    with static_server(tree) as url:
        build_tree(content, tree, url)
        yield url


def _get(url: str, gzip_ok: bool = False) -> tuple[str, str, bytes]:
    headers = {"Accept-Encoding": "gzip"} if gzip_ok else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as reply:  # noqa: S310 - loopback
        return reply.headers.get("Content-Type", ""), reply.headers.get("Content-Encoding", ""), reply.read()


@pytest.mark.parametrize("kind", ["http.server", "nginx", "object-store"])
def test_a_cut_shard_and_its_leaves_are_served_as_json(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("registry_gen.build.indexes.SEARCH_LEAF_MAX", 3)  # nine packages share "crowd"
    with _host(kind, tmp_path) as base:
        content_type, _, body = _get(base + site.search_shard_path("cr"))
        assert content_type.startswith("application/json")
        leaves = json.loads(body)["leaves"]
        assert len(leaves) >= 3
        names: list[str] = []
        for leaf in leaves:
            content_type, encoding, body = _get(f"{base}{site.SEARCH_SHARD_ROOT}/cr/{leaf}.json", gzip_ok=True)
            assert content_type.startswith("application/json"), (kind, leaf)
            if encoding == "gzip":  # nginx's gzip_static sends the build's sibling
                body = gzip.decompress(body)
            members = [entry["name"] for entry in json.loads(body)["packages"]]
            assert 1 <= len(members) <= 3
            names += members
        assert names == CROWD  # every package once, in name order
