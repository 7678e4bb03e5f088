"""Shared test helpers: real archives, a real static server, an isolated real npm."""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import os
import pty
import random
import select
import socket
import socketserver
import subprocess
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from registry_gen.archive import build_npm_tarball

NPM = os.environ.get("NPM", "npm")

# A port chosen by bind(("127.0.0.1", 0)) and released comes from the kernel's ephemeral range,
# which every outgoing connection on the machine draws from: any connect() (a client, psycopg,
# boto3, nginx's upstreams, another test run) may take it before the server the port was chosen for
# binds it (seen: "address 127.0.0.1:36621 is in use" with three test runs in parallel). Ports
# below that range are taken only by something binding them on purpose.
CHOSEN_PORTS_FROM = 20000


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port nobody listens on right now, at random below the ephemeral range when there is room
    (the caller binds it soon after); never 4873, 4874, 8081 or 8082 (below CHOSEN_PORTS_FROM)."""
    floor = _ephemeral_floor()
    for _ in range(100 if floor > CHOSEN_PORTS_FROM + 1000 else 0):
        port = random.randrange(CHOSEN_PORTS_FROM, floor)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken: try another
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:  # no room below: the OS's choice
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def manifest(name: str, version: str, **fields: Any) -> dict[str, Any]:
    data = {"name": name, "version": version, "description": f"{name} test package"}
    data.update(fields)
    return data


def make_tarball(
    folder: Path, name: str, version: str, *, files: dict[str, bytes | str] | None = None, filename: str | None = None, **fields: Any
) -> Path:
    """A real npm tarball (package/ prefix) holding package.json plus `files`."""
    entries = [("package.json", 0o644, json.dumps(manifest(name, version, **fields), indent=2).encode())]
    for path, data in (files or {"index.js": f"module.exports = {json.dumps(name + '@' + version)};\n"}).items():
        entries.append((path, 0o755 if path.startswith("bin/") else 0o644, data.encode() if isinstance(data, str) else data))
    target = folder / (filename or f"{name.replace('/', '-').lstrip('@')}-{version}.tgz")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(build_npm_tarball(entries))
    return target


def make_zip(folder: Path, name: str, version: str, *, top: str = "", files: dict[str, str] | None = None, **fields: Any) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(top + "package.json", json.dumps(manifest(name, version, **fields)))
        for path, data in (files or {"index.js": f"module.exports = {json.dumps(name)};\n"}).items():
            archive.writestr(top + path, data)
    target = folder / f"{name.replace('/', '-').lstrip('@')}-{version}.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(buffer.getvalue())
    return target


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@contextlib.contextmanager
def static_server(root: Path, handler_class: type[http.server.SimpleHTTPRequestHandler] = _QuietHandler) -> Iterator[str]:
    """The stdlib's plain http.server (no custom routing) on 127.0.0.1, ephemeral port."""
    handler = functools.partial(handler_class, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[int]:
    """Runs `server` (bound to 127.0.0.1) in a thread; yields its port, shuts it down after."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])  # type: ignore[index]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def recording_static_server(root: Path) -> Iterator[tuple[str, list[str]]]:
    """`static_server(root)` that also yields the list of paths asked for with GET, in order."""
    asked: list[str] = []

    class Recording(_QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            asked.append(self.path)
            super().do_GET()

    with static_server(root, Recording) as url:
        yield url, asked


@contextlib.contextmanager
def refusing_proxy() -> Iterator[tuple[str, list[str]]]:
    """An HTTP proxy on 127.0.0.1 that refuses every request (502) and records its request line
    (`CONNECT host:443 …` for HTTPS): a client sent through it reaches nothing outside, whatever
    this machine's network, and shows where it tried to go. Yields its URL and the lines."""
    seen: list[str] = []

    class Refuse(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            seen.append(self.rfile.readline(8192).decode("latin-1").strip())
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Refuse)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


class Npm:
    """The real npm, with its own cache and userconfig so tests never touch the user's."""

    def __init__(self, home: Path, registry: str, command: list[str] | None = None):
        self.home = home
        self.registry = registry
        self.command = command or [NPM]  # another npm: tests.hosts.clients.install_client's prefix
        home.mkdir(parents=True, exist_ok=True)
        self.userconfig = home / ".npmrc"
        self.userconfig.touch()
        self.env = {
            **os.environ,
            "HOME": str(home),
            "npm_config_userconfig": str(self.userconfig),
            "npm_config_cache": str(home / "cache"),
            "npm_config_registry": registry,
            "npm_config_audit": "false",
            "npm_config_fund": "false",
            "npm_config_update_notifier": "false",
            "npm_config_loglevel": "warn",
            "npm_config_prefer_online": "true",
        }
        self.env.pop("npm_config_nodedir", None)

    def run(self, *args: str, cwd: Path, check: bool = True, input: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*self.command, *args], cwd=cwd, env=self.env, capture_output=True, text=True, input=input, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"npm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc


def drive_terminal(command: list[str], env: dict[str, str], cwd: Path, answers: list[tuple[str, str]], deadline: float = 90) -> tuple[int, str]:
    """Runs `command` on a pseudo-terminal, typing each answer once its prompt shows."""
    master, slave = pty.openpty()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    seen = ""
    pending = list(answers)
    try:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 4096).decode("utf-8", "replace")
                except OSError:
                    break  # the child closed the terminal
                seen += chunk
                if pending and pending[0][0] in seen.rsplit("\n", 1)[-1]:
                    os.write(master, (pending.pop(0)[1] + "\r").encode())
            elif process.poll() is not None:
                break
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    return process.returncode, seen


def poll(condition: Callable[[], object], what: str, timeout: float = 60.0) -> object:
    """Polls `condition` until it returns something truthy; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)
