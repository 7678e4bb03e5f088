"""The mirror behind a real nginx (the config `registry-gen host-config nginx` writes) in front of
`registry-gen api`: a proxied document goes through the API, which keeps it fresh and has nginx
send the tree's file (X-Accel-Redirect: nginx's ETag, 304, gzip sibling); a proxied tarball the
tree lacks falls back to the API; read rules still hold before any upstream is asked."""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.hosts.servers import free_port, nginx_server, stop_process, wait_for_api
from tests.importers.upstream_server import hostile_upstream
from tests.mirror.helpers import built, write_config
from tests.registry_api.helpers import add_user, http
from tests.support import poll

PACKAGES = "  '@private/*': {read: authenticated, proxy: up}\n  'local-*': {read: all}\n  '**': {proxy: up}\n"


@contextmanager
def nginx_and_api(root: Path, config: Path) -> Iterator[str]:
    nginx_port, api_port = free_port(), free_port()
    config.write_text(config.read_text() + f"base_url: http://127.0.0.1:{nginx_port}/\ncontent_dir: content\nout_dir: public\n"
                      "data_dir: data\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    assert subprocess.run([sys.executable, "-m", "registry_gen", "build", "-c", str(config)], cwd=root, env=env, timeout=120).returncode == 0
    with open(root / "api.log", "w") as log:
        api = subprocess.Popen([sys.executable, "-m", "registry_gen", "api", "--config", str(config), "--host", "127.0.0.1",
                                "--port", str(api_port)], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_for_api(api_port, api, deadline=60)
            with nginx_server(root / "public", root / "nginx", nginx_port, api_upstream=f"127.0.0.1:{api_port}",
                              extra_args=["--config", str(config)]) as base:  # fmt: skip
                yield base
        finally:
            stop_process(api)


def test_nginx_sends_the_files_the_api_keeps_fresh(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        data = upstream.publish("pkg-a", "1.0.0", description="x" * 4000)
        upstream.publish("@private/lib", "1.0.0")
        root = tmp_path / "registry"
        config = write_config(root, upstream.base, PACKAGES)
        with nginx_and_api(root, config) as base:
            first = http("GET", base + "pkg-a")
            assert first.status == 200 and first.json["versions"]["1.0.0"]["dist"]["tarball"] == f"{base}pkg-a/-/pkg-a-1.0.0.tgz"
            miss = http("GET", base + "pkg-a/-/pkg-a-1.0.0.tgz")
            assert miss.status == 200 and miss.body == data
            built(root, "pkg-a/-/pkg-a-1.0.0.tgz")
            asked = len(upstream.hits)
            static = http("GET", base + "pkg-a/-/pkg-a-1.0.0.tgz")
            assert static.body == data and static.headers["cache-control"] == "public, max-age=31536000, immutable"
            # nginx's own ETag ("<mtime s>-<size>", both hex): nginx sent the tree's file, as the API asked it to.
            poll(lambda: re.fullmatch(r'"[0-9a-f]{8}-[0-9a-f]+"', http("GET", base + "pkg-a").headers.get("etag", "")),
                 "the document sent by nginx from the tree")  # fmt: skip
            sent = http("GET", base + "pkg-a", headers={"Accept-Encoding": "gzip", "Accept": "application/vnd.npm.install-v1+json"})
            assert sent.headers["content-encoding"] == "gzip" and sent.headers["content-type"] == "application/vnd.npm.install-v1+json"
            assert b'"dist-tags"' in gzip.decompress(sent.body) and sent.headers["vary"].startswith("Accept")
            again = http("GET", base + "pkg-a", headers={"If-None-Match": sent.headers["etag"], "Accept-Encoding": "gzip",
                                                          "Accept": "application/vnd.npm.install-v1+json"})  # fmt: skip
            assert again.status == 304
            assert len(upstream.hits) == asked  # fresh: neither the document nor the tarball asked again
            assert http("GET", base + "@private%2flib").status == 401
            assert http("GET", base + "@private/lib/-/lib-1.0.0.tgz").status == 401
            missing = http("GET", base + "local-thing/-/local-thing-1.0.0.tgz")
            assert missing.status == 404 and missing.json == {"error": "not found"}
            assert not any(hit.path.startswith(("/@private", "/local-")) for hit in upstream.hits)
            token = add_user(base, "reader")
            assert http("GET", base + "@private%2flib", token=token).status == 200


def _connections_to(port: int) -> set[tuple[str, str]]:
    """The TCP connections (local, remote address) to or from `port` the kernel still holds,
    closed ones in TIME_WAIT included (they stay for a minute): one per connection made."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as rows:
            for row in list(rows)[1:]:
                local, remote, state = row.split()[1:4]
                if state != "0A" and port in (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)):
                    found.add((local, remote) if int(local.rsplit(":", 1)[1], 16) != port else (remote, local))
    return found


def test_fresh_document_reads_reuse_nginx_connections_to_the_api(tmp_path: Path) -> None:
    """Each proxied document read goes through the API: nginx keeps its connections to it open
    (upstream keepalive), so a burst of reads costs no connection set-up (counted: the API's
    connections, closed ones included, before and after the reads)."""
    names = [f"pkg-{index}" for index in range(6)]
    with hostile_upstream() as upstream:
        for name in names:
            upstream.publish(name, "1.0.0")
        root = tmp_path / "registry"
        config = write_config(root, upstream.base)
        with nginx_and_api(root, config) as base:
            for name in names:
                assert http("GET", base + name).status == 200
                built(root, f"{name}/index.html")
            api_port = int(re.findall(r"server 127\.0\.0\.1:(\d+)", (root / "nginx" / "nginx.conf").read_text())[0])
            asked, before = len(upstream.hits), _connections_to(api_port)
            reads = 0
            for _ in range(5):
                for name in names:
                    reply = http("GET", base + name)
                    assert reply.status == 200 and reply.json["name"] == name
                    reads += 1
            made = _connections_to(api_port) - before
            assert len(upstream.hits) == asked  # fresh: every read was the API's check and nginx's file
            # nginx runs one worker here, which keeps its connection (a second only if the API
            # dropped the first as idle meanwhile); without keepalive, one connection per read.
            assert len(made) <= 2, f"{len(made)} new connections to the API for {reads} reads"
