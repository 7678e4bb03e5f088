"""Verdaccio's registry-agnostic client suite, `@verdaccio/e2e-cli`, against `registry-gen serve`.

`make e2e` (CI runs it after `make test`) or `python -m tests.e2e_cli.run [--client npm11 ...]`.
For each client: a fresh `registry-gen serve` with open sign-up at `http://localhost:PORT/` (the
suite writes its auth line for `localhost`), then the whole battery with that client. Exit 0 only
when every test that applies passed; the ones that do not apply are skipped by name and listed in
compatibility page (docs/compatibility.md) with the reason (NOT_APPLICABLE below).

Downloads are cached outside the checkout: the suite in `~/.cache/registry-gen-tests/e2e-cli-*`,
the clients in `~/.cache/registry-gen-tests/clients` (the versions of tests/hosts/clients.py).
The suite's yarn 4 tests `npm pack` three Verdaccio yarn plugins that are not on the npm registry:
their bundles, built from source, are in `yarn-plugins/` and served from a loopback registry.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from registry_gen.archive import build_npm_tarball
from registry_gen.build import run_build
from registry_gen.settings import Settings
from tests.hosts.clients import CLIENTS, NPM, clean_env, install_client
from tests.hosts.servers import free_port, stop_process, wait_for_port
from tests.realworld.corpus import cache_root
from tests.support import static_server

SUITE_VERSION = "4.0.1"
SUITE_TIMEOUT = 900  # seconds for one client's whole battery (about 1-2 minutes when it works)
HERE = Path(__file__).resolve().parent
PLUGINS = HERE / "yarn-plugins"
PLUGIN_VERSIONS = {"npm-ping": "0.0.7", "npm-login": "0.0.10", "npm-deprecate": "0.0.9"}
# client name (tests/hosts/clients.py) -> the suite's --pm name
SUITE_NAMES = {"npm11": "npm", "npm10": "npm", "pnpm": "pnpm", "yarn4": "yarn-modern"}
NOT_APPLICABLE = {
    # Publishes `JSONStream-<id>` first: npm's rule for new packages refuses upper-case names
    # (the npm registry refuses them too), and a tree holding `JSONStream/` and `jsonstream/`
    # breaks on case-insensitive disks. registry-gen serves such legacy names from content/ only.
    "package-names": "new upper-case package names are refused, as on the npm registry",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def install_suite() -> Path:
    """The suite's entry script, installed once per version into the tests' cache folder."""
    prefix = cache_root() / f"e2e-cli-{SUITE_VERSION}"
    entry = prefix / "node_modules" / "@verdaccio" / "e2e-cli" / "bin" / "e2e-cli.js"
    if not entry.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [NPM, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
             f"@verdaccio/e2e-cli@{SUITE_VERSION}"],
            check=True, timeout=600, env=clean_env(),
        )  # fmt: skip
    return entry


def plugin_tarball(name: str) -> bytes:
    version = PLUGIN_VERSIONS[name]
    manifest = f'{{"name": "@verdaccio/yarn-plugin-{name}", "version": "{version}", "license": "MIT"}}'
    bundle = (PLUGINS / f"plugin-{name}.js").read_bytes()
    return build_npm_tarball([("package.json", 0o644, manifest.encode()),
                              (f"bundles/@yarnpkg/plugin-{name}.js", 0o644, bundle)])  # fmt: skip


@contextlib.contextmanager
def plugin_registry(root: Path) -> Iterator[str]:
    """A static registry (built by registry-gen, served by the stdlib) holding the three plugins."""
    content, out = root / "content", root / "public"
    content.mkdir(parents=True)
    out.mkdir(parents=True)
    for name, version in PLUGIN_VERSIONS.items():
        (content / f"yarn-plugin-{name}-{version}.tgz").write_bytes(plugin_tarball(name))
    with static_server(out) as base:
        run_build(Settings(content_dir=content, out_dir=out, base_url=base, data_dir=root / "data"))
        yield base


def battery_config(suite: Path, uplink_port: int) -> str:
    """registry.yaml for the battery: open sign-up, and the uplink and proxied patterns of the
    config the suite recommends (`--print-config`, for the mock uplink on `uplink_port`), as
    `registry-gen import verdaccio-config` translates them."""
    printed = subprocess.run(["node", str(suite), "--uplink-port", str(uplink_port), "--print-config"],
                             capture_output=True, text=True, check=True, timeout=120, env=clean_env())  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="e2e-config-") as scratch:
        config = Path(scratch) / "config.yaml"
        config.write_text(printed.stdout)
        translated = subprocess.run([sys.executable, "-m", "registry_gen", "import", "verdaccio-config", str(config)],
                                    capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    return "signup: open\n" + translated.stdout


@contextlib.contextmanager
def serve_registry(root: Path, config: str = "signup: open\n") -> Iterator[str]:
    """`registry-gen serve` with open sign-up, spelled http://localhost:PORT/ as the suite wants."""
    port = free_port()
    base = f"http://localhost:{port}/"
    (root / "content").mkdir(parents=True)
    (root / "registry.yaml").write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    with open(root / "serve.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "registry_gen", "serve", "content", "--out", "public", "--host", "127.0.0.1",
             "--port", str(port), "--base-url", base, "--threads", "8"],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for_port(port, process, deadline=60)
            yield base
        finally:
            stop_process(process)


