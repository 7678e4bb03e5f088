"""Publishing through the write API: what the server adds, and what `npm publish` costs overall.

A real `registry-gen serve` (waitress, 8 threads) runs as a subprocess on 127.0.0.1, as `make run`
starts it. Figures (medians; reported, never asserted):

- server share of a publish: a raw `PUT /<name>` of a 2 KB package (the body npm sends) until the
  new version is readable in the tree (the reply, then a GET of the abbreviated document that
  lists it) — on an empty registry, and on a registry already holding 1,000 (quick) or 10,000
  versions (bench.synthetic), where the incremental rebuild must stay proportional to the package;
- the whole `npm publish` of a 2 KB folder, wall time (npm's packing, its pre-publish GET, the PUT).

Goals are Verdaccio 6.8's figures on the same kind of request: 127 ms server share, 0.92 s for
the whole `npm publish`. Run `python -m bench.bench_publish [--quick]` by hand.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from registry_gen.archive import build_npm_tarball

VERDACCIO_SERVER_MS = 127.0
VERDACCIO_NPM_PUBLISH_S = 0.92
PASSWORD = "bench-password-1"


def _request(method: str, url: str, *, body: Any = None, token: str | None = None, accept: str | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if accept:
        headers["Accept"] = accept
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@contextmanager
def registry_server(root: Path) -> Iterator[str]:
    """`registry-gen serve --port 0` in `root` (content/ must exist); yields its base URL. The
    bench signs its user up through npm's adduser, so the registry opts into open sign-up (the
    default is admin-only)."""
    config = root / "registry.yaml"
    if not config.exists():
        config.write_text("signup: open\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    env["PYTHONUNBUFFERED"] = "1"
    process = subprocess.Popen(
        [sys.executable, "-m", "registry_gen", "serve", str(root / "content"), "--out", str(root / "public"),
         "--host", "127.0.0.1", "--port", "0"],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        deadline = time.monotonic() + 900  # the first build of a big registry takes a while
        while time.monotonic() < deadline:
            try:
                found = re.search(r"and the API at (http://\S+/)", lines.get(timeout=1))
            except queue.Empty:
                if process.poll() is not None:
                    raise RuntimeError("registry-gen serve exited during start-up") from None
                continue
            if found:
                yield found.group(1)
                return
        raise RuntimeError("registry-gen serve did not start")
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _filler(seed: str, size: int) -> bytes:
    """Incompressible text (base64 of hash output), so a '2 KB package' is a 2 KB tarball."""
    raw = b"".join(hashlib.sha256(f"{seed}-{i}".encode()).digest() for i in range(size // 32 + 1))
    return base64.b64encode(raw)[:size]


def package_files(name: str, version: str) -> list[tuple[str, int, bytes]]:
    manifest = {"name": name, "version": version, "description": "bench package", "main": "index.js", "license": "MIT"}
    code = b"module.exports = '" + _filler(f"{name}@{version}", 2200) + b"';\n"
    return [("package.json", 0o644, json.dumps(manifest, indent=2).encode()), ("index.js", 0o644, code)]


def publish_body(name: str, version: str, data: bytes) -> dict[str, Any]:
    return {
        "_id": name, "name": name, "dist-tags": {"latest": version}, "access": None,
        "versions": {version: {
            "name": name, "version": version, "main": "index.js", "_id": f"{name}@{version}",
            "dist": {"shasum": hashlib.sha1(data).hexdigest(),
                     "integrity": "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()},
        }},
        "_attachments": {f"{name}-{version}.tgz": {
            "content_type": "application/octet-stream", "data": base64.b64encode(data).decode(), "length": len(data),
        }},
    }


def add_user(base: str, name: str) -> str:
    status, body = _request("PUT", f"{base}-/user/org.couchdb.user:{name}", body={
        "name": name, "password": PASSWORD, "email": f"{name}@example.com", "type": "user", "roles": [],
    })
    if status != 201:
        raise RuntimeError(f"adduser failed: {status} {body[:200]!r}")
    return str(json.loads(body)["token"])


def server_share(base: str, token: str, name: str, rounds: int) -> tuple[list[float], int]:
    """Seconds from sending the PUT until a GET of the tree lists the version."""
    samples = []
    size = 0
    for index in range(rounds + 1):  # the first publish creates the package: not a steady-state sample
        version = f"1.0.{index}"
        data = build_npm_tarball(package_files(name, version))
        size = len(data)
        body = publish_body(name, version, data)
        started = time.perf_counter()
        status, reply = _request("PUT", base + name, body=body, token=token)
        if status != 201:
            raise RuntimeError(f"publish failed: {status} {reply[:300]!r}")
        while True:
            status, document = _request("GET", base + name, accept="application/vnd.npm.install-v1+json")
            if status == 200 and version in json.loads(document)["versions"]:
                break
            if time.perf_counter() - started > 60:
                raise RuntimeError(f"{name}@{version} never appeared in the tree")
        if index:
            samples.append(time.perf_counter() - started)
    return samples, size


def npm_publish_times(base: str, token: str, work: Path, rounds: int) -> tuple[list[float], float]:
    """Wall time of `npm publish` on a 2 KB folder, and of `npm --version` (node start-up, the floor)."""
    home = work / "npm-home"
    home.mkdir()
    npmrc = home / ".npmrc"
    npmrc.write_text(f"{base.removeprefix('http:')}:_authToken={token}\n")
    env = {**os.environ, "HOME": str(home), "npm_config_userconfig": str(npmrc), "npm_config_cache": str(home / "cache"),
           "npm_config_registry": base, "npm_config_update_notifier": "false", "npm_config_fund": "false",
           "npm_config_audit": "false", "npm_config_loglevel": "warn"}
    folder = work / "npm-package"
    folder.mkdir()
    samples = []
    for index in range(rounds + 1):  # the first run warms npm's own caches
        for path, _, data in package_files("bench-npm-publish", f"2.0.{index}"):
            (folder / path).write_bytes(data)
        started = time.perf_counter()
        subprocess.run(["npm", "publish"], cwd=folder, env=env, check=True, capture_output=True, timeout=300)
        if index:
            samples.append(time.perf_counter() - started)
    started = time.perf_counter()
    subprocess.run(["npm", "--version"], env=env, check=True, capture_output=True, timeout=60)
    return samples, time.perf_counter() - started


def _figure(figure: str, value: float, unit: str, baseline: float, goal: str, note: str) -> dict[str, Any]:
    return {"figure": figure, "value": round(value, 3), "unit": unit, "baseline": baseline,
            "ratio": round(value / baseline, 2), "goal": goal, "note": note}


def _preloaded(work: Path, quick: bool) -> tuple[Path, int]:
    from bench.synthetic import SCALES, ensure_registry

    versions = 1_000 if quick else 10_000
    source = ensure_registry(SCALES[versions], progress=False)
    target = work / "loaded"
    shutil.copytree(source, target / "content")
    return target, versions


def run(quick: bool) -> list[dict[str, Any]]:
    rounds = 10 if quick else 30
    npm_rounds = 3 if quick else 7
    work = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    results = []
    try:
        empty = work / "empty"
        (empty / "content").mkdir(parents=True)
        with registry_server(empty) as base:
            token = add_user(base, "bencher")
            samples, size = server_share(base, token, "bench-raw-publish", rounds)
            npm_samples, npm_floor = npm_publish_times(base, token, work, npm_rounds)
        results.append(_figure(
            "publish server share (PUT until readable), empty registry",
            statistics.median(samples) * 1000, "ms", VERDACCIO_SERVER_MS,
            f"<= {VERDACCIO_SERVER_MS:.0f} ms (Verdaccio 6.8)",
            f"median of {rounds}, {size} B tarball; p90 {statistics.quantiles(samples, n=10)[-1] * 1000:.1f} ms; "
            "includes the durable (fsync) writes of archive and meta and the incremental rebuild",
        ))
        loaded, versions = _preloaded(work, quick)
        with registry_server(loaded) as base:
            token = add_user(base, "bencher")
            samples, size = server_share(base, token, "bench-raw-publish", rounds)
        results.append(_figure(
            f"publish server share (PUT until readable), registry of {versions} versions",
            statistics.median(samples) * 1000, "ms", VERDACCIO_SERVER_MS,
            f"<= {VERDACCIO_SERVER_MS:.0f} ms (Verdaccio 6.8)",
            f"median of {rounds}, {size} B tarball; the rebuild looks only at the files the write touched, "
            "plus the front pages and search index that list every package",
        ))
        results.append(_figure(
            "npm publish wall time, 2 KB package",
            statistics.median(npm_samples), "s", VERDACCIO_NPM_PUBLISH_S,
            f"<= {VERDACCIO_NPM_PUBLISH_S} s (Verdaccio 6.8)",
            f"median of {npm_rounds}; `npm --version` alone takes {npm_floor:.2f} s here (node start-up, the floor)",
        ))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, a 1,000-version registry")
    args = parser.parse_args(argv)
    for row in run(args.quick):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
