"""The cost of the mirror's freshness at 10,000 mirrored packages (part of bench_mirror).

The registry is made directly (what the mirror would have landed, by its own pure functions):
10,000 packages mirrored from an upstream that nginx serves as static files (ETags, 304s), their
freshness rows fresh, their tree built. Measured:
- the freshness check itself, in-process, per read (10,000 rows against 100: it must not grow);
- proxied document reads through nginx → `registry-gen api` (check, then X-Accel-Redirect) against
  nginx sending the same documents directly, wrk over 1,000 of the names;
- one refresh sweep of all 10,000 (`registry-gen mirror refresh`, 304s): what a timer refreshing
  every package every maxage would pay, the design this registry did not take.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import servers
from bench.bench_mirror import CONNECTIONS, SCALE, deployment
from bench.synthetic import CACHE_DIR

NOW_ISO = "2020-01-01T00:00:00.000Z"
ACCEPT = {"Accept": "application/vnd.npm.install-v1+json"}


def _name(index: int) -> str:
    return f"mirrored-{index:05d}"


def _upstream_document(name: str, upstream: str) -> dict[str, Any]:
    data = name.encode()
    dist = {"tarball": f"{upstream}{name}/-/{name}-1.0.0.tgz", "shasum": hashlib.sha1(data).hexdigest(),
            "integrity": "sha512-" + hashlib.sha512(data).hexdigest()[:86] + "=="}  # fmt: skip
    return {"name": name, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": {"name": name, "version": "1.0.0", "dist": dist}},
            "time": {"created": NOW_ISO, "modified": NOW_ISO, "1.0.0": NOW_ISO}, "maintainers": [{"name": "upstream"}]}  # fmt: skip


def synthesize(work: Path, upstream_tree: Path, upstream: str, count: int) -> Path:
    """`count` packages mirrored from `upstream` (its files written into `upstream_tree`), as the
    mirror lands them; their freshness rows fresh; returns the registry's config file."""
    from registry_gen.meta import dump_meta
    from registry_gen.mirror.service import MirrorService
    from registry_gen.state.mirror_freshness import MIRRORED, Entry
    from registry_gen.mirror.taking import judged, mirrored_meta, take_document
    from registry_gen.settings import load_settings

    work.mkdir(parents=True, exist_ok=True)
    config = work / "registry.yaml"
    config.write_text(f"content_dir: {work / 'content'}\nout_dir: {work / 'public'}\ndata_dir: {work / 'data'}\n"
                      f"uplinks:\n  up:\n    url: {upstream}\n    maxage: 1h\npackages:\n  '**': {{proxy: up}}\n")  # fmt: skip
    settings = load_settings(config)
    service = MirrorService(settings)
    rule, uplink = service.proxied(_name(0))  # type: ignore[misc]
    entries = []
    for index in range(count):
        name = _name(index)
        document = _upstream_document(name, upstream)
        served = upstream_tree / name / "index.html"
        served.parent.mkdir(parents=True, exist_ok=True)
        served.write_text(json.dumps(document))
        record, _ = judged(name, take_document(document, name, uplink, None, NOW_ISO), rule.policy, [], time.time())
        folder = work / "content" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "registry-meta.json").write_bytes(dump_meta(mirrored_meta(record, None, name)))
        stat = served.stat()
        entries.append(Entry(name, "up", MIRRORED, time.time(), f'"{int(stat.st_mtime):x}-{stat.st_size:x}"', None,
                             service.fingerprint(name, rule, uplink)))  # fmt: skip
    service.state.put_many(iter(entries))
    return config


def check_cost(config: Path, count: int, calls: int = 20_000) -> float:
    """Microseconds per freshness check of a fresh document, in-process (the row lookup, the
    fingerprint), spread over the first `count` names."""
    from registry_gen.mirror.service import MirrorService
    from registry_gen.settings import load_settings

    service = MirrorService(load_settings(config))
    names = [_name(index % count) for index in range(0, calls * 7919, 7919)]
    started = time.perf_counter()
    for name in names:
        if not service.document(name).ok:
            raise RuntimeError(f"{name}: not fresh")
    return (time.perf_counter() - started) / len(names) * 1e6


@contextlib.contextmanager
def static_nginx(tree: Path, runtime: Path) -> Iterator[str]:
    with servers.nginx(tree, runtime) as url:
        yield url


def _script(folder: Path, names: list[str], counted: bool = False) -> Path:
    """wrk's Lua over `names`, in turn; `counted`: it also counts the statuses of failed reads."""
    script = folder / ("names-counted.lua" if counted else "names.lua")
    listed = ", ".join(f'"{name}"' for name in names)
    script.write_text(f'local names = {{{listed}}}\nlocal i = 0\nrequest = function()\n  i = i + 1\n'
                      '  return wrk.format("GET", "/" .. names[(i % #names) + 1])\nend\n' + (servers.STATUS_COUNTER if counted else ""))  # fmt: skip
    return script


