"""The mirror (issue 29, acceptance 5): `npm install jest@29` (266 packages) through an empty
mirror against the same install straight from its upstream, a real Verdaccio 6.8.0 holding the
tree (tests/mirror/jest_upstream.py: filled once, cached); then a fresh-cache install through the
filled mirror against one from a tree built from the start: the filled mirror's content/ copied
and built by `registry-gen build` (the same packages, the same documents byte for byte), served
by the same nginx with no name routed through the API. Also reported: the same install from the
packages of the cold install's lockfile imported (`registry-gen import lockfile`: one version a
package, so far smaller documents). All registries are the deployment: nginx (`host-config
nginx`) in front of `registry-gen api`. Runs alternate, so load from other work falls on both sides.

Then the cost of freshness at 10,000 mirrored packages: every read of a proxied document goes
through the API's freshness check (one indexed row) and comes back as an X-Accel-Redirect, against
nginx sending the same files directly; and what one refresh sweep of all 10,000 would cost (the
timer design this registry did not take) against an upstream answering 304s.

Run alone with `python -m bench --only mirror [--quick]`.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import servers
from bench.bench_install import NPM, npm_env
from bench.synthetic import CACHE_DIR

COLD_GOAL = 1.5
WARM_GOAL = 1.1
SCALE = 10_000
CONNECTIONS = 32


def _row(figure: str, note: str, goal: str = "report") -> dict[str, Any]:
    return {"figure": figure, "value": None, "unit": "s", "baseline": None, "ratio": None, "goal": goal, "met": None, "note": note}


def npm_install(registry: str, scratch: Path, spec: str = "jest@29") -> tuple[float, Path]:
    """Seconds for one cold `npm install spec` (empty cache, no lockfile) and the project folder;
    npm's CPU seconds are added to `NPM_CPU` under the scratch folder's name."""
    home, project = scratch / "home", scratch / "project"
    for folder in (home, project):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    (home / ".npmrc").write_text("")
    (project / "package.json").write_text(json.dumps({"name": "bench-project", "version": "1.0.0", "private": True}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([NPM, "install", spec, "--ignore-scripts"], cwd=project, env=npm_env(home, registry),
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    NPM_CPU[scratch.name] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if proc.returncode != 0:
        raise RuntimeError(f"npm install {spec} from {registry} failed: {proc.stderr[-1500:]}")
    return seconds, project


NPM_CPU: dict[str, float] = {}


def server_cpu(work: Path) -> dict[str, float]:
    """CPU seconds so far of the servers of the deployment at `work`: its `registry-gen api`, and its
    nginx (the master and its workers), from /proc (what other load on the machine does not inflate)."""
    config, runtime = str(work / "registry.yaml").encode(), str(work / "nginx").encode()
    stats: dict[int, list[str]] = {}
    api: set[int] = set()
    nginx: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            line = (entry / "cmdline").read_bytes()
            stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if b"api" in line.split(b"\0") and config in line.split(b"\0"):
                api.add(int(entry.name))
            elif b"-p " + runtime + b" " in line:  # nginx's master rewrites its command line into one title
                nginx.add(int(entry.name))
    nginx |= {pid for pid, fields in stats.items() if int(fields[1]) in nginx}  # its workers
    tick = os.sysconf("SC_CLK_TCK")
    return {name: sum(int(stats[pid][11]) + int(stats[pid][12]) for pid in pids) / tick for name, pids in (("api", api), ("nginx", nginx))}


def measured_install(url: str, work: Path, scratch: Path, cpu: dict[str, list[float]], key: str) -> float:
    """`npm_install`, with the CPU seconds over it of the api, nginx and npm kept in `cpu[key + "-api"]`..."""
    before = server_cpu(work)
    seconds = npm_install(url, scratch)[0]
    after = server_cpu(work)
    for server in ("api", "nginx"):
        cpu.setdefault(f"{key}-{server}", []).append(after[server] - before[server])
    cpu.setdefault(f"{key}-npm", []).append(NPM_CPU[scratch.name])
    return seconds


@contextlib.contextmanager
def deployment(work: Path, config: str) -> Iterator[str]:
    """nginx (the project's config) + `registry-gen api` over a registry folder; yields its URL."""
    from registry_gen.hosting import nginx_config
    from registry_gen.settings import load_settings

    port, api_port = servers.free_port(), servers.free_port()
    work.mkdir(parents=True, exist_ok=True)
    (work / "content").mkdir(exist_ok=True)
    path = work / "registry.yaml"
    path.write_text(f"content_dir: {work / 'content'}\nout_dir: {work / 'public'}\ndata_dir: {work / 'data'}\n"
                    f"base_url: http://127.0.0.1:{port}/\n{config}")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    subprocess.run([sys.executable, "-m", "registry_gen", "build", "-c", str(path)], cwd=work, env=env, check=True,
                   capture_output=True, timeout=3600)  # fmt: skip
    settings = load_settings(path)
    proxied = [(rule.regex, rule.proxy is not None) for rule in settings.packages.rules] if settings.packages.proxies else []
    conf = nginx_config(work / "public", f"127.0.0.1:{port}", f"127.0.0.1:{api_port}", proxied=proxied,
                        user="root" if os.geteuid() == 0 else None)  # fmt: skip
    with servers.nginx_and_api(work, path, conf, port, api_port) as url:
        yield url


def built_from_start(mirror: Path, work: Path) -> None:
    """A registry holding what the filled mirror at `mirror` holds (its content/ copied), built from
    the start by `registry-gen build` with the same configuration and base URL, so its documents
    are the mirror's byte for byte (see `same_documents`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    shutil.copytree(mirror / "content", work / "content")
    text = (mirror / "registry.yaml").read_text()
    for folder in ("content", "public", "data"):
        text = text.replace(f"{mirror / folder}\n", f"{work / folder}\n")
    (work / "registry.yaml").write_text(text)
    subprocess.run([sys.executable, "-m", "registry_gen", "build", "-c", str(work / "registry.yaml")], cwd=work, env=env,
                   check=True, capture_output=True, timeout=3600)  # fmt: skip


@contextlib.contextmanager
def served_static(work: Path) -> Iterator[str]:
    """The registry at `work` behind the same nginx + api, no name routed through the API (on the
    port its documents' tarball URLs name)."""
    from registry_gen.hosting import nginx_config
    from registry_gen.settings import load_settings

    settings = load_settings(work / "registry.yaml")
    port, api_port = int(str(settings.base_url).rstrip("/").rsplit(":", 1)[1]), servers.free_port()
    conf = nginx_config(work / "public", f"127.0.0.1:{port}", f"127.0.0.1:{api_port}", user="root" if os.geteuid() == 0 else None)
    with servers.nginx_and_api(work, work / "registry.yaml", conf, port, api_port) as url:
        yield url


def same_documents(mirror: Path, built: Path) -> tuple[int, int]:
    """How many of the mirror's package documents the built tree holds byte for byte, of how many."""
    from registry_gen.layout import PACKAGE_DOCUMENT
    from registry_gen.meta import META_FILENAME

    folders = [meta.parent.relative_to(mirror / "content") for meta in (mirror / "content").glob(f"**/{META_FILENAME}")]
    same = 0
    for folder in folders:
        with contextlib.suppress(FileNotFoundError):
            same += (mirror / "public" / folder / PACKAGE_DOCUMENT).read_bytes() == (built / "public" / folder / PACKAGE_DOCUMENT).read_bytes()
    return same, len(folders)


def _settled(work: Path, project: Path, deadline: float = 600.0) -> float:
    """Seconds until the tree serves what the mirror landed (the landings are built in the
    background, after the burst): every package in content/ has its document built from its
    latest meta, every tarball npm installed into `project` is in the tree, and the API has gone
    quiet (no CPU for a second: the batch build writes the pages and listings after the documents,
    ~0.7 CPU-s for jest@29, which a second install started at once would run beside). Raises past
    the deadline, naming what is still missing."""
    from registry_gen.names import tarball_path

    started = time.monotonic()
    installed = json.loads((project / "node_modules" / ".package-lock.json").read_text())["packages"]
    tarballs = [work / "public" / tarball_path(entry.get("name") or key.rsplit("node_modules/", 1)[1], entry["version"])
                for key, entry in installed.items() if key.startswith("node_modules/") and "version" in entry]  # fmt: skip
    while missing := [str(path) for path in tarballs if not path.is_file()] + _unbuilt_documents(work):
        if time.monotonic() - started > deadline:
            raise RuntimeError(f"the mirror's tree lacked {len(missing)} files {deadline:.0f} s after the install, e.g. {missing[0]}")
        time.sleep(0.5)
    while not _quiet(work):
        if time.monotonic() - started > deadline:
            raise RuntimeError(f"the mirror's API was still busy {deadline:.0f} s after the install")
    return time.monotonic() - started


def _quiet(work: Path) -> bool:
    """Whether the API spent at most one clock tick of CPU over the next second."""
    before = server_cpu(work)["api"]
    time.sleep(1.0)
    return server_cpu(work)["api"] - before <= 0.011


def _unbuilt_documents(work: Path) -> list[str]:
    """The documents in the tree older than the meta they are built from (or absent)."""
    from registry_gen.layout import PACKAGE_DOCUMENT
    from registry_gen.meta import META_FILENAME

    unbuilt = []
    for meta in (work / "content").glob(f"**/{META_FILENAME}"):
        document = work / "public" / meta.parent.relative_to(work / "content") / PACKAGE_DOCUMENT
        with contextlib.suppress(FileNotFoundError):
            if document.stat().st_mtime_ns >= meta.stat().st_mtime_ns:
                continue
        unbuilt.append(str(document))
    return unbuilt


def document_bytes(work: Path) -> int:
    """Bytes of the full package documents the tree holds for the packages in content/ (what npm
    11, which asks for full documents, downloads and parses once each)."""
    from registry_gen.layout import PACKAGE_DOCUMENT
    from registry_gen.meta import META_FILENAME

    documents = (work / "public" / meta.parent.relative_to(work / "content") / PACKAGE_DOCUMENT
                 for meta in (work / "content").glob(f"**/{META_FILENAME}"))  # fmt: skip
    return sum(document.stat().st_size for document in documents if document.is_file())


def _imported_lockfile(work: Path, upstream: str, lockfile: Path) -> None:
    """A registry holding the lockfile's packages at its versions only, imported, then built."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    (work / "content").mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "registry_gen", "import", "lockfile", str(lockfile), "--from", upstream,
                    "--content", str(work / "content"), "--out", str(work / "public")], cwd=work, env=env, check=True,
                   capture_output=True, timeout=3600)  # fmt: skip


def installs(quick: bool) -> list[dict[str, Any]]:
    from tests.importers.verdaccio import verdaccio_server
    from tests.mirror.jest_upstream import jest_upstream

    source, _ = jest_upstream()
    repeats = 1 if quick else 3
    timings: dict[str, list[float]] = {"direct": [], "cold": [], "warm": [], "fresh": [], "lockfile": []}
    settle: list[float] = []
    sizes: dict[str, int] = {}
    same: list[tuple[int, int]] = []
    cpu: dict[str, list[float]] = {}
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-mirror-", dir=CACHE_DIR) as folder:
        scratch = Path(folder)
        os.chmod(scratch, 0o755)
        shutil.copytree(source, scratch / "storage")
        with verdaccio_server(scratch / "verdaccio", storage=scratch / "storage") as upstream:
            config = f"uplinks:\n  up:\n    url: {upstream}\npackages:\n  '**': {{proxy: up}}\n"
            lockfile = None
            for rep in range(repeats):
                mirror, fresh = scratch / f"mirror-{rep}", scratch / f"fresh-{rep}"
                timings["direct"].append(npm_install(upstream, scratch / f"direct-{rep}")[0])
                with deployment(mirror, config) as url:
                    seconds, project = npm_install(url, scratch / f"cold-{rep}")
                    timings["cold"].append(seconds)
                    lockfile = lockfile or project / "package-lock.json"
                    settle.append(_settled(mirror, project))
                    timings["warm"].append(measured_install(url, mirror, scratch / f"warm-{rep}", cpu, "warm"))
                built_from_start(mirror, fresh)
                same.append(same_documents(mirror, fresh))
                with served_static(fresh) as url:
                    timings["fresh"].append(measured_install(url, fresh, scratch / f"fresh-install-{rep}", cpu, "fresh"))
                sizes["mirror"] = document_bytes(mirror)
            assert lockfile is not None
            _imported_lockfile(scratch / "lockfile", upstream, lockfile)
        with deployment(scratch / "lockfile", "") as url:
            for rep in range(repeats):
                timings["lockfile"].append(npm_install(url, scratch / f"lockfile-{rep}")[0])
        sizes["lockfile"] = document_bytes(scratch / "lockfile")
    return _install_rows(timings, settle, repeats, sizes, same, cpu)


def _install_rows(timings: dict[str, list[float]], settle: list[float], repeats: int, sizes: dict[str, int],
                  same: list[tuple[int, int]], cpu: dict[str, list[float]]) -> list[dict[str, Any]]:  # fmt: skip
    median = {key: statistics.median(values) for key, values in timings.items()}
    runs = {key: ", ".join(f"{t:.1f}" for t in values) for key, values in timings.items()}

    def paired(first: str, second: str) -> str:
        # Each run against the one just before or after it: their ratio is less at the mercy of
        # other load than the medians' (the lockfile runs come after every mirror run: no pair).
        return ", ".join(f"{a / b:.2f}" for a, b in zip(timings[first], timings[second], strict=True))

    mirror_mb, lockfile_mb = sizes["mirror"] / 1e6, sizes["lockfile"] / 1e6
    identical = ", ".join(f"{n} of {total}" for n, total in same)
    spent = {key: ", ".join(f"{t:.2f}" for t in values) for key, values in cpu.items()}
    return [
        {
            "figure": "Cold npm install of jest@29 (266 packages) through an empty mirror (nginx + registry-gen api)",
            "value": round(median["cold"], 1), "unit": "s", "baseline": round(median["direct"], 1),
            "ratio": round(median["cold"] / median["direct"], 2), "goal": f"≤ {COLD_GOAL}× the same install straight from the upstream",
            "note": (f"median of {repeats}; baseline = npm straight from the upstream, a Verdaccio 6.8.0 serving the same tree "
                     f"(runs {runs['direct']} s); through the mirror {runs['cold']} s (each run against the direct one before it: "
                     f"{paired('cold', 'direct')}×): each document and tarball fetched from the upstream, checked and answered at once, "
                     "landed in content/ and built into the tree in the background (one build once the burst is over); the tree held "
                     f"everything and the API was quiet {', '.join(f'{s:.0f}' for s in settle)} s after npm finished"),
        },  # fmt: skip
        {
            "figure": "Second npm install of jest@29 (fresh npm cache) through the filled mirror",
            "value": round(median["warm"], 1), "unit": "s", "baseline": round(median["fresh"], 1),
            "ratio": round(median["warm"] / median["fresh"], 2), "goal": f"≤ {WARM_GOAL}× a tree built from the start",
            "note": (f"median of {repeats}; baseline = a tree built from the start: the filled mirror's content/ copied and built "
                     "by `registry-gen build` (the same packages; the same documents, byte for byte: "
                     f"{identical} identical), served by the same nginx with no name routed through the API (runs {runs['fresh']} s, "
                     f"each just after its mirror run: {paired('warm', 'fresh')}×); the mirror's runs {runs['warm']} s: tarballs are "
                     "static files, each document read asks the API's freshness check and comes back as an X-Accel-Redirect (a "
                     "document fetched more than maxage (2 min) before is asked again conditionally; a 304 only moves its freshness "
                     f"row); both serve {mirror_mb:.1f} MB of full documents (every version the upstream lists, which a mirror must "
                     "serve). CPU seconds per install (what the machine's other load does not inflate), through the mirror "
                     f"against the tree: the api {spent['warm-api']} against {spent['fresh-api']}, nginx {spent['warm-nginx']} "
                     f"against {spent['fresh-nginx']}, npm itself {spent['warm-npm']} against {spent['fresh-npm']}"),
        },  # fmt: skip
        {
            "figure": "Second npm install of jest@29 through the filled mirror, against the lockfile's packages imported",
            "value": round(median["warm"], 1), "unit": "s", "baseline": round(median["lockfile"], 1),
            "ratio": round(median["warm"] / median["lockfile"], 2), "goal": "report (a tree holding one version a package)",
            "note": (f"median of {repeats}; baseline = the cold install's lockfile imported (`import lockfile`) and built, behind the "
                     f"same nginx + api (runs {runs['lockfile']} s, after every mirror run): its documents hold the lockfile's "
                     f"versions only, {lockfile_mb:.1f} MB of full documents against the mirror's {mirror_mb:.1f} MB"),
        },  # fmt: skip
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    if shutil.which(NPM) is None or not servers.nginx_available():
        return [_row("Cold npm install through an empty mirror", "not measured: npm or nginx is missing", f"≤ {COLD_GOAL}×")]
    rows = installs(quick)
    from bench.mirror_freshness import freshness

    return rows + freshness(quick)
