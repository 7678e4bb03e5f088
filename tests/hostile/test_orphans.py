"""Build workers never outlive their process: SIGKILL `registry-gen build`, and `registry-gen serve`
during its build, while worker processes run; every worker must go, and a restarted `serve` must
bind the same port (a worker holding the listening socket used to make that fail)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.processes import alive, descendants, many_archives, poll, registry_env, serve
from tests.hosts.servers import free_port

pytestmark = pytest.mark.slow


def _kill_while_workers_run(process: subprocess.Popen[bytes]) -> set[int]:
    """SIGKILLs the process once it has worker processes (a fork server and its forks); returns them."""
    workers: set[int] = set()

    def has_workers() -> bool:
        assert process.poll() is None, "the process ended before it started workers"
        workers.update(descendants(process.pid))
        return len(workers) >= 2

    poll(has_workers, "worker processes")
    process.kill()
    process.wait(timeout=30)
    return workers


def test_sigkill_of_build_takes_its_workers_with_it(tmp_path: Path) -> None:
    content = many_archives(tmp_path)
    command = [sys.executable, "-m", "registry_gen", "build", str(content), "--out", str(tmp_path / "public")]
    build = subprocess.Popen(command, cwd=tmp_path, env=registry_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = _kill_while_workers_run(build)
    poll(lambda: not alive(workers), f"workers {sorted(alive(workers))} to exit after the build was killed")


def test_sigkill_of_serve_during_its_build_frees_the_port(tmp_path: Path) -> None:
    many_archives(tmp_path)
    port = free_port()
    server = serve(tmp_path, port, subprocess.DEVNULL)
    workers = _kill_while_workers_run(server)
    poll(lambda: not alive(workers), f"workers {sorted(alive(workers))} to exit after serve was killed")
    again = serve(tmp_path, port)
    try:
        assert again.stdout is not None
        lines = []
        for line in again.stdout:
            lines.append(line.decode("utf-8", "replace"))
            if "listening on" in lines[-1] or again.poll() is not None:
                break
        assert any(f":{port}/" in line and "listening on" in line for line in lines), "".join(lines)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
            connection.sendall(b"GET /orphan-001 HTTP/1.0\r\nHost: x\r\n\r\n")
            assert connection.recv(64).split(b" ")[1] == b"200"
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(timeout=60)
        if again.stdout is not None:
            again.stdout.close()
