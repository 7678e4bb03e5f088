"""Real hosts for the tests: nginx (config from `registry-gen host-config nginx`), a moto S3
server (filled by `registry-gen deploy`), and a GitHub-Pages-like static server."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry_gen.cli import main as registry_gen
from tests.support import free_port, static_server

NGINX = os.environ.get("NGINX", shutil.which("nginx") or "/usr/sbin/nginx")
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def stop_process(process: subprocess.Popen[Any], grace: float = 20) -> None:
    """Asks a server to stop (SIGTERM: it finishes what it owes), and kills it after `grace` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def wait_for_port(port: int, process: subprocess.Popen[Any] | None = None, deadline: float = 20.0) -> None:
    """Polls until something accepts on 127.0.0.1:port (or the process died, or time ran out)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening on {port}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {deadline}s")


def wait_for_api(port: int, process: subprocess.Popen[Any] | None = None, deadline: float = 60.0) -> None:
    """Polls until `registry-gen api` on 127.0.0.1:port is ready: it listens at once and answers
    503 while it starts (its tree brought up to date), then anything else."""
    end = time.monotonic() + deadline
    wait_for_port(port, process, deadline)
    while time.monotonic() < end:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"registry-gen api exited with {process.returncode} while starting")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ping", timeout=5):
                return
        except urllib.error.HTTPError as answer:
            if answer.code != 503:
                return
        except OSError:
            pass
        time.sleep(0.1)  # polling a condition with a deadline
    raise RuntimeError(f"registry-gen api on 127.0.0.1:{port} was not ready after {deadline}s")


def generate_nginx_config(
    tree: Path, runtime: Path, port: int, api_upstream: str | None = None, extra_args: Sequence[str] = ()
) -> Path:
    """The project's own config, through the real CLI; tests never write nginx config by hand."""
    runtime.mkdir(parents=True, exist_ok=True)
    conf = runtime / "nginx.conf"
    args = ["host-config", "nginx", "--standalone", "--tree", str(tree), "--listen", f"127.0.0.1:{port}",
            "--workers", "1", "--out", str(conf)]  # fmt: skip
    if api_upstream:
        args += ["--api-upstream", api_upstream]
    args += list(extra_args)
    if os.geteuid() == 0:
        # Workers would drop to `nobody`, who cannot enter pytest's 0700 temp folders.
        args += ["--user", pwd.getpwuid(os.geteuid()).pw_name]
    assert registry_gen(args) == 0
    return conf


def wait_for_pid_file(pid_file: Path, process: subprocess.Popen[Any], deadline: float = 60.0) -> None:
    """Polls until `process` wrote its pid into `pid_file`: nginx does so once its sockets are
    bound. A port found open says less: another process may have bound it since `free_port()`
    chose it (nginx then retries, and exits), and a test would talk to that process."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before writing {pid_file}")
        with contextlib.suppress(OSError):
            if pid_file.read_text().strip() == str(process.pid):
                return
        time.sleep(0.05)  # polling a condition with a deadline
    raise RuntimeError(f"{pid_file} did not name pid {process.pid} after {deadline}s")


@contextlib.contextmanager
def nginx_server(
    tree: Path, runtime: Path, port: int, api_upstream: str | None = None, extra_args: Sequence[str] = ()
) -> Iterator[str]:
    """A real nginx in the foreground on 127.0.0.1:port serving `tree`; yields its base URL."""
    conf = generate_nginx_config(tree, runtime, port, api_upstream, extra_args)
    check = subprocess.run([NGINX, "-t", "-p", str(runtime), "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    stderr = open(runtime / "stderr.log", "wb")  # noqa: SIM115 - closed below, after the process
    process = subprocess.Popen(
        [NGINX, "-p", str(runtime), "-c", str(conf), "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=stderr
    )
    try:
        try:
            wait_for_pid_file(runtime / "nginx.pid", process)
        except RuntimeError as exc:  # say why (a port another process took since free_port chose it?)
            said = (runtime / "stderr.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"{exc}; nginx said: {' | '.join(said) or 'nothing'}") from None
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/"
    finally:
        process.send_signal(signal.SIGQUIT)  # graceful: the master waits for its workers
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
        stderr.close()


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 in server mode on 127.0.0.1 (ephemeral port); yields the endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def aws_test_credentials(values: dict[str, str] = AWS_ENV) -> Iterator[None]:
    """boto3's usual place for credentials, the environment, holding `values` (restored after)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value



