"""Issue 26: imports from upstreams we do not control, against hostile registries the tests start on
loopback. An upstream (or a lockfile) never decides which local package an import writes; the
token never follows a redirect to another origin, and redirects go to http(s) only; a download
has a whole deadline and a size cap, and is streamed to disk, never held whole."""

from __future__ import annotations

import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any
from contextlib import contextmanager
from pathlib import Path

import pytest

from registry_gen.cli import main as registry_gen
from registry_gen.importers.client import RegistryClient, tls_context
from registry_gen.importers.integrity import sri_sha512
from registry_gen.importers.keepalive import KeptConnections
from registry_gen.importers.model import ImportProblem
from tests.importers.upstream_server import Upstream, hostile_upstream, make_root, redirect_to, served

ATTACK_FORMS = ("document-named-alice", "entry-named-alice", "tarball-named-alice")


def _import(config: Path, *args: str) -> int:
    return registry_gen(["import", *args, "--config", str(config)])


def _with_alice(up: Upstream, config: Path) -> None:
    """The registry holds alice-pkg@1.0.0, imported honestly from this same upstream."""
    up.publish("alice-pkg", "1.0.0")
    assert _import(config, "registry", "alice-pkg", "--from", up.base) == 0


def _hostile_innocent_tool(up: Upstream, form: str) -> None:
    """What `/innocent-tool` answers: a document that lands alice-pkg@6.6.6 one way or another."""
    if form == "document-named-alice":
        up.publish("alice-pkg", "6.6.6", tag=None)
        up.documents["innocent-tool"] = {**up.documents["alice-pkg"], "dist-tags": {"latest": "6.6.6"}}
    elif form == "entry-named-alice":
        up.publish("innocent-tool", "1.0.0", entry={"name": "alice-pkg", "version": "6.6.6"}, inside={"name": "alice-pkg", "version": "6.6.6"})
    else:  # the document and its entry are honest; the tarball (with a matching integrity) is not
        up.publish("innocent-tool", "1.0.0", inside={"name": "alice-pkg", "version": "6.6.6"})


