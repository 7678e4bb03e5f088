"""The benchmark's own tools do what its figures rely on: the synthetic registry's generation
picks up where it was cut off, a full build's worker processes show in its figures, and the
idle-connection holder really holds answered keep-alive connections, wrk's failed reads are
counted by status, and a deployment is measured only once its API is ready."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench import servers
from bench.synthetic import RegistrySpec, ensure_registry, package_name, version_string

REPO = Path(__file__).resolve().parents[2]
LEAN = RegistrySpec(packages=60, versions=3, lean=True, binary_share=0.0, prefix="t")


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_lean_archives_are_small(tmp_path: Path) -> None:
    content = ensure_registry(LEAN, tmp_path, progress=False)
    sizes = [p.stat().st_size for p in content.rglob("*.tgz")]
    assert len(sizes) == LEAN.total_versions
    assert max(sizes) < 4096 and sum(sizes) / len(sizes) < 2048


def test_an_interrupted_generation_carries_on_and_gives_the_same_registry(tmp_path: Path) -> None:
    whole = _snapshot(ensure_registry(LEAN, tmp_path / "once", progress=False))
    home = tmp_path / "cut" / LEAN.key
    ensure_registry(LEAN, tmp_path / "cut", progress=False)
    log = (home / ".batches").read_text().splitlines()
    starts = sorted(int(line.split()[0]) for line in log)
    assert len(starts) > 2  # several batches, so cutting some off below means something
    done = next(line for line in log if int(line.split()[0]) == starts[0])
    (home / ".batches").write_text(done + "\n" + "7")  # one batch finished, a torn line after it
    (home / ".complete").unlink()
    kept = {f"-{index:05d}" for index in range(starts[0], starts[1])}  # that batch's packages
    for path in (home / "content").rglob("*"):
        if path.is_file() and not any(mark in str(path) for mark in kept):
            path.unlink()  # everything the unfinished batches wrote, gone
    finished = next((home / "content").rglob("*-00000-1.0.0.tgz"))
    finished.write_bytes(b"left as it was")  # the finished batch must not be generated again
    ensure_registry(LEAN, tmp_path / "cut", progress=False)
    assert finished.read_bytes() == b"left as it was"
    finished.write_bytes(whole[str(finished.relative_to(home / "content"))])
    assert _snapshot(home / "content") == whole
    archives = sum(len(data) for path, data in whole.items() if path.endswith(".tgz"))
    assert json.loads((home / ".complete").read_text())["bytes"] == archives  # the cut-off batches counted once



def test_a_new_release_keeps_its_latest_versions_dependencies(tmp_path: Path) -> None:
    # The publish figures compare scales; a release that dropped its dependencies would re-render
    # their pages (their Dependents lists) and measure the chosen package, not the registry's size.
    from bench.bench_build import new_archive
    from registry_gen.archive import read_archive_bytes

    content = ensure_registry(LEAN, tmp_path, progress=False)
    with_deps = 0
    for index in range(LEAN.packages):
        name = package_name(LEAN, index)
        latest = read_archive_bytes((content / name / f"{name.split('/')[-1]}-{version_string(LEAN.versions - 1)}.tgz").read_bytes())
        first = read_archive_bytes(new_archive(content, LEAN, index, "9.0.0").read_bytes())
        second = read_archive_bytes(new_archive(content, LEAN, index, "9.0.1").read_bytes())
        expected = latest.manifest.get("dependencies") or {}
        assert (first.manifest.get("dependencies") or {}) == (second.manifest.get("dependencies") or {}) == expected
        with_deps += bool(expected)
    assert with_deps  # the registry has packages with dependencies, so the check means something

# Starts the child build from a parent that first held 300 MB: the child's own figure must not show it.
_BIG_PARENT = """
import subprocess, sys
held = bytearray(300 << 20)
for at in range(0, len(held), 4096):
    held[at] = 1
del held
sys.exit(subprocess.run([sys.executable, "-m", "bench.bench_build", "--child", *sys.argv[1:]]).returncode)
"""


def test_a_full_build_reports_its_worker_processes_and_its_own_memory(tmp_path: Path) -> None:
    content = ensure_registry(RegistrySpec(packages=40, versions=3, lean=True, binary_share=0.0), tmp_path, progress=False)
    proc = subprocess.run(
        [sys.executable, "-c", _BIG_PARENT, str(content), str(tmp_path / "public")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["versions"] == 120 and figures["errors"] == []
    assert figures["worker_rss_mb"] > 5  # 120 archives go to worker processes: they must show
    assert 5 < figures["rss_mb"] < 200  # the build's own peak, not its parent's 300 MB
    assert "build read: 120/120" in proc.stderr


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        body = b'{"ok":true}'
        self.send_response(503 if self.path.startswith("/down") else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def _established_to(port: int) -> int:
    """Open TCP connections from this process to 127.0.0.1:port (its sockets, by /proc/net/tcp)."""
    wanted = f"0100007F:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[2] == wanted and row.split()[3] == "01")


def test_idle_connections_are_answered_then_held_open(server: ThreadingHTTPServer) -> None:
    port = server.server_address[1]
    with servers.idle_connections(f"http://127.0.0.1:{port}/doc", 20, deadline=30) as answered:
        assert answered == 20
        assert _established_to(port) == 20
    assert _established_to(port) < 20  # closed on exit (a few may linger in the kernel's close)


@pytest.mark.skipif(not Path(servers.WRK).exists(), reason=f"wrk is not installed at {servers.WRK}")
def test_wrk_counts_failed_reads_by_status(server: ThreadingHTTPServer, tmp_path: Path) -> None:
    script = tmp_path / "paths.lua"
    script.write_text('local i = 0\nrequest = function()\n  i = i + 1\n'
                      '  return wrk.format("GET", i % 2 == 0 and "/down" or "/doc")\nend\n' + servers.STATUS_COUNTER)  # fmt: skip
    result = servers.wrk(f"http://127.0.0.1:{server.server_address[1]}/", seconds=1, connections=2, threads=1, script=script)
    assert result["non_2xx"] > 0
    assert result["status_503"] == result["non_2xx"]  # every failure counted, under its status, and no success
    assert servers.error_statuses(result) == f"503 ×{int(result['non_2xx']):,}"


@pytest.mark.skipif(not Path(servers.WRK).exists(), reason=f"wrk is not installed at {servers.WRK}")
def test_wrk_refuses_a_script_it_cannot_run(server: ThreadingHTTPServer, tmp_path: Path) -> None:
    script = tmp_path / "broken.lua"
    script.write_text('request = function()\n  return wrk.format("GET", "/doc\nend\n')  # an unfinished string
    with pytest.raises(RuntimeError, match="unfinished string"):  # not a run against the bare URL
        servers.wrk(f"http://127.0.0.1:{server.server_address[1]}/", seconds=1, connections=2, threads=1, script=script)


def test_a_deployment_is_yielded_once_its_api_is_ready(tmp_path: Path) -> None:
    from bench.bench_mirror import deployment

    with deployment(tmp_path / "registry", "") as url:
        try:
            urllib.request.urlopen(url + "-/whoami", timeout=30)
            status = 200
        except urllib.error.HTTPError as answer:
            status = answer.code
    assert status == 401  # the API's own answer to no token, not its 503 "this instance is starting"
