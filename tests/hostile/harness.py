"""A real `registry-gen serve` that can be killed (SIGKILL) and restarted on the same folders,
its whole log kept in a file, and a small raw HTTP client.

The server runs in `root` (content/, public/, data/, registry.yaml). Each start appends to
`root/server.log`; the address is read from the line the server prints once it is ready.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from registry_gen.archive import build_npm_tarball
from registry_gen.settings import Limits
from tests.hosts.servers import stop_process

START_DEADLINE = 90.0
READY = re.compile(r"and the API at (http://\S+/)")


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def request(
    method: str, url: str, *, body: Any = None, raw: bytes | None = None, token: str | None = None,
    headers: dict[str, str] | None = None, timeout: float = 60,
) -> Reply:
    """One request on a fresh connection; the path is sent exactly as given (no re-quoting)."""
    parts = urlsplit(url)
    sent = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, body=data, headers=sent)
        response = connection.getresponse()
        return Reply(response.status, response.getheaders(), response.read())
    finally:
        connection.close()


def limits_yaml(limits: Limits) -> str:
    return "limits:\n" + "".join(f"  {f.name}: {getattr(limits, f.name)}\n" for f in dataclasses.fields(limits))


@dataclass
class Server:
    root: Path
    limits: Limits | None = None
    threads: int = 4
    base: str = ""
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    extra_config: str = ""
    _log_offset: int = field(default=0, repr=False)

    @property
    def content(self) -> Path:
        return self.root / "content"

    @property
    def out(self) -> Path:
        return self.root / "public"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self) -> Server:
        self.content.mkdir(parents=True, exist_ok=True)
        config = self.root / "registry.yaml"
        if not config.exists():
            signup = "" if "signup:" in self.extra_config else "signup: open\n"  # these tests sign users up
            config.write_text(signup + (limits_yaml(self.limits) if self.limits else "") + self.extra_config)
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        env["PYTHONUNBUFFERED"] = "1"
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "registry_gen", "serve", "content", "--out", "public",
                 "--host", "127.0.0.1", "--port", "0", "--threads", str(self.threads)],
                cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        self.starts += 1
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            text = self.log()[self._log_offset :]
            found = READY.search(text)
            if found:
                self.base = found.group(1)
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)  # polling the log file, bounded by the deadline
        self.stop()
        raise AssertionError("registry-gen serve did not start:\n" + self.log()[self._log_offset :])

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed or closed."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process, grace=30)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the npm protocol, raw

    def add_user(self, name: str, password: str = "correct-horse-battery-1") -> str:
        """npm adduser (the legacy PUT /-/user/org.couchdb.user:<name>); returns the token."""
        reply = request("PUT", f"{self.base}-/user/org.couchdb.user:{name}", body={
            "_id": f"org.couchdb.user:{name}", "name": name, "password": password,
            "email": f"{name}@example.com", "type": "user", "roles": [], "date": "2025-01-01T00:00:00.000Z",
        })
        assert reply.status == 201, (reply.status, reply.body)
        return str(reply.json["token"])

    def publish(self, name: str, version: str, token: str, data: bytes | None = None, timeout: float = 60) -> Reply:
        data = data if data is not None else tarball(name, version)
        return request("PUT", f"{self.base}{name.replace('/', '%2f')}", body=publish_body(name, version, data), token=token, timeout=timeout)


def tarball(name: str, version: str, **fields: Any) -> bytes:
    manifest = {"name": name, "version": version, "description": f"{name} for tests", "main": "index.js", **fields}
    return build_npm_tarball([
        ("package.json", 0o644, json.dumps(manifest).encode()),
        ("index.js", 0o644, f"module.exports = {json.dumps(name + '@' + version)};\n".encode()),
    ])


def publish_body(name: str, version: str, data: bytes, *, tag: str = "latest") -> dict[str, Any]:
    """What libnpmpublish sends for `npm publish`."""
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    bare = name.rsplit("/", 1)[-1]
    return {
        "_id": name, "name": name, "description": "test", "dist-tags": {tag: version},
        "versions": {version: {
            "name": name, "version": version, "main": "index.js", "_id": f"{name}@{version}",
            "dist": {"integrity": integrity, "shasum": hashlib.sha1(data).hexdigest(),
                     "tarball": f"http://example.invalid/{name}/-/{bare}-{version}.tgz"},
        }},
        "access": None,
        "_attachments": {f"{name}-{version}.tgz": {
            "content_type": "application/octet-stream", "data": base64.b64encode(data).decode(), "length": len(data),
        }},
    }


def packument(out: Path, name: str) -> dict[str, Any] | None:
    path = out / name / "index.html"
    return json.loads(path.read_bytes()) if path.exists() else None
