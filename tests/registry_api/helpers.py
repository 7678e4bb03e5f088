"""Helpers for the write-API tests: a real `registry-gen serve` subprocess and raw HTTP."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry_gen.archive import build_npm_tarball
from tests.hosts.servers import stop_process
from tests.support import Npm

START_DEADLINE = 60.0
# Every server started by the running test: a failing test shows what they logged (tests/conftest.py),
# since a 500 in CI says nothing by itself and the server's traceback is only in its output.
STARTED: list[RegistryProcess] = []


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


def http(
    method: str,
    url: str,
    *,
    body: Any = None,
    raw: bytes | None = None,
    token: str | None = None,
    basic: tuple[str, str] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> Reply:
    """One request with urllib; HTTP errors are returned, not raised."""
    sent = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        sent.setdefault("Content-Type", "application/json")
    elif raw is not None:
        sent.setdefault("Content-Type", "application/octet-stream")
    if token:
        sent["Authorization"] = f"Bearer {token}"
    if basic:
        sent["Authorization"] = "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, {k.lower(): v for k, v in response.headers.items()}, response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, {k.lower(): v for k, v in error.headers.items()}, error.read())


def add_user(base: str, name: str, password: str = "correct-horse-1", email: str | None = None) -> str:
    """npm adduser's legacy request; returns the token."""
    reply = http("PUT", f"{base}-/user/org.couchdb.user:{name}", body={
        "_id": f"org.couchdb.user:{name}", "name": name, "password": password,
        "email": email or f"{name}@example.com", "type": "user", "roles": [], "date": "2025-01-01T00:00:00.000Z",
    })
    assert reply.status == 201, (reply.status, reply.body)
    return str(reply.json["token"])


def tarball(name: str, version: str, **fields: Any) -> bytes:
    manifest = {"name": name, "version": version, "description": f"{name} for tests", "main": "index.js", **fields}
    return build_npm_tarball([
        ("package.json", 0o644, json.dumps(manifest).encode()),
        ("index.js", 0o644, f"module.exports = {json.dumps(name + '@' + version)};\n".encode()),
    ])


def publish_body(name: str, version: str, data: bytes, *, tag: str = "latest", length: int | None = None,
                 b64: str | None = None, **extra: Any) -> dict[str, Any]:
    """What libnpmpublish sends for `npm publish`."""
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    body = {
        "_id": name, "name": name, "description": "test", "dist-tags": {tag: version},
        "versions": {version: {
            "name": name, "version": version, "main": "index.js", "_id": f"{name}@{version}",
            "dist": {"integrity": integrity, "shasum": hashlib.sha1(data).hexdigest(),
                     "tarball": f"http://example.invalid/{name}/-/{name}-{version}.tgz"},
        }},
        "access": None,
        "_attachments": {f"{name}-{version}.tgz": {
            "content_type": "application/octet-stream",
            "data": b64 if b64 is not None else base64.b64encode(data).decode(),
            "length": len(data) if length is None else length,
        }},
    }
    body.update(extra)
    return body


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file under the roots with a digest of its bytes (and its mtime: rewrites count too)."""
    found: dict[str, str] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                stat = path.stat()
                found[str(path)] = f"{hashlib.sha256(path.read_bytes()).hexdigest()}:{stat.st_mtime_ns}"
    return found


@dataclass
class RegistryProcess:
    """`registry-gen serve --port 0` in its own folder (content/, public/, data/); `python` may be
    another release's interpreter, and `port` a fixed one (the same address across an upgrade)."""

    root: Path
    base: str = ""
    process: subprocess.Popen[str] | None = None
    output: list[str] = field(default_factory=list)
    extra_args: tuple[str, ...] = ()
    # `registry-gen serve` with no options, as a user runs it: root's registry.yaml says everything
    # (relative content_dir and out_dir, port, base_url).
    config_only: bool = False
    env: dict[str, str] = field(default_factory=dict)  # set for the server only (e.g. a test hook)
    python: str = sys.executable
    port: int = 0

    @property
    def content(self) -> Path:
        return self.root / "content"

    @property
    def out(self) -> Path:
        return self.root / "public"

    def start(self) -> RegistryProcess:
        self.content.mkdir(parents=True, exist_ok=True)
        config = self.root / "registry.yaml"
        if not config.exists():
            config.write_text("signup: open\n")  # these tests sign users up with npm adduser
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")} | self.env
        env["PYTHONUNBUFFERED"] = "1"
        if self.python != sys.executable:
            env.pop("PYTHONPATH", None)  # another release imports its own code only
        where = () if self.config_only else (
            str(self.content), "--out", str(self.out), "--host", "127.0.0.1", "--port", str(self.port), "--threads", "8")
        STARTED.append(self)
        self.process = subprocess.Popen(
            [self.python, "-m", "registry_gen", "serve", *where, *self.extra_args],
            cwd=self.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            found = re.search(r"and the API at (http://\S+/)", line)
            if found:
                self.base = found.group(1)
                return self
        self.stop()
        raise AssertionError("registry-gen serve did not start:\n" + "".join(self.output))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process)

    def npm(self, name: str, token: str | None = None) -> Npm:
        """An isolated npm whose user config holds `token` for this registry."""
        client = Npm(self.root / "npm-homes" / name, self.base)
        if token:
            host_path = self.base.removeprefix("http:")
            client.userconfig.write_text(f"{host_path}:_authToken={token}\n")
        return client

    def packument(self, name: str) -> dict[str, Any] | None:
        path = self.out / name / "index.html"
        return json.loads(path.read_bytes()) if path.exists() else None


def write_package(folder: Path, name: str, version: str, **fields: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text(json.dumps({"name": name, "version": version, "main": "index.js", **fields}, indent=2))
    (folder / "index.js").write_text(f"module.exports = {json.dumps(name + '@' + version)};\n")
    return folder


def gzip_json(data: Any) -> bytes:
    import gzip

    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as handle:
        handle.write(json.dumps(data).encode())
    return buffer.getvalue()