class _PagesHandler(http.server.SimpleHTTPRequestHandler):
    """What GitHub Pages does that matters here: decodes %2f, redirects a folder to its trailing
    slash, serves index.html (as text/html) and, for anything missing, /404.html with status 404;
    every response carries its fixed `Cache-Control: max-age=600`."""

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        page = Path(self.directory) / "404.html"
        if code != 404 or not page.is_file():
            super().send_error(code, message, explain)
            return
        body = page.read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


def pages_like_server(root: Path) -> contextlib.AbstractContextManager[str]:
    return static_server(root, _PagesHandler)


@dataclass
class Recorded:
    method: str
    path: str  # as it arrived, percent-encoding untouched
    headers: dict[str, str]
    body: bytes


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    records: list[Recorded]

    def _record(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.records.append(Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        reply = json.dumps({"ok": True, "method": self.command, "path": self.path}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = do_PURGE = _record  # noqa: N815 - stdlib naming

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@contextlib.contextmanager
def recording_upstream() -> Iterator[tuple[int, list[Recorded]]]:
    """A stand-in for `registry-gen api` that records what nginx forwards (routing tests only)."""
    records: list[Recorded] = []
    handler = type("Handler", (_RecordingHandler,), {"records": records})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), records
    finally:
        server.shutdown()
        server.server_close()


VARNISHD = os.environ.get("VARNISHD", shutil.which("varnishd") or "/usr/sbin/varnishd")
# The VCL docs/deploying/caches.md gives operators: PURGE from loopback purges by xkey (the
# surrogate keys a purge names) or else the URL; X-Cache says whether an answer came from the cache.
VARNISH_VCL = """vcl 4.1;
import xkey;

backend origin {{ .host = "127.0.0.1"; .port = "{port}"; }}

acl purgers {{ "127.0.0.1"; }}

sub vcl_recv {{
    if (req.method == "PURGE") {{
        if (client.ip !~ purgers) {{
            return (synth(403, "Forbidden"));
        }}
        if (req.http.xkey) {{
            set req.http.n-gone = xkey.purge(req.http.xkey);
            return (synth(200, "Invalidated " + req.http.n-gone + " objects"));
        }}
        return (purge);
    }}
}}

sub vcl_deliver {{
    if (obj.hits > 0) {{
        set resp.http.X-Cache = "HIT";
    }} else {{
        set resp.http.X-Cache = "MISS";
    }}
}}
"""


@contextlib.contextmanager
def varnish_server(runtime: Path, port: int, backend_port: int) -> Iterator[str]:
    """Debian's Varnish (with varnish-modules' xkey) in the foreground on 127.0.0.1:port, caching
    the origin on 127.0.0.1:backend_port; yields its base URL."""
    runtime.mkdir(parents=True, exist_ok=True)
    vcl = runtime / "registry.vcl"
    vcl.write_text(VARNISH_VCL.format(port=backend_port))
    argv = [VARNISHD, "-F", "-n", str(runtime / "work"), "-a", f"127.0.0.1:{port}", "-f", str(vcl), "-s", "malloc,32m", "-j", "none", "-T", "none"]
    with server_process(argv, runtime / "varnishd.log", port):
        yield f"http://127.0.0.1:{port}/"


@contextlib.contextmanager
def server_process(
    argv: Sequence[str], log_path: Path, port: int, *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A server process (output to `log_path`) that listens on 127.0.0.1:port; stopped on exit."""
    log = open(log_path, "wb")  # noqa: SIM115 - closed below, after the process
    process = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, process, deadline=60)
        yield process
    finally:
        stop_process(process)
        log.close()


@contextlib.contextmanager
def api_process(root: Path, config: Path, port: int, extra_env: dict[str, str] | None = None) -> Iterator[Path]:
    """`registry-gen api --config CONFIG` on 127.0.0.1:port behind a proxy on loopback, in `root`
    (no REGISTRY_* variable of the test run leaks in, only `extra_env`); yields its log file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")} | (extra_env or {})
    argv = [sys.executable, "-m", "registry_gen", "api", "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
            "--trusted-proxy", "127.0.0.1"]  # fmt: skip
    with server_process(argv, root / "api.log", port, cwd=root, env=env) as process:
        wait_for_api(port, process)
        yield root / "api.log"
