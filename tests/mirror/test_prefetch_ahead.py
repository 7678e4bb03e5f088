"""A client walking a dependency tree through an empty mirror (a real `registry-gen serve`, an
upstream the test starts on loopback): the documents it will ask next are fetched while it reads
the one before, one level ahead of its reads, and only for names anyone may read."""

from __future__ import annotations

from pathlib import Path

from tests.importers.upstream_server import hostile_upstream
from tests.mirror.helpers import document, mirror_serve, write_config
from tests.support import poll


def test_the_dependencies_of_a_fetched_document_are_fetched_before_the_client_asks(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("top", "1.0.0", dependencies={"dep-a": "^1.0.0", "secret-x": "^1.0.0"}, peerDependencies={"peer-c": "*"})
        upstream.publish("top", "0.9.0", tag=None, dependencies={"old-dep": "^1.0.0"})
        upstream.publish("dep-a", "1.0.0", dependencies={"deep": "^1.0.0"})
        for name in ("secret-x", "peer-c", "deep", "old-dep"):
            upstream.publish(name, "1.0.0")
        root = tmp_path / "registry"
        write_config(root, upstream.base, "  'secret-*': {proxy: up, read: authenticated}\n  '**': {proxy: up}\n")
        with mirror_serve(root) as server:
            document(server.base, "top")
            poll(lambda: upstream.hits_of("/dep-a") and upstream.hits_of("/peer-c"), "the dependencies of top's latest fetched ahead", timeout=30)
            # No caller stands behind a prefetch: a name only some may read waits for its reader;
            # an older version's needs are not guessed; and nothing goes two levels ahead.
            assert not upstream.hits_of("/secret-x") and not upstream.hits_of("/old-dep") and not upstream.hits_of("/deep")
            assert sorted(document(server.base, "dep-a")["versions"]) == ["1.0.0"]
            assert len(upstream.hits_of("/dep-a")) == 1  # the client's read was the prefetch's answer
            poll(lambda: upstream.hits_of("/deep"), "dep-a's dependency fetched ahead once dep-a was read", timeout=30)
