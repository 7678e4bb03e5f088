"""Servers the benchmarks start and stop: nginx, `python -m http.server`, `registry-gen serve`.

All on 127.0.0.1, ephemeral ports, temp runtime folders; every process started here is stopped
here (by its own pid, never by name).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support import free_port  # one port chooser for tests and benches: at random below the ephemeral range (tests/support.py)

NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")
WRK = os.environ.get("WRK", "/usr/bin/wrk")


def wait_for_port(port: int, process: subprocess.Popen[bytes] | None = None, deadline: float = 60.0) -> None:
    """Polls until something accepts connections on 127.0.0.1:port (or the process dies)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with status {process.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {deadline:.0f} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@contextlib.contextmanager
def _listening(command: list[str], port: int, stderr: int = subprocess.DEVNULL) -> Iterator[str]:
    """A server process that listens on 127.0.0.1:`port`; yields its base URL, stops it after."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop(process)


def nginx_available() -> bool:
    return Path(NGINX).exists()


def nginx_conf(root: Path, port: int) -> str:
    """The generator's own nginx config (registry_gen.hosting) when present, else a minimal one."""
    user = "root" if os.geteuid() == 0 else None  # temp folders are 0700: workers must be able to read them
    try:
        from registry_gen.hosting import nginx_config

        return nginx_config(root, f"127.0.0.1:{port}", user=user, worker_processes="auto", access_log=False)
    except ImportError:
        user_line = f"user {user};\n" if user else ""
        return f"""{user_line}worker_processes auto;
pid nginx.pid;
error_log error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path client_body_temp;
    proxy_temp_path proxy_temp;
    fastcgi_temp_path fastcgi_temp;
    uwsgi_temp_path uwsgi_temp;
    scgi_temp_path scgi_temp;
    sendfile on;
    server {{
        listen 127.0.0.1:{port};
        root "{root}";
        location / {{
            default_type application/json;
            try_files $uri/index.html $uri =404;
        }}
    }}
}}
"""


@contextlib.contextmanager
def nginx(root: Path, runtime: Path, port: int | None = None) -> Iterator[str]:
    """nginx serving `root`; yields its base URL (trailing slash)."""
    port = port or free_port()
    runtime.mkdir(parents=True, exist_ok=True)
    conf = runtime / "nginx.conf"
    conf.write_text(nginx_conf(root, port))
    with _listening([NGINX, "-p", str(runtime), "-c", str(conf), "-g", "daemon off;"], port, stderr=subprocess.PIPE) as url:
        yield url


@contextlib.contextmanager
def http_server(root: Path, port: int | None = None) -> Iterator[str]:
    """The stdlib's `python -m http.server` serving `root`."""
    port = port or free_port()
    with _listening([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)], port) as url:
        yield url


