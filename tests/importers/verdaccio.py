"""A real Verdaccio 6.8.0 for the import/export tests: installed once with npm into a cache folder
outside the checkout, run on 127.0.0.1 with an ephemeral port and a config in a temp folder."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from tests.hosts.clients import clean_env
from tests.hosts.servers import free_port, server_process

NPM = os.environ.get("NPM", "npm")
CACHE = Path(os.environ.get("REGISTRY_GEN_TEST_CACHE", Path.home() / ".cache" / "registry-gen-tests"))
VERDACCIO_VERSION = "6.8.0"
VERDACCIO_DIR = CACHE / f"verdaccio-{VERDACCIO_VERSION}"
# verdaccio-audit asks for node-fetch@cjs, a dist-tag npm cannot resolve any more: pin the release it named.
_PACKAGE_JSON = {
    "name": "verdaccio-for-tests",
    "private": True,
    "dependencies": {"verdaccio": VERDACCIO_VERSION},
    "overrides": {"node-fetch": "2.7.0"},
}


def install_verdaccio() -> Path:
    """The path of Verdaccio's bin script, installing it into the cache first when missing."""
    entry = VERDACCIO_DIR / "node_modules" / "verdaccio" / "bin" / "verdaccio"
    VERDACCIO_DIR.mkdir(parents=True, exist_ok=True)
    with FileLock(str(VERDACCIO_DIR.parent / ".verdaccio-install.lock"), timeout=900):
        if not entry.exists():
            (VERDACCIO_DIR / "package.json").write_text(json.dumps(_PACKAGE_JSON, indent=2) + "\n")
            proc = subprocess.run(
                [NPM, "install", "--no-audit", "--no-fund", "--loglevel=error", "--cache", str(CACHE / "npm-cache")],
                cwd=VERDACCIO_DIR, capture_output=True, text=True, timeout=900, env=clean_env(),
            )  # fmt: skip
            if proc.returncode != 0 or not entry.exists():
                raise RuntimeError(f"installing verdaccio {VERDACCIO_VERSION} failed:\n{proc.stdout}\n{proc.stderr}")
    return entry


def write_config(
    root: Path, storage: Path, htpasswd: Path, publishers: dict[str, str] | None = None, proxy: str | None = None
) -> Path:
    """No uplinks (unless `proxy`): everything Verdaccio serves is what the test put into its storage.
    `publishers`: {package pattern: space-separated users} allowed to publish (the rest: $authenticated).
    `proxy`: an upstream registry URL every package is proxied to (Verdaccio then fills its storage)."""
    config = root / "config.yaml"
    rules = "".join(
        f"  '{pattern}':\n    access: $all\n    publish: {users}\n    unpublish: {users}\n"
        for pattern, users in (publishers or {}).items()
    )
    uplinks = f"uplinks:\n  upstream:\n    url: {proxy}\n    timeout: 60s\n" if proxy else "uplinks: {}\n"
    proxied = "    proxy: upstream\n" if proxy else ""
    config.write_text(
        f"storage: {storage}\n"
        "auth:\n"
        "  htpasswd:\n"
        f"    file: {htpasswd}\n"
        "    max_users: 100\n"
        f"{uplinks}"
        "packages:\n"
        f"{rules}"
        "  '@*/*':\n"
        "    access: $all\n"
        "    publish: $authenticated\n"
        "    unpublish: $authenticated\n"
        f"{proxied}"
        "  '**':\n"
        "    access: $all\n"
        "    publish: $authenticated\n"
        "    unpublish: $authenticated\n"
        f"{proxied}"
        "server:\n"
        "  keepAliveTimeout: 5\n"
        "security:\n"
        "  api:\n"
        "    legacy: true\n"
        "log: { type: stdout, format: pretty, level: warn }\n"
    )
    return config


@contextmanager
def verdaccio_server(
    root: Path, storage: Path | None = None, htpasswd: Path | None = None, publishers: dict[str, str] | None = None,
    *, proxy: str | None = None, port: int | None = None,
) -> Iterator[str]:
    """Verdaccio serving `storage` (default root/storage); yields its base URL (trailing slash).
    `port`: listen there (a restart on the same address); default: a free one."""
    entry = install_verdaccio()
    storage = storage or root / "storage"
    htpasswd = htpasswd or root / "htpasswd"
    root.mkdir(parents=True, exist_ok=True)
    storage.mkdir(parents=True, exist_ok=True)
    config = write_config(root, storage, htpasswd, publishers, proxy)
    port = port or free_port()
    env = clean_env()
    env["HOME"] = str(root)
    argv = ["node", str(entry), "--config", str(config), "--listen", f"127.0.0.1:{port}"]
    with server_process(argv, root / "verdaccio.log", port, cwd=root, env=env):
        yield f"http://127.0.0.1:{port}/"