@pytest.mark.parametrize("form", ATTACK_FORMS)
def test_an_upstream_cannot_write_a_package_it_was_not_asked_for(tmp_path: Path, form: str, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as up:
        _with_alice(up, config)
        _hostile_innocent_tool(up, form)
        capsys.readouterr()
        assert _import(config, "registry", "innocent-tool", "--from", up.base) == 1
    err = capsys.readouterr().err
    assert "failed: innocent-tool" in err and "'alice-pkg'" in err and "refused" in err
    assert not (root / "content" / "alice-pkg" / "alice-pkg-6.6.6.tgz").exists()
    assert not list((root / "content").rglob("*6.6.6*")) and not (root / "content" / "innocent-tool").exists()
    alice = served(root, "alice-pkg")
    assert alice is not None and list(alice["versions"]) == ["1.0.0"] and alice["dist-tags"]["latest"] == "1.0.0"


def test_an_import_over_a_damaged_meta_names_the_file_and_keeps_what_is_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as up:
        up.publish("dented-pkg", "1.0.0")
        assert _import(config, "registry", "dented-pkg", "--from", up.base) == 0
        meta = root / "content" / "dented-pkg" / "registry-meta.json"
        meta.write_text('{"name": "dented-pkg", "versions": ')  # an editor's crash, a full disk
        up.publish("dented-pkg", "1.1.0")
        capsys.readouterr()
        assert _import(config, "registry", "dented-pkg", "--from", up.base) == 1
    err = capsys.readouterr().err
    assert "content/dented-pkg/registry-meta.json is broken" in err and "fix it by hand" in err, err
    assert meta.read_text() == '{"name": "dented-pkg", "versions": '
    assert sorted(p.name for p in meta.parent.glob("*.tgz")) == ["dented-pkg-1.0.0.tgz"]


def test_a_lockfile_resolved_at_an_attackers_host_cannot_write_another_package(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as honest, hostile_upstream() as attacker:
        _with_alice(honest, config)
        data = attacker.publish("alice-pkg", "6.6.6")
        attacker.documents["innocent-tool"] = attacker.documents["alice-pkg"]
        attacker.files[attacker.tarball_path("innocent-tool", "6.6.6")] = data
        lock = {"name": "app", "lockfileVersion": 3, "packages": {"": {"dependencies": {"innocent-tool": "6.6.6"}},
                "node_modules/innocent-tool": {"version": "6.6.6", "integrity": sri_sha512(data),
                                               "resolved": f"{attacker.base}innocent-tool/-/innocent-tool-6.6.6.tgz"}}}  # fmt: skip
        (tmp_path / "package-lock.json").write_text(json.dumps(lock))
        capsys.readouterr()
        assert _import(config, "lockfile", str(tmp_path / "package-lock.json")) == 1
    assert "named 'alice-pkg', not 'innocent-tool'" in capsys.readouterr().err
    assert not list((root / "content").rglob("*6.6.6*"))
    alice = served(root, "alice-pkg")
    assert alice is not None and list(alice["versions"]) == ["1.0.0"]


# ---------------------------------------------------------------- redirects and the token


def test_a_lockfile_never_sends_the_token_to_the_hosts_it_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as attacker:
        data = attacker.publish("plain-pkg", "1.0.0")
        lock = {"name": "app", "lockfileVersion": 3, "packages": {"": {}, "node_modules/plain-pkg": {
            "version": "1.0.0", "integrity": sri_sha512(data), "resolved": f"{attacker.base}plain-pkg/-/plain-pkg-1.0.0.tgz"}}}  # fmt: skip
        (tmp_path / "package-lock.json").write_text(json.dumps(lock))
        # No --from: the token belongs to npm's configured registry, not to the lockfile's host.
        assert _import(config, "lockfile", str(tmp_path / "package-lock.json"), "--token", "s3cr3t-upstream-token") == 0
    assert attacker.hits and all("authorization" not in hit.headers for hit in attacker.hits)
    assert (root / "content" / "plain-pkg" / "plain-pkg-1.0.0.tgz").read_bytes() == data


def test_the_token_never_follows_a_redirect_to_another_origin(tmp_path: Path) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as registry, hostile_upstream() as cdn:
        data = registry.publish("tok-pkg", "1.0.0")
        cdn_path = "/blobs/tok-pkg-1.0.0.tgz"
        cdn.files[cdn_path] = data
        registry.routes[registry.tarball_path("tok-pkg", "1.0.0")] = redirect_to(cdn.base.rstrip("/") + cdn_path)
        assert _import(config, "registry", "tok-pkg", "--from", registry.base, "--token", "s3cr3t-upstream-token") == 0
    assert [hit.headers.get("authorization") for hit in registry.hits_of("/tok-pkg")] == ["Bearer s3cr3t-upstream-token"]
    assert registry.hits_of(registry.tarball_path("tok-pkg", "1.0.0"))[0].headers.get("authorization") == "Bearer s3cr3t-upstream-token"
    (fetched,) = cdn.hits_of(cdn_path)  # another port: another origin
    assert "authorization" not in fetched.headers
    assert (root / "content" / "tok-pkg" / "tok-pkg-1.0.0.tgz").read_bytes() == data


@contextmanager
def counting_listener() -> Iterator[tuple[int, list[int]]]:
    """A TCP port that counts the connections it accepts (and closes them at once)."""
    accepted: list[int] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@pytest.mark.parametrize("scheme", ["ftp", "file"])
def test_redirects_to_other_schemes_are_refused(tmp_path: Path, scheme: str, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as registry, counting_listener() as (port, accepted):
        registry.publish("odd-pkg", "1.0.0")
        target = f"ftp://127.0.0.1:{port}/odd-pkg-1.0.0.tgz" if scheme == "ftp" else "file:///etc/passwd"
        registry.routes[registry.tarball_path("odd-pkg", "1.0.0")] = redirect_to(target)
        assert _import(config, "registry", "odd-pkg", "--from", registry.base) == 1
    err = capsys.readouterr().err
    assert f"redirects to '{target}': only http and https redirects are followed" in err
    assert accepted == [] and not (root / "content" / "odd-pkg").exists()


# ---------------------------------------------------------------- deadline and size cap


def _trickle(handler: object) -> None:
    """Announces a body, then sends one byte at a time, slowly: never a read timeout, never done."""
    handler.send_response(200)  # type: ignore[attr-defined]
    handler.send_header("Content-Length", "100000")  # type: ignore[attr-defined]
    handler.end_headers()  # type: ignore[attr-defined]
    try:
        for _ in range(100000):
            handler.wfile.write(b"x")  # type: ignore[attr-defined]
            handler.wfile.flush()  # type: ignore[attr-defined]
            time.sleep(0.05)  # the hostile server's pace, not synchronisation
    except OSError:
        return  # the client gave up


@pytest.mark.parametrize("what", ["document", "tarball"])
def test_a_trickling_upstream_fails_at_the_download_deadline(tmp_path: Path, what: str, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path)
    with hostile_upstream() as registry:
        registry.publish("slow-pkg", "1.0.0")
        registry.routes["/slow-pkg" if what == "document" else registry.tarball_path("slow-pkg", "1.0.0")] = _trickle
        started = time.monotonic()
        assert _import(config, "registry", "slow-pkg", "--from", registry.base, "--download-deadline", "1.5") == 1
        elapsed = time.monotonic() - started
    assert "did not finish within the 1.5 s download deadline" in capsys.readouterr().err
    assert elapsed < 20  # one attempt, cut at its deadline (the trickle would take 5000 s)
    assert not (root / "content" / "slow-pkg").exists() and not list((root / "data").rglob("*.part"))


def test_every_request_deadline_shares_one_timer_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold install through the mirror makes a request per document and tarball: their deadlines
    are kept by one thread, not a thread started per request; a trickle among them is still cut."""
    started: list[threading.Thread] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread)
        start(thread)

    with hostile_upstream() as registry:
        for index in range(20):
            registry.publish(f"quick-{index}", "1.0.0")
        registry.publish("slow-pkg", "1.0.0")
        registry.routes["/slow-pkg"] = _trickle
        monkeypatch.setattr(threading.Thread, "start", counted)
        client = RegistryClient(registry.base, attempts=1, deadline=1.5)
        for index in range(20):
            assert client.document(f"quick-{index}")["name"] == f"quick-{index}"
        begun = time.monotonic()
        with pytest.raises(ImportProblem, match="did not finish within the 1.5 s download deadline"):
            client.document("slow-pkg")
        elapsed = time.monotonic() - begun
    # The loopback server starts a thread per connection; every other thread started is the client's.
    own = [thread for thread in started if not thread.name.endswith("(process_request_thread)")]
    assert len(own) <= 1, f"{len(own)} threads started for 21 requests: {[thread.name for thread in own]}"
    assert elapsed < 20  # cut at its deadline (the trickle would take 5000 s)


def _flood(sent: list[int], announce: bool) -> object:
    """A 64 MiB body in 64 KiB writes, counting what the client let through before it hung up."""
    total = 64 * 1024 * 1024

    def route(handler: object) -> None:
        handler.send_response(200)  # type: ignore[attr-defined]
        if announce:
            handler.send_header("Content-Length", str(total))  # type: ignore[attr-defined]
        handler.end_headers()  # type: ignore[attr-defined]
        chunk = b"\0" * 65536
        try:
            for _ in range(total // len(chunk)):
                handler.wfile.write(chunk)  # type: ignore[attr-defined]
                sent[0] += len(chunk)
        except OSError:
            return

    return route


@pytest.mark.parametrize("announce", [False, True], ids=["streamed", "announced"])
def test_a_tarball_over_the_cap_is_refused_before_it_is_all_read(tmp_path: Path, announce: bool, capsys: pytest.CaptureFixture[str]) -> None:
    root, config = make_root(tmp_path, "limits:\n  max_archive_bytes: 1048576\n")
    sent = [0]
    with hostile_upstream() as registry:
        registry.publish("huge-pkg", "1.0.0")
        registry.routes[registry.tarball_path("huge-pkg", "1.0.0")] = _flood(sent, announce)  # type: ignore[assignment]
        assert _import(config, "registry", "huge-pkg", "--from", registry.base) == 1
    err = capsys.readouterr().err
    assert ("announces 67108864 bytes, more than the 1048576-byte cap" if announce else "larger than the 1048576-byte cap") in err
    assert sent[0] < 16 * 1024 * 1024  # the client stopped reading long before the 64 MiB end
    assert not (root / "content" / "huge-pkg").exists() and not list((root / "data").rglob("*.part"))


def test_a_download_streams_to_disk_and_never_holds_the_body(tmp_path: Path) -> None:
    body = bytes(range(256)) * (32 * 1024 * 1024 // 256)  # 32 MiB
    with hostile_upstream() as registry:
        registry.files["/big.tgz"] = body
        client = RegistryClient(registry.base)
        tracemalloc.start()
        try:
            client.download(f"{registry.base}big.tgz", "big", tmp_path / "big.tgz", max_bytes=64 * 1024 * 1024)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        with pytest.raises(ImportProblem, match="more than the 1000-byte cap"):
            client.download(f"{registry.base}big.tgz", "big", tmp_path / "capped.tgz", max_bytes=1000)
    assert (tmp_path / "big.tgz").read_bytes() == body
    # The server thread's own copy of the body is not counted: it was made before tracing began.
    assert peak < 4 * 1024 * 1024, f"the client held {peak} bytes at once"


# ---------------------------------------------------------------- the same, on the mirror's kept connections

def _kept_client(registry: Any) -> tuple[RegistryClient, KeptConnections]:
    """A client as the mirror builds one for an uplink: its connections kept between requests
    (a request on a kept connection takes another path than urllib's), one already kept."""
    connections = KeptConnections(tls_context)
    client = RegistryClient(registry.base, attempts=1, deadline=1.5, connections=connections)
    assert client.document("quick")["name"] == "quick"
    assert sum(len(idle) for idle in connections.idle.values()) == 1
    return client, connections


@pytest.mark.parametrize("what", ["document", "tarball"])
def test_a_trickle_on_a_kept_connection_is_cut_at_the_deadline_and_the_connection_not_kept(tmp_path: Path, what: str) -> None:
    with hostile_upstream(keep_alive=True) as registry:
        registry.publish("quick", "1.0.0")
        registry.publish("slow-pkg", "1.0.0")
        tarball = registry.tarball_path("slow-pkg", "1.0.0")
        registry.routes["/slow-pkg" if what == "document" else tarball] = _trickle
        client, connections = _kept_client(registry)
        begun = time.monotonic()
        with pytest.raises(ImportProblem, match="did not finish within the 1.5 s download deadline"):
            if what == "document":
                client.document("slow-pkg")
            else:
                client.download(registry.base.rstrip("/") + tarball, "slow-pkg@1.0.0", tmp_path / "slow.tgz", max_bytes=1 << 20)
        elapsed = time.monotonic() - begun
        assert not any(connections.idle.values())  # the cut connection, mid-body, is never handed out again
        assert client.document("quick")["name"] == "quick"  # the next request opens a fresh one
    assert elapsed < 20  # cut at its deadline (the trickle would take 5000 s)


def test_a_body_over_the_cap_on_a_kept_connection_is_refused_early_and_the_connection_not_kept(tmp_path: Path) -> None:
    sent = [0]
    with hostile_upstream(keep_alive=True) as registry:
        registry.publish("quick", "1.0.0")
        registry.publish("huge-pkg", "1.0.0")
        tarball = registry.tarball_path("huge-pkg", "1.0.0")
        registry.routes[tarball] = _flood(sent, announce=False)  # type: ignore[assignment]
        client, connections = _kept_client(registry)
        with pytest.raises(ImportProblem, match="larger than the 1048576-byte cap"):
            client.download(registry.base.rstrip("/") + tarball, "huge-pkg@1.0.0", tmp_path / "huge.tgz", max_bytes=1 << 20)
        assert not any(connections.idle.values())
        assert client.document("quick")["name"] == "quick"
    assert sent[0] < 16 * 1024 * 1024  # the client stopped reading long before the 64 MiB end
