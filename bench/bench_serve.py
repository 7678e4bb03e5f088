"""Reads through the embedded `registry-gen serve` (issue 7, figure 7): GET of a package
document, keep-alive, 32 connections, loopback, wrk; baseline nginx serving the same file.

`registry-gen serve` builds its content/ at start and then serves the tree; nginx is pointed at
that same tree, so both answer the same bytes for the same URL.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import servers
from bench.synthetic import CACHE_DIR, SCALES, ensure_registry, package_name

GOAL_RPS = 1500.0
NGINX_SHARE_GOAL = 0.25  # issue 15: the embedded server at a quarter of nginx's rate, measured beside it
P99_GOAL_MS = 10.0
CONNECTIONS = 32
IDLE_CONNECTIONS = 300  # issue 15, goal 5: the same figure while 300 idle keep-alive clients are held
IDLE_DEADLINE = 30.0  # seconds to open them and get their first answers: bounded, whatever the server does
SERVE_THREADS = 8  # `registry-gen serve`'s default --threads: the hello-world ceiling is measured with the same
APP_CALLS = 5000  # package-document GETs called in-process to measure the app's own CPU time per request
PROFILED_CALLS = 2000  # and again under cProfile, for the report's profile section
_sections: dict[str, str] = {}


def _row(figure: str, note: str) -> dict[str, Any]:
    return {"figure": figure, "value": None, "unit": "req/s", "baseline": None, "ratio": None, "goal": f"≥ {GOAL_RPS:,.0f} req/s on 2 cores", "met": None, "note": note}


def _document_name() -> str:
    spec = SCALES[1_000]
    for index in range(spec.packages):
        name = package_name(spec, index)
        if not name.startswith("@"):
            return name
    return package_name(spec, 0)


def _check(url: str) -> int:
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
        if response.status != 200 or not body.startswith(b"{"):
            raise RuntimeError(f"GET {url}: status {response.status}, body starts {body[:60]!r}")
        return len(body)


def run(quick: bool) -> list[dict[str, Any]]:
    figure = "registry-gen serve: package document GET, keep-alive, 32 connections"
    if not Path(servers.WRK).exists():
        return [_row(figure, f"not measured: wrk is not installed at {servers.WRK} (`make system-deps`)")]
    command = servers.registry_gen_command()
    if command is None:
        return [_row(figure, "not available yet: `registry-gen serve` does not exist in this checkout")]
    content = ensure_registry(SCALES[1_000])
    name = _document_name()
    seconds = 5 if quick else 15
    with tempfile.TemporaryDirectory(prefix="bench-serve-", dir=CACHE_DIR) as folder:
        scratch = Path(folder)
        os.chmod(scratch, 0o755)
        with servers.registry_gen_serve(command, content, scratch / "serve") as (serve_url, out):
            size = _check(serve_url + name)
            servers.wrk(serve_url + name, seconds=1, connections=CONNECTIONS)  # warm-up
            served = servers.wrk(serve_url + name, seconds=seconds, connections=CONNECTIONS)
            served_idle = _with_idle(serve_url + name, seconds)
            with servers.nginx(out, scratch / "nginx") as nginx_url:
                _check(nginx_url + name)
                servers.wrk(nginx_url + name, seconds=1, connections=CONNECTIONS)
                static = servers.wrk(nginx_url + name, seconds=seconds, connections=CONNECTIONS)
                static_idle = _with_idle(nginx_url + name, seconds)
        bounds = _bounds(scratch, name, seconds)
        shutil.rmtree(scratch / "serve", ignore_errors=True)
    rps = served["rps"]
    errors = served["non_2xx"] + served["socket_errors"]
    note = (
        f"GET /{name} ({size / 1024:.1f} KB full document, no Accept header), wrk -t2 -c{CONNECTIONS} -d{seconds}s; "
        f"p99 latency serve {served.get('p99_ms', 0):.1f} ms, nginx {static.get('p99_ms', 0):.1f} ms; "
        f"errors serve {errors:.0f}, nginx {static['non_2xx'] + static['socket_errors']:.0f}; "
        "wrk, the server and everything else on the machine share its cores"
    )
    ratio = rps / static["rps"] if static["rps"] else 0.0
    p99 = served.get("p99_ms", 0)
    met = ratio >= NGINX_SHARE_GOAL and p99 <= P99_GOAL_MS and errors == 0
    if not met:
        note += (
            f"; issue 15's goal (≥ {NGINX_SHARE_GOAL}× nginx's requests/s, p99 ≤ {P99_GOAL_MS:.0f} ms, also with 300 idle "
            "connections held: see the next row) is not met: " + _bound_note(bounds, static["rps"])
        )
    if rps < GOAL_RPS:
        load = os.getloadavg()[0]
        note += (
            f"; below the goal in this run (1-minute load average {load:.1f} on {os.cpu_count()} cores at the end): "
            "every request runs Python in waitress's threads under one GIL, while nginx answers from C; "
            "for read-heavy use put nginx in front (registry-gen host-config)"
        )
    return [*_plain_row(figure, rps, static, ratio, met, note), _idle_row(name, seconds, served_idle, static_idle, served)]


def _bounds(scratch: Path, name: str, seconds: int) -> dict[str, float]:
    """The two costs every request pays in `serve`, measured in this run: waitress's own (a
    hello-world app, same threads, same wrk) and the app's (CPU time per call, no server)."""
    with servers.waitress_hello(SERVE_THREADS, connection_limit=1000) as hello_url:
        servers.wrk(hello_url, seconds=1, connections=CONNECTIONS)
        hello = servers.wrk(hello_url, seconds=seconds, connections=CONNECTIONS)
    return {"hello_rps": hello["rps"], "app_us": _app_cpu_us(scratch / "serve" / "registry.yaml", scratch / "app-data", name)}