def registry_gen_command() -> list[str] | None:
    """How to run `registry-gen` from this checkout, or None when `serve` is not there yet."""
    script = Path(sys.executable).with_name("registry-gen")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "registry_gen"]
    try:
        proc = subprocess.run([*command, "serve", "--help"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return command if proc.returncode == 0 else None


@contextlib.contextmanager
def registry_gen_serve(command: list[str], content: Path, workdir: Path, deadline: float = 1800.0) -> Iterator[tuple[str, Path]]:
    """`registry-gen serve` (builds content/ first, then serves); yields (base URL, out dir)."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "public"
    config = workdir / "registry.yaml"
    config.write_text(f"content_dir: {content}\nout_dir: {out}\ndata_dir: {workdir / 'data'}\n")
    log = workdir / "serve.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [*command, "serve", "--config", str(config), "--host", "127.0.0.1", "--port", "0"],
            cwd=workdir,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        end = time.monotonic() + deadline
        port = None
        while time.monotonic() < end and port is None:
            if process.poll() is not None:
                raise RuntimeError(f"registry-gen serve exited ({process.returncode}): {log.read_text()[-2000:]}")
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", log.read_text(errors="replace"))
            if found:
                port = int(found.group(1))
            else:
                time.sleep(0.1)
        if port is None:
            raise RuntimeError(f"registry-gen serve did not start within {deadline:.0f} s")
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/", out
    finally:
        stop(process)
        shutil.rmtree(workdir / "data", ignore_errors=True)


@contextlib.contextmanager
def nginx_and_api(work: Path, config: Path, nginx_conf: str, port: int, api_port: int) -> Iterator[str]:
    """`registry-gen api` over `config` on `api_port`, and nginx with `nginx_conf` (the project's
    `host-config nginx` output for `port`) in front of it; yields the URL nginx answers on, once
    the API is ready."""
    from tests.hosts.servers import wait_for_api

    runtime = work / "nginx"
    runtime.mkdir(exist_ok=True)
    (runtime / "nginx.conf").write_text(nginx_conf)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    with open(work / "api.log", "wb") as log:
        api = subprocess.Popen([sys.executable, "-m", "registry_gen", "api", "--config", str(config), "--host", "127.0.0.1",
                                "--port", str(api_port)], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    nginx = subprocess.Popen([NGINX, "-p", str(runtime), "-c", str(runtime / "nginx.conf"), "-g", "daemon off;"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        # Ready, not just listening: the API answers 503 while it starts (its temp-file sweep walks
        # the whole tree, seconds at 10,000 packages), and a run begun then counts those as errors.
        wait_for_api(api_port, api, deadline=600)
        wait_for_port(port, nginx)
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop(nginx)
        stop(api)


def wrk(
    url: str, *, seconds: int, connections: int = 32, threads: int = 2, headers: dict[str, str] | None = None, script: Path | None = None
) -> dict[str, float]:
    """Runs wrk (keep-alive) against one URL (or the paths a Lua `script` makes); requests/s,
    errors and latency percentiles."""
    command = [WRK, f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", *(["-s", str(script)] if script else [])]
    for key, value in (headers or {}).items():
        command += ["-H", f"{key}: {value}"]
    proc = subprocess.run([*command, url], capture_output=True, text=True, timeout=seconds + 60)
    if proc.returncode != 0 or proc.stderr.strip():  # a Lua error leaves wrk running, on the bare URL
        raise RuntimeError(f"wrk failed: {proc.stderr or proc.stdout}")
    text = proc.stdout
    rate = re.search(r"Requests/sec:\s*([\d.]+)", text)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", text)
    result = {
        "rps": float(rate.group(1)) if rate else 0.0,
        "non_2xx": float(non_2xx.group(1)) if non_2xx else 0.0,
        "socket_errors": float(sum(int(x) for x in socket_errors.groups())) if socket_errors else 0.0,
    }
    if p99:
        scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
        result["p99_ms"] = float(p99.group(1)) * scale
    for status, count in re.findall(r"^status (\d{3}): (\d+)$", text, re.MULTILINE):  # printed by STATUS_COUNTER
        result[f"status_{status}"] = float(count)
    return result


# Lua to append to a wrk script: counts each status ≥ 400 in every thread, and prints the totals
# (`status 503: 1234`) when the run is done, so a figure can say what its errors were.
STATUS_COUNTER = """
local threads = {}
setup = function(thread) table.insert(threads, thread) end
statuses = {}
response = function(status, headers, body)
  if status > 399 then statuses[status] = (statuses[status] or 0) + 1 end
end
done = function(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses")) do total[status] = (total[status] or 0) + count end
  end
  for status, count in pairs(total) do io.write(string.format("status %d: %d\\n", status, count)) end
end
"""


def error_statuses(result: dict[str, float]) -> str:
    """The statuses of a `wrk` result's failed responses, as `503 ×1,234, 404 ×2` (or "none")."""
    counted = sorted((key.removeprefix("status_"), int(value)) for key, value in result.items() if key.startswith("status_"))
    return ", ".join(f"{status} ×{count:,}" for status, count in counted) or "none"


@contextlib.contextmanager
def idle_connections(url: str, count: int, *, deadline: float = 30.0) -> Iterator[int]:
    """Opens `count` keep-alive connections to `url`'s server, sends one GET of `url` on each and
    reads its status line, then holds them all open and silent (idle keep-alive clients, as a
    crowd of npm processes between requests leaves them). Yields how many were answered within
    `deadline` seconds; a connection the server never answered is held open too (it still takes
    a place in the server's queue). All are closed on exit."""
    match = re.match(r"http://([^:/]+):(\d+)(/.*)$", url)
    if match is None:
        raise ValueError(f"idle_connections needs an http://host:port/path URL, not {url!r}")
    host, port, path = match.group(1), int(match.group(2)), match.group(3)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: keep-alive\r\n\r\n".encode()
    end = time.monotonic() + deadline
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            connection = socket.create_connection((host, port), timeout=max(0.1, end - time.monotonic()))
            held.append(connection)
            connection.sendall(request)
        yield _read_status_lines(held, end)
    finally:
        for connection in held:
            connection.close()


def _read_status_lines(connections: list[socket.socket], end: float) -> int:
    """How many of `connections` received an HTTP 200 status line before `end` (bodies are left
    unread in the socket buffers: only the server's side matters, and it has sent them)."""
    import selectors

    received = {connection: b"" for connection in connections}
    answered = 0
    with selectors.DefaultSelector() as selector:
        for connection in connections:
            connection.setblocking(False)
            selector.register(connection, selectors.EVENT_READ)
        while received and time.monotonic() < end:
            for key, _ in selector.select(timeout=max(0.0, end - time.monotonic())):
                connection = key.fileobj
                assert isinstance(connection, socket.socket)
                chunk = connection.recv(65536)
                received[connection] += chunk
                if b"\r\n" in received[connection] or not chunk:
                    answered += received[connection].startswith(b"HTTP/1.1 200")
                    selector.unregister(connection)
                    del received[connection]
    return answered


HELLO_WSGI = """
import sys, waitress
def app(environ, start_response):
    body = b'{"hello":"world"}'
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
waitress.serve(app, host="127.0.0.1", port=int(sys.argv[1]), threads=int(sys.argv[2]), connection_limit=int(sys.argv[3]), _quiet=True)
"""


@contextlib.contextmanager
def waitress_hello(threads: int, connection_limit: int, port: int | None = None) -> Iterator[str]:
    """waitress answering a constant 17-byte body from a one-line WSGI app, in its own process:
    the ceiling of the server itself (what any app under it can reach at most)."""
    port = port or free_port()
    with _listening([sys.executable, "-c", HELLO_WSGI, str(port), str(threads), str(connection_limit)], port) as url:
        yield url
