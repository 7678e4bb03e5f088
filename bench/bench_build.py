"""Build figures (issue 7): full build against the read+hash floor, incremental build after one
new archive at 1k/10k/100k versions, peak memory of a full build, and the size of the package
document of a 1,000-version package. Also a profile of a full build for the report.

Run alone with `python -m bench --only build [--quick]`.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from bench.synthetic import (
    BIG_PACKAGE,
    CACHE_DIR,
    MILLION,
    SCALES,
    RegistrySpec,
    ensure_registry,
    make_tarball,
    package_name,
)

WORK_DIR = CACHE_DIR / "work" / str(os.getpid())  # one per run: two runs may overlap on this machine
REPO = Path(__file__).resolve().parent.parent
BUILD_CACHE_VERSION = 1  # bump when what the cached 1M measurement records changes
BASE_URL = "http://127.0.0.1:4873/"
INCREMENTAL_GOAL_MS = 25.0  # issue 15: changed path given, every scale up to 1M
WALK_GOAL_MS = 50.0  # issue 7: stat-walk build at 10k
FLAT_GOAL = 1.2
MEMORY_FLAT_GOAL = 1.1  # issue 15: peak RSS of a full build, 10k to 1M
FULL_GOAL = 1.5
MEMORY_GOAL_MB = 150.0  # issue 15, goal 4 (issue 7 had asked 200 MB)
_sections: dict[str, str] = {}


# ---------------------------------------------------------------- floors (same process, same run)


def archives_under(content: Path) -> list[Path]:
    found = []
    for folder, _, files in os.walk(content):
        found.extend(Path(folder) / f for f in files if f.endswith((".tgz", ".zip", ".tar.gz")))
    return sorted(found)


def read_hash_floor(paths: list[Path]) -> float:
    """Seconds to read every archive once and compute sha1 and sha512 over it: what any build
    must at least do. Best of two passes, so both it and the build see a warm page cache."""
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        for path in paths:
            sha1, sha512 = hashlib.sha1(), hashlib.sha512()
            with open(path, "rb") as handle:
                while block := handle.read(1 << 20):
                    sha1.update(block)
                    sha512.update(block)
            sha1.hexdigest()
            sha512.digest()
        best = min(best, time.perf_counter() - started)
    return best


def inflate_floor(paths: list[Path]) -> float:
    """Seconds to read, hash and gunzip every archive (zlib, in C, nothing kept): what a build
    that reports fileCount and unpackedSize (so inflates every archive) cannot go below."""
    started = time.perf_counter()
    for path in paths:
        data = path.read_bytes()
        hashlib.sha1(data).hexdigest()
        hashlib.sha512(data).digest()
        if data[:2] == b"\x1f\x8b":
            inflater = zlib.decompressobj(wbits=31)
            pending = data
            while pending:
                inflater.decompress(pending, 1 << 22)  # output dropped; bounded memory
                pending = inflater.unconsumed_tail
    return time.perf_counter() - started


def stat_walk_floor(content: Path) -> float:
    """Seconds to list every folder of content/ and stat every file: what stat-based change
    detection cannot go below."""
    started = time.perf_counter()
    stack = [str(content)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    entry.stat(follow_symlinks=False)
    return time.perf_counter() - started


def copy_floor(paths: list[Path], scratch: Path) -> float:
    """Seconds to copy every archive once into a fresh folder tree (one file creation each):
    what serving the tarballs from the output tree costs at least."""
    started = time.perf_counter()
    for index, path in enumerate(paths):
        folder = scratch / f"{index // 100:05d}"
        if index % 100 == 0:
            folder.mkdir(parents=True)
        shutil.copyfile(path, folder / path.name)
    seconds = time.perf_counter() - started
    shutil.rmtree(scratch, ignore_errors=True)
    return seconds


def file_creation_cost(scratch: Path, count: int = 1000) -> float:
    """Microseconds per atomic small-file write (temp file + rename) on this disk."""
    from registry_gen.writer import atomic_write_bytes

    scratch.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for index in range(count):
        atomic_write_bytes(scratch / f"f{index}.json", b"{}" * 200)
    micros = (time.perf_counter() - started) / count * 1e6
    shutil.rmtree(scratch, ignore_errors=True)
    return micros


def link_tree(source: Path, target: Path) -> None:
    """A hard-linked copy of the cached content/ (no bytes copied), so the benchmark can add
    archives without touching the cache."""
    if target.exists():
        shutil.rmtree(target)
    for folder, _, files in os.walk(source):
        relative = Path(folder).relative_to(source)
        (target / relative).mkdir(parents=True, exist_ok=True)
        for name in files:
            os.link(Path(folder) / name, target / relative / name)


# ---------------------------------------------------------------- builds


def build_in_child(content: Path, out: Path, log: Path | None = None) -> dict[str, Any]:
    """A full build in a fresh process (its own peak memory, as a CLI build would have). Its
    progress goes to `log` when given (`tail -f` it to see how far a long build got)."""
    command = [sys.executable, "-m", "bench.bench_build", "--child", str(content), str(out)]
    started = time.perf_counter()
    with open(log or os.devnull, "w") as errors:
        proc = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=errors, text=True, timeout=4 * 3600, cwd=Path(__file__).resolve().parent.parent
        )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = log.read_text()[-2000:] if log else ""
        raise RuntimeError(f"build failed ({proc.returncode}): {tail}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data["wall_with_startup"] = wall
    return data


class ProgressLog:
    """Prints the build's progress to stderr every few seconds (how far a long build got)."""

    def __init__(self, started: float, every: float = 30.0) -> None:
        self.started, self.every, self.last = started, every, 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.last >= self.every or done == total:
            self.last = now
            rate = (now - self.started) / done * 1000 if done else 0.0
            print(f"build {phase}: {done:,}/{total:,} after {now - self.started:.0f} s ({rate:.2f} ms each so far)", file=sys.stderr, flush=True)