def freshness(quick: bool) -> list[dict[str, Any]]:
    if not Path(servers.WRK).exists():
        return [{"figure": "Freshness at 10,000 mirrored packages", "value": None, "unit": "req/s", "baseline": None, "ratio": None,
                 "goal": "report", "met": None, "note": f"not measured: wrk is not installed at {servers.WRK}"}]  # fmt: skip
    seconds = 5 if quick else 15
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-freshness-", dir=CACHE_DIR) as folder:
        work = Path(folder)
        os.chmod(work, 0o755)
        with servers.nginx(work / "upstream", work / "upstream-nginx") as upstream:
            started = time.perf_counter()
            config = synthesize(work / "registry", work / "upstream", upstream, SCALE)
            made = time.perf_counter() - started
            small = synthesize(work / "small", work / "upstream", upstream, 100)
            costs = (check_cost(config, SCALE), check_cost(small, 100))
            reads = _reads(work, config, seconds)
            sweep = _sweep(config)
    return _freshness_rows(costs, reads, sweep, made, seconds)


def _reads(work: Path, config: Path, seconds: int) -> tuple[dict[str, float], dict[str, float]]:
    names = [_name(index) for index in range(0, SCALE, SCALE // 1000)]
    # The API's failed reads are counted by status (a callback per response: nothing at its rate);
    # nginx's 30× faster baseline runs without it, which would slow wrk itself.
    scripts = (_script(work, names, counted=True), _script(work, names))
    text = config.read_text()
    with deployment(work / "registry", text[text.index("uplinks:") :]) as mirrored, static_nginx(work / "registry" / "public", work / "static") as static:
        results = []
        for url, script in zip((mirrored, static), scripts, strict=True):
            servers.wrk(url + names[0], seconds=1, connections=CONNECTIONS, headers=ACCEPT)  # warm-up
            results.append(servers.wrk(url, seconds=seconds, connections=CONNECTIONS, headers=ACCEPT, script=script))
    return results[0], results[1]


def _sweep(config: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "registry_gen", "mirror", "refresh", "-c", str(config)], env=env,
                          capture_output=True, text=True, timeout=3600)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"mirror refresh failed: {proc.stderr[-1500:]}")
    return time.perf_counter() - started


def _freshness_rows(costs: tuple[float, float], reads: tuple[dict[str, float], dict[str, float]], sweep: float, made: float,
                    seconds: int) -> list[dict[str, Any]]:  # fmt: skip
    mirrored, static = reads
    return [
        {"figure": f"Freshness check per proxied document read, {SCALE:,} mirrored packages", "value": round(costs[0], 1), "unit": "µs",
         "baseline": round(costs[1], 1), "ratio": round(costs[0] / costs[1], 2), "goal": "≤ 1.5× the same check at 100 packages",
         "note": "in-process MirrorService.document() of fresh packages, 20,000 calls spread over the names: one indexed row of "
                 "data/mirror/state.sqlite3 per read plus the rule's fingerprint; baseline = the same at 100 mirrored packages"},
        {"figure": f"Proxied document reads through nginx + registry-gen api, {SCALE:,} mirrored packages", "value": round(mirrored["rps"]),
         "unit": "req/s", "baseline": round(static["rps"]), "ratio": round(mirrored["rps"] / static["rps"], 3), "goal": "report",
         "note": f"wrk -t2 -c{CONNECTIONS} -d{seconds}s over 1,000 of the names (abbreviated documents); each read asks the API's "
                 "freshness check, which answers with an X-Accel-Redirect nginx then serves; baseline = nginx sending the same "
                 f"files with no check; p99 {mirrored.get('p99_ms', 0):.1f} ms against {static.get('p99_ms', 0):.1f} ms; errors "
                 f"{mirrored['non_2xx'] + mirrored['socket_errors']:.0f} (statuses: {servers.error_statuses(mirrored)}; socket "
                 f"errors {mirrored['socket_errors']:.0f}), measured once the API is ready (it answers 503 while it starts); an "
                 "install asks each document once, so a 266-package install pays ~266 checks"},
        {"figure": f"One refresh sweep of {SCALE:,} mirrored packages (`mirror refresh`, upstream answering 304)", "value": round(sweep, 1),
         "unit": "s", "baseline": 120, "ratio": round(sweep / 120, 2), "goal": "report (what a timer design would pay per maxage)",
         "note": f"conditional GETs to an nginx upstream, 8 at a time; baseline = Verdaccio's default maxage (2 min): a timer keeping "
                 f"every mirrored package within maxage would spend this share of all time sweeping, reads or not; this registry "
                 f"asks only for what is read, at most once per maxage; making the {SCALE:,} packages took {made:.0f} s"},
    ]  # fmt: skip
