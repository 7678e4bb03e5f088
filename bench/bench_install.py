"""Cold `npm install` of a 100-package tree (issue 7, figure 5): the built tree served by nginx
against the same tree served by `python -m http.server`.

Cold = empty npm cache, no node_modules, no lockfile. The tree is the synthetic install tree
(bench/synthetic.py: 100 packages, 3 versions each, 10 direct dependencies whose closure is all
100). Each server gets its own build, because tarball URLs carry the server's address.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import servers
from bench.synthetic import CACHE_DIR, INSTALL_TREE, ensure_install_tree

NPM = os.environ.get("NPM", "npm")


def npm_env(home: Path, registry: str) -> dict[str, str]:
    env = {
        **os.environ,
        "HOME": str(home),
        "npm_config_userconfig": str(home / ".npmrc"),
        "npm_config_cache": str(home / "cache"),
        "npm_config_registry": registry,
        "npm_config_audit": "false",
        "npm_config_fund": "false",
        "npm_config_update_notifier": "false",
        "npm_config_loglevel": "error",
    }
    env.pop("npm_config_nodedir", None)
    return env


def cold_install(registry: str, roots: list[str], scratch: Path, npmrc: str = "") -> tuple[float, int]:
    """Seconds for one cold install, and how many packages it put in node_modules; `npmrc` is
    the user config's text (a token, say)."""
    home = scratch / "home"
    project = scratch / "project"
    for folder in (home, project):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    (home / ".npmrc").write_text(npmrc)
    manifest = {"name": "bench-project", "version": "1.0.0", "private": True, "dependencies": {r: "^1.0.0" for r in roots}}
    (project / "package.json").write_text(json.dumps(manifest, indent=2))
    started = time.perf_counter()
    proc = subprocess.run(
        [NPM, "install", "--ignore-scripts", "--no-audit", "--no-fund"],
        cwd=project,
        env=npm_env(home, registry),
        capture_output=True,
        text=True,
        timeout=900,
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"npm install failed ({proc.returncode}): {proc.stderr[-1500:]}")
    hidden = json.loads((project / "node_modules" / ".package-lock.json").read_text())
    installed = sum(1 for key in hidden.get("packages", {}) if key.startswith("node_modules/"))
    return seconds, installed


def _build(content: Path, out: Path, base_url: str) -> None:
    from registry_gen.build import run_build
    from registry_gen.settings import Settings

    shutil.rmtree(out, ignore_errors=True)
    result = run_build(Settings(content_dir=content, out_dir=out, base_url=base_url))
    if result.errors:
        raise RuntimeError(f"build of the install tree failed: {result.errors[:3]}")


def measure(kind: str, content: Path, roots: list[str], scratch: Path, repeats: int) -> tuple[list[float], int]:
    port = servers.free_port()
    base_url = f"http://127.0.0.1:{port}/"
    out = scratch / f"public-{kind}"
    _build(content, out, base_url)
    timings: list[float] = []
    installed = 0
    if kind == "nginx":
        server = servers.nginx(out, scratch / "nginx-runtime", port)
    else:
        server = servers.http_server(out, port)
    with server as url:
        assert url == base_url
        for rep in range(repeats):
            seconds, installed = cold_install(base_url, roots, scratch / f"{kind}-{rep}")
            timings.append(seconds)
    return timings, installed


def run(quick: bool) -> list[dict[str, Any]]:
    if shutil.which(NPM) is None:
        return [_missing("npm is not installed")]
    if not servers.nginx_available():
        return [_missing(f"nginx is not installed at {servers.NGINX} (`make system-deps`)")]
    content, roots = ensure_install_tree()
    repeats = 1 if quick else 5
    with tempfile.TemporaryDirectory(prefix="bench-install-", dir=CACHE_DIR) as folder:
        scratch = Path(folder)
        os.chmod(scratch, 0o755)
        plain, plain_count = measure("http.server", content, roots, scratch, repeats)
        served, served_count = measure("nginx", content, roots, scratch, repeats)
    baseline = statistics.median(plain)
    value = statistics.median(served)
    expected = INSTALL_TREE.packages
    note = (
        f"median of {repeats} cold installs each (empty cache, no lockfile); "
        f"installed {served_count} packages via nginx, {plain_count} via http.server (expected {expected}); "
        f"individual runs nginx {', '.join(f'{t:.2f}' for t in served)} s, "
        f"http.server {', '.join(f'{t:.2f}' for t in plain)} s. npm's own work (resolution, extraction, "
        "integrity checks) dominates; the server's share is small on loopback"
    )
    return [
        {
            "figure": f"Cold npm install, {expected}-package tree, nginx",
            "value": round(value, 2),
            "unit": "s",
            "baseline": round(baseline, 2),
            "ratio": round(value / baseline, 2),
            "goal": "report (no goal); baseline = python -m http.server",
            "met": None,
            "note": note,
        },
        {
            "figure": f"Cold npm install, {expected}-package tree, python -m http.server",
            "value": round(baseline, 2),
            "unit": "s",
            "baseline": None,
            "ratio": None,
            "goal": "baseline",
            "met": None,
            "note": "the plain stdlib server: answers /<name> with a 301 to /<name>/ and serves index.html",
        },
    ]


def _missing(reason: str) -> dict[str, Any]:
    return {
        "figure": "Cold npm install, 100-package tree",
        "value": None,
        "unit": "s",
        "baseline": None,
        "ratio": None,
        "goal": "report",
        "met": None,
        "note": f"not measured: {reason}",
    }