def _app_cpu_us(config: Path, data: Path, name: str) -> float:
    """CPU microseconds one package-document GET costs `serve`'s own WSGI app (access log line
    included), called in this process on the tree the server built, without any server."""
    from registry_gen.settings import load_settings
    from user_api.access_log import ACCESS_LOGGER, AccessLog
    from user_api.server import create_server_app
    from user_api.store import open_user_store

    settings = load_settings(config).with_updates(data_dir=data)
    store = open_user_store(settings)
    app = AccessLog(create_server_app(settings, store, static=True))
    statuses: list[str] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/" + name, "QUERY_STRING": "", "SERVER_PROTOCOL": "HTTP/1.1",
               "REMOTE_ADDR": "127.0.0.1", "HTTP_USER_AGENT": "wrk"}
    access = logging.getLogger(ACCESS_LOGGER)
    level = access.level
    access.setLevel(logging.WARNING)  # the line is built, not written: `serve` hands it to a writer thread

    def get() -> None:
        body = app({**environ, "wsgi.input": io.BytesIO()}, lambda status, headers, exc_info=None: statuses.append(status))
        for _chunk in body:
            pass
        body.close()  # type: ignore[attr-defined]

    try:
        started = time.process_time()
        for _ in range(APP_CALLS):
            get()
        elapsed = time.process_time() - started
        _sections["Serve profile: one package-document GET in-process"] = _profile(get, name)
    finally:
        access.setLevel(level)
        store.close()
    if set(statuses) != {"200 OK"}:
        raise RuntimeError(f"in-process GET /{name} answered {sorted(set(statuses))}")
    return elapsed / APP_CALLS * 1e6