def reap_fork_server() -> bool:
    """Stops multiprocessing's fork server and waits for it, so the build's worker processes
    count in getrusage(RUSAGE_CHILDREN). The workers are children of the fork server, not of the
    build (registry_gen/workers.py); the fork server reaps each one when it ends, but its own
    exit (and with it their CPU time and peak RSS) is only collected when the fork server is
    reaped, which otherwise happens after this process has printed its figures. False when this
    Python has no way to stop it (then the worker figures are unknown, not zero)."""
    import multiprocessing.forkserver as forkserver

    server = getattr(forkserver, "_forkserver", None)  # the module's one ForkServer
    stop = getattr(server, "_stop", None)  # CPython's own tests stop it this way (3.8+)
    if server is None or stop is None:
        return False
    stop()
    return True


def own_peak_rss_mb() -> float:
    """This process's own peak RSS. getrusage's ru_maxrss is not: on exec, Linux folds the peak of
    the memory the process had before (its parent's, for a child started by fork or vfork) into it,
    so a build started by a bench process that had held ~575 MB (generating the 1M registry)
    reported 575 MB whatever the build did. /proc's VmHWM is the peak of this process's memory."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # an upper bound elsewhere


def child_main(content: str, out: str) -> int:
    from registry_gen.build import run_build
    from registry_gen.settings import Settings

    settings = Settings(content_dir=Path(content), out_dir=Path(out), base_url=BASE_URL)
    started = time.perf_counter()
    result = run_build(settings, progress=ProgressLog(started))
    seconds = time.perf_counter() - started
    reaped = reap_fork_server()
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "rss_mb": own_peak_rss_mb(),
                "worker_rss_mb": workers.ru_maxrss / 1024 if reaped else None,
                "cpu_seconds": own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime,
                "packages": result.packages,
                "versions": result.versions,
                "written": getattr(result.written, "total", len(result.written)),
                "errors": [str(e) for e in result.errors[:5]],
            }
        )
    )
    return 0


def new_archive(content: Path, spec: RegistrySpec, index: int, version: str) -> Path:
    """One more version of an existing package, of a typical size, with its latest version's
    dependencies (as most releases): a release that adds or drops one re-renders that dependency's
    page too (its Dependents list), whose cost is the chosen package's, not the registry size's."""
    name = package_name(spec, index % spec.packages)
    manifest = {"name": name, "version": version, "description": "a new release", "main": "index.js", "license": "MIT"}
    if dependencies := latest_dependencies(content / name):
        manifest["dependencies"] = dependencies
    readme = f"# {name}\n\n" + "A new release with a few changes.\n" * 60
    code = ("module.exports = function (a, b) { return a + b; };\n" * 200).encode()
    data = make_tarball([("package.json", json.dumps(manifest, indent=2).encode()), ("README.md", readme.encode()), ("index.js", code)])
    target = content / name / f"{name.split('/')[-1]}-{version}.tgz"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def latest_dependencies(folder: Path) -> dict[str, str]:
    """The dependencies of the newest archive in `folder` (by mtime: the generator dates its
    versions in order, and the bench's own are newer still)."""
    newest = max(folder.glob("*.tgz"), key=lambda p: p.stat().st_mtime_ns)
    with tarfile.open(newest) as archive:
        member = archive.extractfile("package/package.json")
        manifest = json.loads(member.read()) if member else {}
    return dict(manifest.get("dependencies") or {})


def incremental_runs(
    settings: Any, content: Path, spec: RegistrySpec, repeats: int, *, hinted: bool, base: int, major: int = 9
) -> list[float]:
    """Build times (ms) after adding one archive each time. A run that rebuilt everything (the
    templates changed under us: this checkout is shared) is measured again, at most twice."""
    from registry_gen.build import run_build

    timings: list[float] = []
    discarded = 0
    rep = 0
    while len(timings) < repeats:
        archive = new_archive(content, spec, base + rep * 37, f"{major}.{base}.{rep}")
        rep += 1
        started = time.perf_counter()
        # As the write API and watch mode build: the changed path given, and -/all and
        # -/search.json (they list every package) left to their IndexRefresher.
        result = run_build(settings, changed=[archive], defer_whole=True) if hinted else run_build(settings)
        elapsed = (time.perf_counter() - started) * 1000
        if len(result.rebuilt_packages) > 1 and discarded < 2:
            discarded += 1
            continue
        if result.archives_read != 1 or len(result.rebuilt_packages) != 1 or result.errors:
            raise RuntimeError(
                f"incremental build did not do what was expected: read {result.archives_read}, "
                f"rebuilt {result.rebuilt_packages[:5]}, errors {[str(e) for e in result.errors[:3]]}"
            )
        timings.append(elapsed)
    return timings


def measure_scale(versions: int, quick: bool) -> dict[str, Any]:
    if versions == MILLION.total_versions:
        return measure_cached_scale(MILLION, quick)
    spec = SCALES[versions]
    source = ensure_registry(spec)
    work = WORK_DIR / spec.key
    content, out = work / "content", work / "public"
    shutil.rmtree(work, ignore_errors=True)
    measured = measure_full(spec, source, content, out, copy_floor_too=True)
    measure_incremental(measured, content, out, spec, quick, major=9, profile=versions == 10_000)
    shutil.rmtree(work, ignore_errors=True)
    return measured


def measure_full(spec: RegistrySpec, source: Path, content: Path, out: Path, *, copy_floor_too: bool) -> dict[str, Any]:
    """Links the cached registry into `content`, measures the floors and one full build into `out`."""
    link_tree(source, content)
    paths = archives_under(content)
    measured: dict[str, Any] = {"versions": spec.total_versions, "archives": len(paths), "bytes": sum(p.stat().st_size for p in paths)}
    measured["floor"] = read_hash_floor(paths)
    measured["inflate_floor"] = inflate_floor(paths)
    measured["copy_floor"] = copy_floor(paths, content.parent / "copy-floor") if copy_floor_too else None
    del paths
    measured["full"] = build_in_child(content, out, log=content.parent / "full-build.log")
    measured["out_files"] = sum(len(files) for _, _, files in os.walk(out))
    return measured


def measure_incremental(
    measured: dict[str, Any], content: Path, out: Path, spec: RegistrySpec, quick: bool, *, major: int, profile: bool
) -> None:
    """No-change and one-new-archive builds (stat walk, then changed path given), in this process."""
    from registry_gen.build import run_build
    from registry_gen.settings import Settings

    settings = Settings(content_dir=content, out_dir=out, base_url=BASE_URL)
    run_build(settings)  # warms imports and templates; nothing changed
    noop = time.perf_counter()
    run_build(settings)
    measured["noop_ms"] = (time.perf_counter() - noop) * 1000
    huge = spec.total_versions >= 1_000_000
    repeats = 3 if huge else 5 if quick else 7  # fewer at 1M: its stat-walk builds stat ~1M files each
    measured["walk"] = min(stat_walk_floor(content) for _ in range(1 if huge else 3))
    walked = 1 if huge else repeats  # each one stats every file: ~1M at 1M
    measured["incremental_ms"] = incremental_runs(settings, content, spec, walked, hinted=False, base=1, major=major)
    measured["hinted_ms"] = incremental_runs(settings, content, spec, repeats, hinted=True, base=2, major=major)
    refresh = time.perf_counter()
    run_build(settings)  # nothing changed, but honours the stale mark: what the IndexRefresher does
    measured["refresh_ms"] = (time.perf_counter() - refresh) * 1000
    if profile:
        title = f"Incremental build profile, {spec.total_versions:,} versions"
        _sections[title] = _profile_incremental(settings, content, spec, f"{major}.9.0")


def build_code_fingerprint() -> str:
    """A digest of every file of registry_gen/ (code, assets) and site_template/ (the pages), and
    of this module's BUILD_CACHE_VERSION: a cached built tree is reused only while it is the same.
    Installed libraries are not part of it (a changed dependency version does not invalidate the
    cache)."""
    digest = hashlib.sha256(f"bench-build-cache-{BUILD_CACHE_VERSION}".encode())
    for folder in ("registry_gen", "site_template"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def measure_cached_scale(spec: RegistrySpec, quick: bool) -> dict[str, Any]:
    """The 1M-version scale. Its content is generated once (bench/cache/<key>/content); its full
    build (the tree, the state and the figures) is done once per build code and kept in
    bench/cache/<key>/built-<fingerprint>/, so a second run only measures the incremental builds.
    The copy floor is skipped here (a million file creations; the note uses the measured cost of
    one file creation instead)."""
    source = ensure_registry(spec)
    fingerprint = build_code_fingerprint()
    home = CACHE_DIR / spec.key
    work = home / f"built-{fingerprint}"
    content, out, record = work / "content", work / "public", work / "full.json"
    if not record.exists():
        for stale in [*home.glob("built-*")]:
            shutil.rmtree(stale)  # another build code's tree (~4M files): not kept
        measured = measure_full(spec, source, content, out, copy_floor_too=False)
        measured["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        record.write_text(json.dumps(measured, indent=2))
    measured = json.loads(record.read_text())
    measured["cached"] = f"full build measured {measured['measured_at']} on build code {fingerprint} (cached)"
    runs = work / "runs"
    run_number = int(runs.read_text()) + 1 if runs.exists() else 1
    runs.write_text(str(run_number))  # each run adds its archives under new version numbers
    measure_incremental(measured, content, out, spec, quick, major=9 + run_number, profile=True)
    return measured


# ---------------------------------------------------------------- figures


def _full_rows(results: dict[int, dict[str, Any]], create_us: float) -> list[dict[str, Any]]:
    rows = []
    for versions, m in results.items():
        full = m["full"]
        ratio = full["seconds"] / m["floor"]
        creation = m["out_files"] * create_us / 1e6
        bound = (
            f"Bounded by archive inflation and file creation, not hashing: reading+hashing+gunzipping every archive "
            f"in C alone takes {m['inflate_floor']:.2f} s ({m['inflate_floor'] / m['floor']:.1f}× the floor; fileCount and "
            f"unpackedSize need every archive inflated and its tar headers parsed); the tree has {m['out_files']:,} files; "
            + (
                f"copying the {m['archives']:,} archives alone takes {m['copy_floor']:.2f} s ({m['copy_floor'] / m['floor']:.1f}× the floor) and "
                if m.get("copy_floor") is not None
                else ""
            )
            + f"one atomic file write costs {create_us:.0f} µs here ({creation:.1f} s for the tree). Profile: see 'Build profile' below."
        )
        if full.get("seconds") and m["versions"]:
            bound += f" {full['seconds'] / m['versions'] * 1000:.2f} ms per version."
        if m.get("cached"):
            bound += f" {m['cached']}."
        rows.append(
            {
                "figure": f"Full build, {versions:,} versions ({m['bytes'] / 1e6:,.0f} MB of archives)",
                "value": round(full["seconds"], 2),
                "unit": "s",
                "baseline": round(m["floor"], 2),
                "ratio": round(ratio, 2),
                "goal": f"≤ {FULL_GOAL}× read+hash floor",
                "met": ratio <= FULL_GOAL,
                "note": (
                    f"baseline = read every archive once + sha1 + sha512, one process; build uses {os.cpu_count()} cores "
                    f"({full['cpu_seconds']:.1f} CPU-s). " + ("" if ratio <= FULL_GOAL else bound)
                ),
            }
        )
    return rows


def _incremental_goals(key: str, versions: int, smallest: int) -> list[str]:
    goals = [f"≤ {FLAT_GOAL}× the {smallest:,}-version time"] if versions != smallest else []
    if key == "hinted_ms":
        goals.append(f"≤ {INCREMENTAL_GOAL_MS:.0f} ms")  # issue 15: flat and ≤ 25 ms, 1k to 1M
    elif versions == 10_000:
        goals.append(f"≤ {WALK_GOAL_MS:.0f} ms")  # issue 7's goal for the stat-walk build at 10k
    return goals


def _incremental_met(key: str, versions: int, smallest: int, value: float, ratio: float) -> bool | None:
    flat = versions == smallest or ratio <= FLAT_GOAL
    if key == "hinted_ms":
        return flat and value <= INCREMENTAL_GOAL_MS
    if versions == smallest:
        return None
    return flat and (versions != 10_000 or value <= WALK_GOAL_MS)


def _incremental_notes(key: str, m: dict[str, Any], met: bool | None) -> list[str]:
    notes = [f"median of {len(m[key])} builds, each after one new archive (read 1, rebuilt 1 package)"]
    if key == "incremental_ms":
        notes.append(
            f"listing+stat of all {m['archives']:,} files alone takes {m['walk'] * 1000:.0f} ms (O(files): the "
            "bound of stat-based detection; give the changed paths to avoid it)"
        )
    notes.append(f"a no-change rebuild (stat walk) takes {m['noop_ms']:.0f} ms")
    if key == "hinted_ms" and m.get("refresh_ms") is not None:
        notes.append(
            "-/all and -/search.json left to the IndexRefresher (as the API and watch mode do); its deferred rewrite, "
            f"at most once per index_refresh_seconds whatever the publish rate, took {m['refresh_ms']:.0f} ms here "
            "(a no-change build honouring the stale mark: stat walk included)"
        )
    if key == "hinted_ms":
        notes.append(
            "each new release keeps its package's dependencies (a release that adds or drops one also renders that "
            "package's page again, for its Dependents list: one page per change, at any size); the build process keeps "
            "its state databases open between builds, as serve and watch do (registry_gen.heldopen)"
        )
    if m["versions"] >= 1_000_000:
        notes.append("lean registry (100k packages x 10 versions, ~1 KB archives): each package document is smaller than at the 20-version scales")
    if met is False and key == "hinted_ms":
        notes.append(
            "fixed part, none of it growing with the registry: the package's own page, version pages and documents, "
            "its tarball, the search-shard leaves of its words (at most 200 records each: the 1,000-version registry's "
            "shards hold 50 at most, so its leaves are smaller; from ~10k on they are full), the one browse page listing "
            "it, the front page, ~180 state statements and ~25 atomic writes (bench/PROFILE.md, goal 3)"
        )
    return notes


def _incremental_rows(results: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    smallest = min(results)
    for key, label in (("incremental_ms", "stat walk of content/"), ("hinted_ms", "changed path given (API, watch)")):
        base = statistics.median(results[smallest][key])
        for versions, m in results.items():
            value = statistics.median(m[key])
            ratio = value / base
            met = _incremental_met(key, versions, smallest, value, ratio)
            rows.append(
                {
                    "figure": f"Incremental build, {label}, {versions:,} versions",
                    "value": round(value, 1),
                    "unit": "ms",
                    "baseline": round(base, 1) if versions != smallest else None,
                    "ratio": round(ratio, 2) if versions != smallest else None,
                    "goal": "; ".join(_incremental_goals(key, versions, smallest)) or "baseline",
                    "met": met,
                    "note": "; ".join(_incremental_notes(key, m, met)),
                }
            )
    return rows


def _memory_rows(results: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    base_scale = 10_000 if 10_000 in results else min(results)
    base = results[base_scale]["full"]["rss_mb"]
    for versions, m in results.items():
        rss = m["full"]["rss_mb"]
        worker = m["full"].get("worker_rss_mb")
        compared = versions > base_scale
        flat = not compared or rss / base <= MEMORY_FLAT_GOAL
        worker_text = (
            f"the largest worker process peaked at {worker:.0f} MB" if worker else "no worker process ran" if worker == 0 else "worker peak unknown"
        )
        note = f"peak RSS of the build process (its own VmHWM); {worker_text} (getrusage of the reaped fork server's children)"
        if not flat:
            note += (
                f"; not flat: +{(rss - base) * 1024 / (versions - base_scale):.3f} KB per version over the "
                f"{base_scale:,}-version build. A full build keeps nothing per package in its heap (plans and links wait "
                "in temporary tables of the state; bench/PROFILE.md, goal 4): look for a new per-package structure, or "
                "a cache past its bound"
            )
        if m.get("cached"):
            note += f"; {m['cached']}"
        goals = [f"≤ {MEMORY_GOAL_MB:.0f} MB"] + ([f"≤ {MEMORY_FLAT_GOAL}× the {base_scale:,}-version figure"] if compared else [])
        rows.append(
            {
                "figure": f"Peak memory of a full build, {versions:,} versions",
                "value": round(rss, 1),
                "unit": "MB",
                "baseline": round(base, 1) if compared else None,
                "ratio": round(rss / base, 2) if compared else None,
                "goal": "; ".join(goals),
                "met": rss <= MEMORY_GOAL_MB and (worker or 0) <= MEMORY_GOAL_MB and flat,
                "note": note,
            }
        )
    return rows


def _big_package_rows() -> list[dict[str, Any]]:
    from registry_gen.build import run_build
    from registry_gen.settings import Settings

    source = ensure_registry(BIG_PACKAGE)
    out = WORK_DIR / BIG_PACKAGE.key / "public"
    shutil.rmtree(out.parent, ignore_errors=True)
    settings = Settings(content_dir=source, out_dir=out, base_url=BASE_URL)
    result = run_build(settings)
    name = package_name(BIG_PACKAGE, 0)
    folder = out / name
    sizes = {}
    for label, relative in (
        ("full, raw", "index.html"),
        ("full, gzip", "index.html.gz"),
        ("abbreviated, raw", "abbreviated.json"),
        ("abbreviated, gzip", "abbreviated.json.gz"),
    ):
        sizes[label] = (folder / relative).stat().st_size / 1024
    shutil.rmtree(out.parent, ignore_errors=True)
    rows = []
    for label, kb in sizes.items():
        rows.append(
            {
                "figure": f"Package document, {result.versions:,} versions, {label}",
                "value": round(kb, 1),
                "unit": "KB",
                "baseline": round(sizes["full, raw"], 1) if label != "full, raw" else None,
                "ratio": round(kb / sizes["full, raw"], 3) if label != "full, raw" else None,
                "goal": "report (no goal)",
                "met": None,
                "note": "what one install of that package downloads; public anchor: a 500-version package = 234 KB full"
                if label == "full, raw"
                else "served when the client asks for it (gzip: Content-Encoding; abbreviated: Accept)",
            }
        )
    return rows


def _profile_incremental(settings: Any, content: Path, spec: RegistrySpec, version: str) -> str:
    """pyinstrument over one incremental build (changed path given)."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        return "pyinstrument is not installed: no profile this run."
    from registry_gen.build import run_build

    archive = new_archive(content, spec, 3, version)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    run_build(settings, changed=[archive], defer_whole=True)
    profiler.stop()
    lines = [line for line in profiler.output_text(unicode=False, color=False, show_all=False).splitlines() if line.strip()]
    return (
        f"One incremental build of the {spec.total_versions:,}-version registry after one new archive, its path "
        "given (the write API's and watch mode's path), pyinstrument, wall-clock:\n\n```\n" + "\n".join(lines[:60]) + "\n```"
    )


def _profile(quick: bool) -> str:
    """pyinstrument over a full build of the 1k registry in one process (workers off), so every
    frame is visible."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        return "pyinstrument is not installed (`.venv/bin/pip install pyinstrument`): no profile this run."
    import registry_gen.build.read as read_phase
    import registry_gen.build.write as write_phase
    from registry_gen.build import run_build
    from registry_gen.settings import Settings

    source = ensure_registry(SCALES[1_000])
    with tempfile.TemporaryDirectory(prefix="bench-profile-", dir=CACHE_DIR) as scratch:
        settings = Settings(content_dir=source, out_dir=Path(scratch) / "public", base_url=BASE_URL)
        saved = read_phase.PARALLEL_THRESHOLD, write_phase.PARALLEL_PACKAGES
        read_phase.PARALLEL_THRESHOLD = write_phase.PARALLEL_PACKAGES = 10**9
        profiler = Profiler(interval=0.001)
        try:
            profiler.start()
            run_build(settings)
            profiler.stop()
        finally:
            read_phase.PARALLEL_THRESHOLD, write_phase.PARALLEL_PACKAGES = saved
    text = profiler.output_text(unicode=False, color=False, show_all=False)
    lines = [line for line in text.splitlines() if line.strip()]
    body = "\n".join(lines[:70])
    return (
        "Full build of the 1,000-version registry in one process (workers disabled so every frame shows), "
        "pyinstrument, wall-clock:\n\n```\n" + body + "\n```"
    )


def run(quick: bool) -> list[dict[str, Any]]:
    scales = [1_000, 10_000] if quick else [1_000, 10_000, 100_000, MILLION.total_versions]
    if os.environ.get("BENCH_SCALES"):  # e.g. BENCH_SCALES=100000,1000000 to measure just those
        scales = [int(n) for n in os.environ["BENCH_SCALES"].split(",")]
    results = {n: measure_scale(n, quick) for n in scales}
    create_us = file_creation_cost(WORK_DIR / "create-cost")
    rows = _full_rows(results, create_us) + _incremental_rows(results) + _memory_rows(results) + _big_package_rows()
    if quick:
        rows.append(
            {
                "figure": "Build figures at 100,000 and 1,000,000 versions",
                "value": None,
                "unit": "",
                "baseline": None,
                "ratio": None,
                "goal": "",
                "met": None,
                "note": "skipped in --quick (run `make bench` without BENCH_ARGS for 1k, 10k, 100k and 1M; the 1M registry and its built tree are cached in bench/cache/)",
            }
        )
    _sections["Build profile"] = _profile(quick)
    return rows


def sections(quick: bool) -> dict[str, str]:
    return dict(_sections)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        raise SystemExit(child_main(sys.argv[2], sys.argv[3]))
    print(json.dumps(run("--quick" in sys.argv), indent=2, default=str))
