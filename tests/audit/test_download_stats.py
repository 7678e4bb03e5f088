"""Download statistics (issue 30, acceptance 5): npm 11 installs through a real nginx (its config
from `registry-gen host-config nginx --standalone --access-log`) in front of `registry-gen serve`;
`registry-gen stats` on nginx's own access log gives exactly the downloads each tarball had, into
the package's downloads.json, and the package page shows them in Chromium. Running it again on
the same log, on the log rotated and compressed, or on the log grown since, counts nothing twice;
hostile lines are skipped and counted; HEAD, 206 and 304 are not downloads."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from tests.hosts.servers import free_port, nginx_server
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball
from tests.site.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.support import Npm

pytestmark = pytest.mark.slow

PUBLISHED = [("demo-pkg", "1.0.0"), ("demo-pkg", "1.1.0"), ("@team/other", "2.0.0")]
INSTALLS = ["demo-pkg@1.0.0", "demo-pkg@1.0.0", "demo-pkg@1.1.0", "@team/other@2.0.0", "demo-pkg@1.1.0", "demo-pkg@1.1.0"]


def _stats(root: Path, *logs: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "registry_gen", "stats", *map(str, logs), "--config", str(root / "registry.yaml")],
                          cwd=root, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _downloads(root: Path, name: str) -> dict[str, Any]:
    return json.loads((root / "public" / "-" / "web" / "package" / name / "downloads.json").read_bytes())


def _install(base: str, homes: Path, spec: str) -> None:
    """One install with a cache of its own: npm fetches the tarball once."""
    npm = Npm(homes / f"install-{len(list(homes.glob('install-*')))}", base)
    project = npm.home / "project"
    project.mkdir()
    (project / "package.json").write_text('{"name": "p", "version": "1.0.0"}')
    npm.run("install", spec, cwd=project)


def _tarball_gets(log: Path) -> Counter[str]:
    """The log's own record: 200 GETs per tarball path (what the counts must equal)."""
    found: Counter[str] = Counter()
    for line in log.read_text().splitlines():
        request, status = line.split('"')[1], line.split('"')[2].split()[0]
        if request.startswith("GET ") and ".tgz" in request and status == "200":
            found[request.split()[1]] += 1
    return found


def _odd_requests(base: str) -> None:
    """Requests that are not downloads: HEAD, a range (206), a revalidation (304), a missing one."""
    url = base + "demo-pkg/-/demo-pkg-1.0.0.tgz"
    assert http("HEAD", url).status == 200
    assert http("GET", url, headers={"Range": "bytes=0-9"}).status == 206
    etag = http("GET", base + "demo-pkg").headers["etag"]
    assert http("GET", base + "demo-pkg", headers={"If-None-Match": etag}).status == 304
    assert http("GET", base + "demo-pkg/-/demo-pkg-9.9.9.tgz").status == 404


def _page_counts(url: str) -> tuple[str, str, list[str]]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            problems: list[str] = []
            page.on("console", lambda message: problems.append(message.text) if message.type in ("error", "warning") else None)
            page.goto(url)
            page.wait_for_selector("#downloads:not([hidden])", timeout=15_000)
            return page.inner_text("#weekly-downloads"), page.inner_text("#v-1\\.0\\.0 .version-downloads"), problems
        finally:
            browser.close()


def test_stats_count_what_nginx_served_once_and_the_page_shows_it(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    root.mkdir()
    nginx_port, serve_port = free_port(), free_port()
    base = f"http://127.0.0.1:{nginx_port}/"
    (root / "registry.yaml").write_text(f"content_dir: content\nout_dir: public\ndata_dir: data\nport: {serve_port}\n"
                                        f"base_url: {base}\nsignup: open\n")  # fmt: skip
    server = RegistryProcess(root, config_only=True).start()
    log = root / "nginx" / "access.log"
    try:
        with nginx_server(root / "public", root / "nginx", nginx_port, api_upstream=f"127.0.0.1:{serve_port}",
                          extra_args=["--access-log", "--config", str(root / "registry.yaml")]):  # fmt: skip
            token = add_user(base, "alice", "alice-password-1")
            for name, version in PUBLISHED:
                assert http("PUT", base + name.replace("/", "%2f"), token=token, body=publish_body(name, version, tarball(name, version))).status == 201
            for spec in INSTALLS[:4]:
                _install(base, tmp_path / "npm", spec)
            _odd_requests(base)
            shutil.copy(log, tmp_path / "first-part.log")
            for spec in INSTALLS[4:]:
                _install(base, tmp_path / "npm", spec)
            assert Counter(_tarball_gets(log)) == {"/demo-pkg/-/demo-pkg-1.0.0.tgz": 2, "/demo-pkg/-/demo-pkg-1.1.0.tgz": 3,
                                                   "/@team/other/-/other-2.0.0.tgz": 1}  # fmt: skip

            # The first part of the log (as a rotation would have left it, compressed), then the whole.
            rotated = tmp_path / "access.log.1.gz"
            rotated.write_bytes(gzip.compress((tmp_path / "first-part.log").read_bytes()))
            said = _stats(root, rotated)
            assert _downloads(root, "demo-pkg")["total"] == {"downloads": 3, "versions": {"1.0.0": 2, "1.1.0": 1}}
            assert " 4 downloads" in said and "skipped" not in said  # HEAD, 206, 304 and 404 are neither downloads nor hostile
            _stats(root, log, rotated)
            _stats(root, log)  # again: nothing new
            demo = _downloads(root, "demo-pkg")
            assert demo["total"] == {"downloads": 5, "versions": {"1.0.0": 2, "1.1.0": 3}}
            assert demo["last-week"]["downloads"] == 5 and demo["versions"] == {"1.0.0": 2, "1.1.0": 3}
            assert demo["range"]["downloads"] == [{"day": demo["last-week"]["end"], "downloads": 5}]
            assert _downloads(root, "@team/other")["total"] == {"downloads": 1, "versions": {"2.0.0": 1}}

            weekly, version_note, problems = _page_counts(base + "-/web/package/demo-pkg/")
            assert weekly == "5" and version_note == "2 downloads this week" and problems == []
    finally:
        server.stop()

    with open(log, "a", encoding="utf-8") as hostile:
        stamp = log.read_text().splitlines()[-1].split("[")[1].split("]")[0]
        hostile.write("garbage without any shape\n")
        hostile.write("x" * 100_000 + "\n")
        hostile.write(f'127.0.0.1 - - [{stamp}] "GET /demo-pkg/-/../../../etc/passwd-1.0.0.tgz HTTP/1.1" 200 10 "-" "evil"\n')
        hostile.write(f'127.0.0.1 - - [{stamp}] "GET /unknown-pkg/-/unknown-pkg-1.0.0.tgz HTTP/1.1" 200 10 "-" "npm/11"\n')
        hostile.write(f'127.0.0.1 - - [{stamp}] "GET /demo-pkg/-/demo-pkg-1.0.0.tgz HTTP/1.1" 200 10 "-" "npm/11"\n')
    said = _stats(root, log)
    assert " 1 downloads, skipped 4 (1 hostile path, 1 line too long, 1 not a request line, 1 unknown package or version)" in said
    assert _downloads(root, "demo-pkg")["total"]["versions"] == {"1.0.0": 3, "1.1.0": 3}