def _profile(get: Any, name: str) -> str:
    """cProfile of the same calls: where the app's share of a request goes (top functions by own time)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILED_CALLS):
        get()
    profiler.disable()
    stats = pstats.Stats(profiler)
    top = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:15]  # type: ignore[attr-defined]
    lines = [
        f"{row[2] / PROFILED_CALLS * 1e6:7.2f} µs own  {row[3] / PROFILED_CALLS * 1e6:7.2f} µs cum  {row[1] / PROFILED_CALLS:5.1f} calls  "
        f"{Path(file).name}:{line}({function})"
        for (file, line, function), row in top
    ]
    return (
        f"`GET /{name}` through `serve`'s WSGI app (access log line included, written by no one), {PROFILED_CALLS:,} calls "
        "under cProfile, per request (the profiler inflates each figure several times over: read the shares). What is not here is waitress's own "
        "share, the larger one (its hello-world row):\n\n```\n" + "\n".join(lines) + "\n```"
    )


def sections(quick: bool) -> dict[str, str]:
    return dict(_sections)


def _bound_note(bounds: dict[str, float], nginx_rps: float) -> str:
    hello, app_us = bounds["hello_rps"], bounds["app_us"]
    return (
        "every request pays two Python costs, one after the other under one GIL, while nginx answers from C with "
        f"sendfile: waitress's own (its hello-world app, {SERVE_THREADS} threads, same wrk, did {hello:,.0f} req/s in this "
        f"run, {hello / nginx_rps if nginx_rps else 0:.2f}× nginx: no app under waitress can do more) and the app's "
        f"(one package-document GET costs {app_us:.0f} µs of CPU called in-process without a server: at most "
        f"{1e6 / app_us if app_us else 0:,.0f} req/s on one core, the GIL allowing one; 45-48 µs before the lean static "
        "path of user_api/server.py). What is left to reach the goal is a server whose per-request work is outside the "
        "GIL: bench/SERVE_SERVERS.md has the figures of the options (granian) and what keeps each from `serve` today"
    )


def _plain_row(
    figure: str, rps: float, static: dict[str, float], ratio: float, met: bool, note: str, *, same: str = "same run"
) -> list[dict[str, Any]]:
    return [
        {
            "figure": figure,
            "value": round(rps),
            "unit": "req/s",
            "baseline": round(static["rps"]),
            "ratio": round(ratio, 3) if static["rps"] else None,
            "goal": f"≥ {NGINX_SHARE_GOAL}× nginx ({same}), p99 ≤ {P99_GOAL_MS:.0f} ms",
            "met": met,
            "note": note,
        }
    ]


def _with_idle(url: str, seconds: int) -> dict[str, float]:
    """wrk against `url` while IDLE_CONNECTIONS other keep-alive connections sit idle on the
    same server; adds how many of those were answered ("idle_answered")."""
    with servers.idle_connections(url, IDLE_CONNECTIONS, deadline=IDLE_DEADLINE) as answered:
        result = servers.wrk(url, seconds=seconds, connections=CONNECTIONS)
    result["idle_answered"] = float(answered)
    return result


def _idle_row(name: str, seconds: int, served: dict[str, float], static: dict[str, float], plain: dict[str, float]) -> dict[str, Any]:
    rps, errors = served["rps"], served["non_2xx"] + served["socket_errors"]
    ratio = rps / static["rps"] if static["rps"] else 0.0
    p99 = served.get("p99_ms", 0.0)
    met = ratio >= NGINX_SHARE_GOAL and p99 <= P99_GOAL_MS and errors == 0 and served["idle_answered"] == IDLE_CONNECTIONS
    note = (
        f"GET /{name}, wrk -t2 -c{CONNECTIONS} -d{seconds}s while {IDLE_CONNECTIONS} other keep-alive connections, each "
        f"answered once, are held idle (answered: serve {served['idle_answered']:.0f}, nginx {static['idle_answered']:.0f}); "
        f"p99 latency serve {p99:.1f} ms, nginx {static.get('p99_ms', 0):.1f} ms; errors serve {errors:.0f}, nginx "
        f"{static['non_2xx'] + static['socket_errors']:.0f}; without the idle connections serve did {plain['rps']:,.0f} req/s "
        "in this run (row above)"
    )
    if plain["rps"]:
        note += f"; the idle connections change serve's rate by {(rps / plain['rps'] - 1) * 100:+.0f}%"
    figure = f"registry-gen serve: package document GET, keep-alive, {CONNECTIONS} connections, {IDLE_CONNECTIONS} idle held"
    return _plain_row(figure, rps, static, ratio, met, note, same="same run, same idle load")[0]
