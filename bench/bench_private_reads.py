"""Private reads at static speed (issue 17): a cold `npm install` of the 100-package tree through
nginx + `registry-gen api` with read rules on (every package readable by accounts only, so every
document and tarball goes through nginx's auth_request and its cached decision) against the
same install with rules off, in this run. Goal: within 1.15×.

Each install uses a new token, so no decision is cached from an earlier install (cold for the
decision cache too); both setups get the same token in `.npmrc`. The two setups run side by side
and their installs alternate, so load from other work on the machine falls on both.

A second row: the CPU of one read decision for nginx's reads of a private tree bucket (its three
presigned paths), signed by obstore against boto3's presign in the same run (bench/sign_cost.py).

Run alone with `python -m bench --only private_reads [--quick]`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import servers
from bench.bench_install import NPM, cold_install
from bench.synthetic import CACHE_DIR, INSTALL_TREE, ensure_install_tree

GOAL = 1.15
SIGNING_GOAL = 0.25  # obstore signs in Rust: ~0.1× of boto3 on this machine (bench/PROFILE.md, "obsign")
RULES = "packages:\n  '**': {read: authenticated}\n"


def _tokens(config: Path, count: int) -> list[str]:
    from registry_gen.settings import load_settings
    from user_api.store import open_user_store

    store = open_user_store(load_settings(config))
    try:
        user = store.create_user("bench-reader", "bench-reader-password-1")
        return [store.create_token(user.id)[0] for _ in range(count)]
    finally:
        store.close()


@contextlib.contextmanager
def _registry(content: Path, work: Path, rules: bool, tokens: int) -> Iterator[tuple[str, list[str]]]:
    """nginx (the project's config) + `registry-gen api` over a fresh build; yields (URL, tokens)."""
    from registry_gen.build import run_build
    from registry_gen.hosting import nginx_config
    from registry_gen.nginx_access import ReadCheck
    from registry_gen.settings import load_settings

    port, api_port = servers.free_port(), servers.free_port()
    work.mkdir(parents=True)
    config = work / "registry.yaml"
    config.write_text(f"content_dir: {content}\nout_dir: {work / 'public'}\ndata_dir: {work / 'data'}\n"
                      f"base_url: http://127.0.0.1:{port}/\n" + (RULES if rules else ""))  # fmt: skip
    run_build(load_settings(config))
    issued = _tokens(config, tokens)
    user = "root" if os.geteuid() == 0 else None
    check = ReadCheck("read_cache") if rules else None
    conf = nginx_config(work / "public", f"127.0.0.1:{port}", f"127.0.0.1:{api_port}", user=user, read_check=check)
    with servers.nginx_and_api(work, config, conf, port, api_port) as url:
        yield url, issued


def _anonymous_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:  # noqa: S310 - 127.0.0.1
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _install(registry: str, token: str, roots: list[str], scratch: Path) -> tuple[float, int]:
    return cold_install(registry, roots, scratch, npmrc=f"{registry.removeprefix('http:')}:_authToken={token}\n")


def _signing_row(quick: bool) -> dict[str, Any]:
    from bench.sign_cost import measure

    figures = measure(300 if quick else 2000, 3 if quick else 5)
    ours, floor = figures["obstore (obsign)"], figures["boto3 (main)"]
    ratio = ours["median_ms"] / floor["median_ms"]
    return {
        "figure": "CPU of one read decision for a private tree bucket (three presigned paths, the WSGI check)",
        "value": round(ours["median_ms"], 3),
        "unit": "ms",
        "baseline": round(floor["median_ms"], 3),
        "ratio": round(ratio, 2),
        "goal": f"≤ {SIGNING_GOAL}× the same decision signed by boto3 (main's TreeSigner), no botocore call",
        "note": (
            f"obstore's sign against boto3's generate_presigned_url, interleaved rounds, process CPU (obstore's threads "
            f"included): {'; '.join(f'{v:.3f}' for v in ours['cpu_ms'])} ms against {'; '.join(f'{v:.3f}' for v in floor['cpu_ms'])} ms; "
            f"botocore/boto3 Python calls per decision {ours['botocore_calls']:.0f} against {floor['botocore_calls']:.0f}"
        ),
        "met": ratio <= SIGNING_GOAL and ours["botocore_calls"] == 0,
    }


def run(quick: bool) -> list[dict[str, Any]]:
    return [*_installs(quick), _signing_row(quick)]


def _installs(quick: bool) -> list[dict[str, Any]]:
    if shutil.which(NPM) is None or not servers.nginx_available():
        return [{"figure": "Cold npm install with read rules", "value": None, "unit": "s", "baseline": None, "ratio": None,
                 "goal": f"≤ {GOAL}×", "met": None, "note": "not measured: npm or nginx is missing"}]  # fmt: skip
    content, roots = ensure_install_tree()
    repeats = 2 if quick else 5
    timings: dict[bool, list[float]] = {False: [], True: []}
    counts: dict[bool, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-private-", dir=CACHE_DIR) as folder:
        scratch = Path(folder)
        os.chmod(scratch, 0o755)
        with _registry(content, scratch / "off", False, repeats) as off, _registry(content, scratch / "on", True, repeats) as on:
            for rep in range(repeats):
                for rules, (url, tokens) in ((False, off), (True, on)):
                    seconds, counts[rules] = _install(url, tokens[rep], roots, scratch / f"{'on' if rules else 'off'}-{rep}")
                    timings[rules].append(seconds)
            enforced = _anonymous_status(on[0] + roots[0]), _anonymous_status(off[0] + roots[0])
    baseline, value = statistics.median(timings[False]), statistics.median(timings[True])
    return [
        {
            "figure": f"Cold npm install, {INSTALL_TREE.packages}-package tree, read rules on (nginx auth_request + registry-gen api)",
            "value": round(value, 2),
            "unit": "s",
            "baseline": round(baseline, 2),
            "ratio": round(value / baseline, 2),
            "goal": f"≤ {GOAL}× the same install with rules off",
            "note": (
                f"median of {repeats} alternating cold installs each (empty npm cache, no lockfile, a new token each "
                f"time: no cached decision); rule '**': read authenticated, so every package is checked; installed "
                f"{counts.get(True)} packages with rules, {counts.get(False)} without; runs on "
                f"{', '.join(f'{t:.2f}' for t in timings[True])} s, off {', '.join(f'{t:.2f}' for t in timings[False])} s; "
                f"an anonymous GET of a package got {enforced[0]} with rules, {enforced[1]} without"
            ),
            "met": value / baseline <= GOAL and enforced == (401, 200),
        }
    ]
