"""Build workers never outlive their process: SIGKILL `registry-gen build`, and `registry-gen serve`
during its build, while worker processes run; every worker must go, and a restarted `serve` must
bind the same port (a worker holding the listening socket used to make that fail)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import make_tarball

pytestmark = pytest.mark.slow

ARCHIVES = 400  # well past the build's threshold for worker processes
DEADLINE = 90.0


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":  # a zombie has exited already
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def _descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    tree = _children()
    living = {child for children in tree.values() for child in children}
    return pids & living


def _poll(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _content(root: Path) -> Path:
    content = root / "content"
    for n in range(ARCHIVES):
        make_tarball(content, f"orphan-{n:03d}", "1.0.0")
    return content


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}


def _kill_while_workers_run(process: subprocess.Popen[bytes]) -> set[int]:
    """SIGKILLs the process once it has worker processes (a fork server and its forks); returns them."""
    workers: set[int] = set()

    def has_workers() -> bool:
        assert process.poll() is None, "the process ended before it started workers"
        workers.update(_descendants(process.pid))
        return len(workers) >= 2

    _poll(has_workers, "worker processes")
    process.kill()
    process.wait(timeout=30)
    return workers


def test_sigkill_of_build_takes_its_workers_with_it(tmp_path: Path) -> None:
    content = _content(tmp_path)
    command = [sys.executable, "-m", "registry_gen", "build", str(content), "--out", str(tmp_path / "public")]
    build = subprocess.Popen(command, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = _kill_while_workers_run(build)
    _poll(lambda: not _alive(workers), f"workers {sorted(_alive(workers))} to exit after the build was killed")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(root: Path, port: int, output: int = subprocess.PIPE) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "registry_gen", "serve", str(root / "content"), "--out", str(root / "public"),
               "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(command, cwd=root, env=_env(), stdout=output, stderr=subprocess.STDOUT)


def test_sigkill_of_serve_during_its_build_frees_the_port(tmp_path: Path) -> None:
    _content(tmp_path)
    port = _free_port()
    server = _serve(tmp_path, port, subprocess.DEVNULL)
    workers = _kill_while_workers_run(server)
    _poll(lambda: not _alive(workers), f"workers {sorted(_alive(workers))} to exit after serve was killed")
    again = _serve(tmp_path, port)
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