def suite_env(workdir: Path, *, plugins: str | None, uplink_port: int | None = None) -> dict[str, str]:
    """The suite's processes get their own HOME, temp folder and npm cache (nothing of the caller's);
    `uplink_port`: where the uplink scenarios start their mock uplink (the registry proxies to it)."""
    env = clean_env()
    if uplink_port is not None:
        env["E2E_UPLINK_PORT"] = str(uplink_port)
    for name in ("home", "tmp", "npm-cache"):
        (workdir / name).mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(workdir / "home"), TMPDIR=str(workdir / "tmp"), npm_config_cache=str(workdir / "npm-cache"),
               npm_config_update_notifier="false", npm_config_audit="false", npm_config_fund="false")
    if plugins is not None:
        # Only the suite's `npm pack @verdaccio/yarn-plugin-*` reads this file; yarn 4 does not.
        (workdir / "home" / ".npmrc").write_text(f"@verdaccio:registry={plugins}\n")
    return env


def run_client(client: str, suite: Path, workdir: Path) -> tuple[int, str]:
    """The whole battery with one client against a fresh registry: (exit code, output without colours)."""
    clients_dir = Path(os.environ.get("REGISTRY_GEN_CLIENTS_DIR") or cache_root() / "clients")
    binary = install_client(CLIENTS[client], clients_dir)[-1]
    args = ["node", str(suite), "--pm", f"{SUITE_NAMES[client]}={binary}"]
    for name in NOT_APPLICABLE:
        args += ["--skip-test", name]
    uplink_port = free_port()
    with contextlib.ExitStack() as stack:
        plugins = stack.enter_context(plugin_registry(workdir / "plugins")) if client == "yarn4" else None
        registry = stack.enter_context(serve_registry(workdir / "registry", battery_config(suite, uplink_port)))
        proc = subprocess.run(
            [*args, "--registry", registry], cwd=workdir, env=suite_env(workdir, plugins=plugins, uplink_port=uplink_port),
            capture_output=True, text=True, timeout=SUITE_TIMEOUT,
        )  # fmt: skip
    return proc.returncode, _ANSI.sub("", proc.stdout + proc.stderr)


def timed_run(client: str, suite: Path, tmp: Path) -> tuple[int, str, float]:
    """run_client in `tmp/client`, its output kept in `tmp/client.log`: (exit code, output, seconds)."""
    started = time.monotonic()
    code, output = run_client(client, suite, tmp / client)
    (tmp / f"{client}.log").write_text(output)
    return code, output, time.monotonic() - started


def summary(output: str) -> list[str]:
    """The suite's per-test verdicts (PASS/FAIL/SKIP lines and one-line ✓/✗) and its totals."""
    keep = re.compile(r"^\s*(✓|✗|PASS|FAIL|SKIP|x |✓ )|passed,")
    return [line.rstrip() for line in output.splitlines() if keep.search(line)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", action="append", choices=sorted(SUITE_NAMES),
                        help="run only these clients (repeatable; default: all four)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, serve.log)")
    parser.add_argument("--jobs", type=int, default=2, metavar="N",
                        help="clients run at once, each with its own registry, ports, HOME and caches (default: 2)")
    options = parser.parse_args(argv)
    suite = install_suite()
    failed = []
    tmp = Path(tempfile.mkdtemp(prefix="registry-gen-e2e-cli-"))
    try:
        # The batteries wait on their client and registry far more than they compute: two at once
        # halve the part's time on two cores. Results are printed in the clients' order.
        with ThreadPoolExecutor(max_workers=max(1, options.jobs), thread_name_prefix="e2e-cli") as pool:
            runs = {client: pool.submit(timed_run, client, suite, tmp) for client in options.client or list(SUITE_NAMES)}
            for client, run in runs.items():
                code, output, seconds = run.result()
                print(f"== {client}: exit {code} in {seconds:.0f}s", flush=True)
                print("\n".join(summary(output)), flush=True)
                if code != 0:
                    failed.append(client)
    finally:
        if options.keep:
            print(f"work folder kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        print(f"@verdaccio/e2e-cli failed for: {', '.join(failed)} (not applicable, skipped: {', '.join(NOT_APPLICABLE)})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
