"""Issue 28, caches in front: a real Varnish (Debian's, with varnish-modules' xkey) in front of
nginx (config from `registry-gen host-config nginx`) in front of `registry-gen api`.

Documents are kept by the cache (s-maxage) and tagged with their package (xkey); after a publish
the API purges the changed package's key, so the cache serves the new version within a second.
The control points the purge at a port where nothing listens: the publish still succeeds at
once, and the cache still serves the stale document (so the purge, not a lifetime, made the first
one fresh). Tarballs stay cached through a purge of their package. A purge the cache could not
take is owed in the ledger and sent once the cache answers again; one a SIGKILL between the render
and the purge cut off is sent by the restarted api.
"""

from __future__ import annotations

import contextlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import json
import math
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.failpoints import FAILPOINT_ENV
from registry_gen.settings import Settings
from registry_gen.state import open_state
from tests.hosts.clients import ClientRun
from tests.hosts.servers import api_process, free_port, nginx_server, varnish_server
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.storage.s3servers import forward
from tests.core.test_cli_errors import run
from tests.support import make_tarball, poll

pytestmark = pytest.mark.slow
NAME = "cache-purge-demo"
FRESH_WITHIN = 1.0  # seconds after a 201 (issue 28, acceptance 2)


@dataclass(frozen=True)
class CachedRegistry:
    cache: str  # Varnish: what clients use (base_url)
    origin: str  # nginx behind it
    api_log: Path
    config: Path
    api_port: int


@contextlib.contextmanager
def cached_registry(root: Path, purge_port: int | None = None, by_path: bool = False, api: bool = True) -> Iterator[CachedRegistry]:
    """Varnish -> nginx -> api; the purge goes to Varnish, or to `purge_port` (the control): by
    surrogate key (xkey), or `by_path` (one PURGE per changed URL, no keys). Without `api`, the
    test starts (and kills) the api on `api_port` itself."""
    cache_port, nginx_port, api_port = free_port(), free_port(), free_port()
    cache = f"http://127.0.0.1:{cache_port}/"
    root.mkdir(parents=True)
    config = root / "registry.yaml"
    target = f"http://127.0.0.1:{purge_port or cache_port}" + ("{path}" if by_path else "/")
    keys = "" if by_path else "  key_header: xkey\n"
    config.write_text(
        f"content_dir: content\nout_dir: public\ndata_dir: data\nbase_url: {cache}\nsignup: open\n"
        # The longest budget an attempt may have: the tests read the ledger and the cache just after
        # the 201, which a purge that outlasted 1 s on a loaded machine left owed. A purge that cannot
        # go through here is refused at once (nothing listens), never waited on.
        f"purge:\n  url: {target}\n  method: PURGE\n  timeout_seconds: 30\n{keys}"
    )
    (root / "content").mkdir()
    run_build(Settings(content_dir=root / "content", out_dir=root / "public", base_url=cache, data_dir=root / "data"))
    with api_process(root, config, api_port) if api else contextlib.nullcontext(root / "api.log") as api_log:
        with nginx_server(root / "public", root / "nginx", nginx_port, f"127.0.0.1:{api_port}", ["--config", str(config)]) as origin:
            with varnish_server(root / "varnish", cache_port, nginx_port):
                yield CachedRegistry(cache, origin, api_log, config, api_port)


def _get(url: str) -> tuple[dict[str, str], bytes]:
    with urllib.request.urlopen(url, timeout=30) as reply:  # noqa: S310 - 127.0.0.1
        return {k.lower(): v for k, v in reply.headers.items()}, reply.read()


def _latest(base: str) -> tuple[str, str]:
    headers, body = _get(base + NAME)
    return json.loads(body)["dist-tags"]["latest"], headers.get("x-cache", "")


def _write_package(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"name": NAME, "version": version, "main": "index.js", "license": "MIT"}
    (folder / "package.json").write_text(json.dumps(manifest) + "\n")
    (folder / "index.js").write_text(f"module.exports = {json.dumps(version)};\n")
    return folder


def _publish_first_and_cache(registry: CachedRegistry, client: ClientRun, source: Path) -> str:
    """npm publishes 1.0.0 through the cache; its document and tarball are read twice there: the
    second read is a hit. Returns the tarball's URL."""
    source.parent.mkdir(parents=True, exist_ok=True)
    add_user(registry.cache, "cacher", "cacher-password-1")
    client.login("cacher", "cacher-password-1", source.parent)
    client.publish(_write_package(source, "1.0.0"))
    headers, _ = _get(registry.cache + NAME)
    assert "s-maxage=" in headers["cache-control"] and "max-age=0, must-revalidate" in headers["cache-control"]
    assert headers.get("xkey", NAME) == NAME and headers["etag"]
    assert _latest(registry.cache) == ("1.0.0", "HIT")
    tarball = registry.cache + f"{NAME}/-/{NAME}-1.0.0.tgz"
    assert "immutable" in _get(tarball)[0]["cache-control"]
    assert _get(tarball)[0]["x-cache"] == "HIT"
    return tarball


def _poll_latest(base: str, wanted: str, seconds: float) -> tuple[str, str, float]:
    """Reads the document until its latest is `wanted` or `seconds` pass: (latest, X-Cache, seconds taken)."""
    start = time.monotonic()
    while True:
        latest, cache = _latest(base)
        taken = time.monotonic() - start
        if latest == wanted or taken > seconds:
            return latest, cache, taken
        time.sleep(0.02)  # a polling interval, not a synchronisation


@pytest.mark.parametrize("by_path", [False, True], ids=["xkey", "paths"])
def test_a_publish_purges_the_cache_in_front(by_path: bool, tmp_path: Path, make_client) -> None:
    with cached_registry(tmp_path / "registry", by_path=by_path) as registry:
        client: ClientRun = make_client("npm11", registry.cache)
        tarball = _publish_first_and_cache(registry, client, tmp_path / "work" / "source")

        client.publish(_write_package(tmp_path / "work" / "source", "1.1.0"))
        assert _latest(registry.origin)[0] == "1.1.0"  # the origin at once
        latest, _, taken = _poll_latest(registry.cache, "1.1.0", FRESH_WITHIN)
        assert latest == "1.1.0", f"the cache still served {latest} {taken:.2f}s after the publish"
        assert _latest(registry.cache) == ("1.1.0", "HIT")  # cached again after the purge
        assert _get(tarball)[0]["x-cache"] == "HIT"  # the package's purge left its tarball cached


def test_without_a_working_purge_the_cache_stays_stale_and_the_publish_succeeds(tmp_path: Path, make_client) -> None:
    dead_port = free_port()  # nothing listens there: every purge fails
    with cached_registry(tmp_path / "registry", purge_port=dead_port) as registry:
        client: ClientRun = make_client("npm11", registry.cache)
        _publish_first_and_cache(registry, client, tmp_path / "work" / "source")

        start = time.monotonic()
        client.publish(_write_package(tmp_path / "work" / "source", "1.1.0"))  # raises unless npm saw success
        published_in = time.monotonic() - start
        assert _latest(registry.origin)[0] == "1.1.0"
        latest, cache, _ = _poll_latest(registry.cache, "1.1.0", FRESH_WITHIN + 0.5)
        assert (latest, cache) == ("1.0.0", "HIT"), "without the purge the cache must still hold the old document"
        assert published_in < 30
        log = registry.api_log.read_text()
        assert "cache purge failed" in log and "Traceback" not in log


def owed_purges(config: Path) -> list[tuple[str, ...]]:
    """The keys of each purge the registry's ledger still owes the cache."""
    root = config.parent
    settings = Settings(content_dir=root / "content", out_dir=root / "public", data_dir=root / "data")
    with open_state(settings).journal() as journal:
        return [owed.keys for owed in journal.owed_purges(math.inf)]


class _PurgeRelay(BaseHTTPRequestHandler):
    upstream = ""  # host:port of the cache

    def do_PURGE(self) -> None:  # noqa: N802 - the HTTP method's name
        status, headers, body = forward(self, self.upstream)
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@contextlib.contextmanager
def purge_relay(port: int, cache: str) -> Iterator[None]:
    """The purge's way to the cache, open only inside this block (before it and after it, nothing
    listens on `port`): the cache is unreachable for purges while it keeps serving reads."""
    handler = type("Relay", (_PurgeRelay,), {"upstream": cache.removeprefix("http://").rstrip("/")})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_a_purge_the_cache_missed_is_owed_and_sent_once_it_answers(tmp_path: Path, make_client) -> None:
    relay_port = free_port()  # closed at first: the cache cannot be purged
    with cached_registry(tmp_path / "registry", purge_port=relay_port) as registry:
        client: ClientRun = make_client("npm11", registry.cache)
        with purge_relay(relay_port, registry.cache):
            _publish_first_and_cache(registry, client, tmp_path / "work" / "source")
        assert owed_purges(registry.config) == []

        client.publish(_write_package(tmp_path / "work" / "source", "1.1.0"))
        assert _latest(registry.origin)[0] == "1.1.0"
        assert NAME in {key for keys in owed_purges(registry.config) for key in keys}  # in the ledger, not in a process
        assert _latest(registry.cache) == ("1.0.0", "HIT")  # stale while the purge is owed
        with purge_relay(relay_port, registry.cache):
            latest, _, taken = _poll_latest(registry.cache, "1.1.0", 60)  # the backoff's first steps: 1 s, 5 s, 30 s
            assert latest == "1.1.0", f"the owed purge was never sent ({taken:.0f} s)"
            poll(lambda: owed_purges(registry.config) == [], "the owed purge settled", 10)
        log = registry.api_log.read_text()
        assert log.count("cache purge failed") == 1 and log.count("the cache answers again") == 1, log
        assert "Traceback" not in log


def test_a_purge_cut_off_by_a_sigkill_after_the_render_is_sent_by_the_restarted_api(tmp_path: Path) -> None:
    with cached_registry(tmp_path / "registry", api=False) as registry:
        root, port = registry.config.parent, registry.api_port
        with api_process(root, registry.config, port):
            token = add_user(registry.origin, "killer", "killer-password-1")
            assert http("PUT", registry.origin + NAME, token=token, body=publish_body(NAME, "1.0.0", tarball(NAME, "1.0.0"))).status == 201
            _latest(registry.cache)
            assert _latest(registry.cache) == ("1.0.0", "HIT")
        with api_process(root, registry.config, port, {FAILPOINT_ENV: "before-purge:kill"}) as api_log:
            with contextlib.suppress(OSError):
                http("PUT", registry.origin + NAME, token=token, body=publish_body(NAME, "1.1.0", tarball(NAME, "1.1.0")))
            assert "Traceback" not in api_log.read_text()
        assert _latest(registry.origin)[0] == "1.1.0"  # rendered before the kill
        assert _latest(registry.cache) == ("1.0.0", "HIT")  # and never purged
        assert owed_purges(registry.config)
        with api_process(root, registry.config, port):
            latest, _, taken = _poll_latest(registry.cache, "1.1.0", 15)
            assert latest == "1.1.0", f"the restarted api never sent the owed purge ({taken:.0f} s)"
            poll(lambda: owed_purges(registry.config) == [], "the owed purge settled", 10)



def test_a_cli_build_purges_what_it_changed_and_owes_what_the_cache_refused(tmp_path: Path) -> None:
    """`registry-gen build` with `purge:` (an operator dropping archives into content/, no api):
    the cache in front serves the new version as soon as the command returns. Before, only the
    api's writes, watch mode and the refresher purged: Varnish kept serving the cached document
    for its whole shared lifetime. With the purge pointed where nothing listens, the build still
    succeeds, says so in one warning line, and the purge is owed in the ledger."""
    with cached_registry(tmp_path / "cached", api=False) as registry:
        root = registry.config.parent
        make_tarball(root / "content", NAME, "1.0.0")
        first = run(["build", "--config", str(registry.config)], root)
        assert first.returncode == 0 and "warning" not in first.stderr, first.stderr
        assert _latest(registry.cache)[0] == "1.0.0"
        assert _latest(registry.cache) == ("1.0.0", "HIT")
        make_tarball(root / "content", NAME, "1.1.0")
        second = run(["build", "--config", str(registry.config)], root)
        assert second.returncode == 0 and "warning" not in second.stderr, second.stderr
        assert _latest(registry.cache)[0] == "1.1.0"  # before: ('1.0.0', 'HIT') for s-maxage
        assert owed_purges(registry.config) == []
    with cached_registry(tmp_path / "refused", purge_port=free_port(), api=False) as registry:
        root = registry.config.parent
        make_tarball(root / "content", NAME, "1.0.0")
        refused = run(["build", "--config", str(registry.config)], root)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 0 and len(lines) == 1, refused.stderr
        assert lines[0].startswith("warning: the cache in front was not purged (") and "Traceback" not in refused.stderr
        (owed,) = owed_purges(registry.config)  # the api's leader (or the next build) sends it
        assert {NAME, "-"} <= set(owed), owed


def _all_lists(base: str, version: str) -> bool:
    return version in _get(base + "-/all")[1].decode()


def test_a_rewrite_of_all_killed_before_its_purge_is_purged_by_the_restarted_api(tmp_path: Path) -> None:
    """The embedded api rewrites -/all a moment after a write (the refresher), then purges it. A
    SIGKILL between that rewrite's commit and its purge left the cache serving the old -/all for
    its whole shared lifetime: the purge was never recorded as owed. It is now, before the
    rewrite, so the restarted api sends it. By path: with surrogate keys, the write's own purge
    of the key `-` (its site pages) already evicts -/all."""
    with cached_registry(tmp_path / "registry", by_path=True, api=False) as registry:
        root, port = registry.config.parent, registry.api_port
        with registry.config.open("a") as config:
            config.write("index_refresh_seconds: 1\n")
        with api_process(root, registry.config, port):
            token = add_user(registry.origin, "killer", "killer-password-1")
            assert http("PUT", registry.origin + NAME, token=token, body=publish_body(NAME, "1.0.0", tarball(NAME, "1.0.0"))).status == 201
            poll(lambda: _all_lists(registry.origin, '"1.0.0"'), "-/all rewritten", 30)
            _get(registry.cache + "-/all")
            assert _all_lists(registry.cache, '"1.0.0"') and _get(registry.cache + "-/all")[0]["x-cache"] == "HIT"
        with api_process(root, registry.config, port, {FAILPOINT_ENV: "before-rewrite-upload:kill"}):
            assert http("PUT", registry.origin + NAME, token=token, body=publish_body(NAME, "1.1.0", tarball(NAME, "1.1.0"))).status == 201
            poll(lambda: _all_lists(registry.origin, '"1.1.0"'), "-/all rewritten before the kill", 30)
        assert not _all_lists(registry.cache, '"1.1.0"')  # the purge never went
        assert owed_purges(registry.config)  # before: nothing owed, so nothing would ever send it
        with api_process(root, registry.config, port):
            poll(lambda: _all_lists(registry.cache, '"1.1.0"'), "the restarted api's owed purge of -/all", 15)
