"""Full build of the real-world corpus (issue 15, goal 1): every tarball of
tests/realworld/package-lock.json (~1,200 real npm archives, fetched once and cached by
tests/realworld/corpus.py), against floors measured in the same run:

- read + sha1 + sha512 of every archive;
- the same plus a full zlib inflate (what `dist.fileCount`/`unpackedSize` need): the goal's floor;
- creating the tree's files (same folders, same sizes, plain writes): what writing the tree costs
  at least, beside it.

The same build in one process (workers off), timed around each part without a profiler, says
where the CPU goes and names the next bound (the largest part); a cProfile run of it ranks the
functions (the profiler inflates code made of many small Python calls, so it ranks, not measures).
Run alone with `python -m bench --only corpus [--quick]`.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_build import BASE_URL, archives_under, build_in_child, inflate_floor, read_hash_floor
from bench.synthetic import CACHE_DIR

FULL_GOAL = 1.5
MEMORY_GOAL_MB = 150.0
# Where a full build's time goes: (label, function names whose cumulative time is that part, the
# label of the part it is included in, if any).
PARTS = (
    ("reading archives (inflate + tar headers + manifest)", ("inspect_archive",), None),
    ("README Markdown (cmark-gfm + nh3)", ("render_readme",), "package and version HTML pages (contexts + jinja, README included)"),
    ("package and version HTML pages (contexts + jinja, README included)", ("render_package_site", "package_page"), None),
    ("front page, name-range pages and search shards", ("front_page", "browse_page", "search_shard"), None),
    ("package documents (JSON + gzip + writing their files)", ("_write_documents",), None),
    ("package documents' JSON + gzip", ("package_documents",), "package documents (JSON + gzip + writing their files)"),
    ("tarball copies", ("_write_tarballs",), None),
    ("atomic file writes (all kinds, included above)", ("atomic_write_bytes", "atomic_copy"), None),
    ("pages rendered again for their Dependents list", ("_refresh_dependents",), None),
)
# What a part that includes others is once they are taken out (next_bounds).
WITHOUT_INCLUDED = {
    "package and version HTML pages (contexts + jinja, README included)": "package and version HTML pages (contexts + jinja without the README)",
    "package documents (JSON + gzip + writing their files)": "writing the package documents' files (their JSON + gzip taken out)",
}
_sections: dict[str, str] = {}


def timed_cpu(measure: Any, paths: list[Path]) -> tuple[float, float]:
    """(wall seconds `measure(paths)` reports, CPU seconds this process spent in it)."""
    started = time.process_time()
    wall = measure(paths)
    return wall, time.process_time() - started


def tree_files(out: Path) -> list[tuple[str, int]]:
    """Every file of a built tree, as (path relative to it, size)."""
    found = []
    for folder, _, files in os.walk(out):
        relative = os.path.relpath(folder, out)
        found.extend((os.path.join(relative, name), os.path.getsize(os.path.join(folder, name))) for name in files)
    return found


def file_creation_floor(files: list[tuple[str, int]], scratch: Path) -> float:
    """Seconds to create the same files in the same folders, one plain write each (no temp, no
    rename): what any tool writing this tree pays at least on this disk."""
    blocks: dict[int, bytes] = {}
    started = time.perf_counter()
    made: set[str] = set()
    for relative, size in files:
        target = os.path.join(scratch, relative)
        folder = os.path.dirname(target)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        with open(target, "wb") as handle:
            handle.write(blocks.setdefault(size, b"x" * size))
    seconds = time.perf_counter() - started
    shutil.rmtree(scratch, ignore_errors=True)
    return seconds


def part_seconds(stats: pstats.Stats, functions: set[str]) -> float:
    """The cumulative time of `functions`, each counted only where none of them called it (a
    package page rendered within render_package_site is not counted twice)."""
    total = 0.0
    for (_file, _line, function), row in stats.stats.items():  # type: ignore[attr-defined]
        if function in functions:
            callers: dict[tuple[str, int, str], tuple[Any, ...]] = row[4]
            total += sum(call[3] for (_f, _l, caller), call in callers.items() if caller not in functions)
    return total


def _timed(function: Any, label: str, spent: dict[str, list[float]], inside: set[str]) -> Any:
    """`function`, adding the CPU and wall seconds of its outermost calls to spent[label]."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        if label in inside:
            return function(*args, **kwargs)
        inside.add(label)
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label][0] += time.process_time() - cpu
            spent[label][1] += time.perf_counter() - wall
            inside.discard(label)

    return timed


def timed_parts(content: Path, scratch: Path) -> tuple[float, float, float, list[tuple[str, float, float]]]:
    """One single-process build without the profiler (cProfile inflates code of many small Python
    calls, jinja's generators or the tar header walk, against C calls like inflate or open): its
    CPU, wall and kernel CPU seconds (creating files and folders, mostly: what the disk's state
    swings), and each part's (label, CPU, wall), timed around the PARTS' functions wherever
    registry_gen binds them."""
    import sys

    import registry_gen.build.indexes  # noqa: F401  (every module binding a PARTS function loaded)
    import registry_gen.build.read as read_phase
    import registry_gen.build.write as write_phase
    import registry_gen.markdown  # noqa: F401
    from registry_gen.build import run_build
    from registry_gen.settings import Settings

    labels = {function: label for label, functions, _ in PARTS for function in functions}
    spent: dict[str, list[float]] = {label: [0.0, 0.0] for label, _, _ in PARTS}
    inside: set[str] = set()
    patched: list[tuple[Any, str, Any]] = []
    wrappers: dict[int, Any] = {}
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("registry_gen") and m is not None]:
        for attribute, value in list(vars(module).items()):
            label = labels.get(getattr(value, "__name__", ""))
            if label and callable(value) and str(getattr(value, "__module__", "")).startswith("registry_gen"):
                wrapper = wrappers.setdefault(id(value), _timed(value, label, spent, inside))
                patched.append((module, attribute, value))
                setattr(module, attribute, wrapper)
    settings = Settings(content_dir=content, out_dir=scratch / "public", base_url=BASE_URL)
    saved = read_phase.PARALLEL_THRESHOLD, write_phase.PARALLEL_PACKAGES
    read_phase.PARALLEL_THRESHOLD = write_phase.PARALLEL_PACKAGES = 10**9
    cpu, wall, kernel = time.process_time(), time.perf_counter(), os.times().system
    try:
        run_build(settings)
        cpu, wall, kernel = time.process_time() - cpu, time.perf_counter() - wall, os.times().system - kernel
    finally:
        read_phase.PARALLEL_THRESHOLD, write_phase.PARALLEL_PACKAGES = saved
        for module, attribute, value in patched:
            setattr(module, attribute, value)
        shutil.rmtree(scratch, ignore_errors=True)
    return cpu, wall, kernel, [(label, seconds[0], seconds[1]) for label, seconds in spent.items()]


def profile_parts(content: Path, scratch: Path) -> tuple[float, list[tuple[str, float]], str]:
    """One single-process build under cProfile: its time, the PARTS' cumulative times, the top
    functions by own time."""
    import registry_gen.build.read as read_phase
    import registry_gen.build.write as write_phase
    from registry_gen.build import run_build
    from registry_gen.settings import Settings

    settings = Settings(content_dir=content, out_dir=scratch / "public", base_url=BASE_URL)
    saved = read_phase.PARALLEL_THRESHOLD, write_phase.PARALLEL_PACKAGES
    read_phase.PARALLEL_THRESHOLD = write_phase.PARALLEL_PACKAGES = 10**9
    profiler = cProfile.Profile()
    try:
        started = time.perf_counter()
        profiler.enable()
        run_build(settings)
        profiler.disable()
        total = time.perf_counter() - started
    finally:
        read_phase.PARALLEL_THRESHOLD, write_phase.PARALLEL_PACKAGES = saved
    stats = pstats.Stats(profiler)
    parts = [(label, part_seconds(stats, set(functions))) for label, functions, _ in PARTS]
    top = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:25]  # type: ignore[attr-defined]
    lines = [f"{row[2]:8.2f} s own  {row[3]:8.2f} s cum  {row[1]:>8} calls  {Path(f).name}:{line}({fn})" for (f, line, fn), row in top]
    return total, parts, "\n".join(lines)


def next_bounds(parts: list[tuple[str, float]], total: float) -> list[tuple[str, float]]:
    """The parts of the profile as shares of the build, largest first, each without the parts
    included in it (the pages without their README), so the first is what to cut next."""
    seconds = dict(parts)
    for label, _, within in PARTS:
        if within is not None:
            seconds[within] = seconds.get(within, 0.0) - seconds.get(label, 0.0)
    renamed = {label: WITHOUT_INCLUDED.get(label, label) for label in seconds}
    return sorted(((renamed[label], value / total) for label, value in seconds.items()), key=lambda item: -item[1])


def bound_sentence(bounds: list[tuple[str, float]], top: str) -> str:
    """Names the next bound: the largest part of the profile, the next two, and the function that
    spends most on its own."""
    (first, share), *others = bounds
    then = "; then " + ", ".join(f"{label} {value:.0%}" for label, value in others[:2]) if others else ""
    heaviest = top.splitlines()[0].split("  ")[-1].strip() if top else "?"
    return f"Next bound: {first} ({share:.0%} of the one-process build's CPU){then}; the function spending most on its own under cProfile: {heaviest}."


def run(quick: bool) -> list[dict[str, Any]]:
    from tests.realworld.corpus import ensure_corpus

    corpus = ensure_corpus()
    paths = archives_under(corpus.content)
    size = sum(p.stat().st_size for p in paths)
    hash_floor = read_hash_floor(paths)
    inflate, inflate_cpu = min(timed_cpu(inflate_floor, paths) for _ in range(2))
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-corpus-", dir=CACHE_DIR) as name:
        scratch = Path(name)
        builds = [build_in_child(corpus.content, scratch / f"public{i}") for i in range(1 if quick else 2)]
        full = min(builds, key=lambda b: b["seconds"])
        files = tree_files(scratch / "public0")
        creation = file_creation_floor(files, scratch / "creation")
        for i in range(len(builds)):
            shutil.rmtree(scratch / f"public{i}", ignore_errors=True)
        profiled, _, top = profile_parts(corpus.content, scratch / "profile")
        one_cpu, one_wall, one_kernel, timed = timed_parts(corpus.content, scratch / "timed")
    ratio = full["seconds"] / inflate
    parts = [(label, cpu) for label, cpu, _ in timed]
    breakdown = "; ".join(f"{label} {cpu / one_cpu:.0%}" for label, cpu in parts)
    bound = bound_sentence(next_bounds(parts, one_cpu), top)
    walls = "; ".join(f"{label} {wall:.1f} s" for label, _, wall in timed)
    _sections["Real-corpus build profile"] = (
        f"Full build of the {len(paths):,}-tarball real corpus in one process (workers off), without the "
        f"profiler: {one_cpu:.1f} CPU-s ({one_kernel:.1f} of them in the kernel, creating files and folders "
        f"mostly), {one_wall:.1f} s wall. Share of its CPU by part (timed around each "
        f"part's functions; parts overlap where noted): {breakdown}. Wall seconds by part (the machine's "
        f"load and the disk in them): {walls}.\n\n{bound}\n\nThe same build under cProfile ({profiled:.1f} s; "
        f"the profiler inflates code of many small Python calls, so these rank, they do not measure), top "
        f"functions by own time:\n\n```\n{top}\n```"
    )
    note = (
        f"{len(paths):,} real npm tarballs ({size / 1e6:.0f} MB), {full['packages']:,} packages; baseline = read + sha1 + "
        f"sha512 + zlib inflate of every archive, one process ({inflate:.2f} s; read + hash alone {hash_floor:.2f} s); "
        f"the build uses {os.cpu_count()} cores (worker processes) and writes {len(files):,} files, whose "
        f"creation alone (plain writes, row below) takes {creation:.2f} s. In CPU seconds (what the machine's "
        f"other load does not inflate): build {full['cpu_seconds']:.1f} CPU-s (its workers included) against "
        f"the floor's {inflate_cpu:.2f}, {full['cpu_seconds'] / inflate_cpu:.1f}×."
    )
    if ratio > FULL_GOAL:
        note += f" Bounded by (one-process build's CPU by part, see 'Real-corpus build profile'): {breakdown}. {bound}"
    return [
        {
            "figure": f"Full build, real corpus of {len(paths):,} tarballs",
            "value": round(full["seconds"], 2),
            "unit": "s",
            "baseline": round(inflate, 2),
            "ratio": round(ratio, 2),
            "goal": f"≤ {FULL_GOAL}× read+hash+inflate floor",
            "met": ratio <= FULL_GOAL,
            "note": note,
        },
        {
            "figure": f"File-creation floor, the corpus tree's {len(files):,} files",
            "value": round(creation, 2),
            "unit": "s",
            "baseline": round(inflate, 2),
            "ratio": round(creation / inflate, 2),
            "goal": "floor (beside the full build)",
            "met": None,
            "note": "same folders and sizes, one open+write+close each, no temp file or rename: what writing "
            "the tree costs at least on this disk; the build's atomic writes add a temp name and a rename each",
        },
        {
            "figure": f"Peak memory, full build of the real corpus ({len(paths):,} tarballs)",
            "value": round(full["rss_mb"], 1),
            "unit": "MB",
            "baseline": None,
            "ratio": None,
            "goal": f"≤ {MEMORY_GOAL_MB:.0f} MB",
            "met": full["rss_mb"] <= MEMORY_GOAL_MB,
            "note": "peak RSS of the build process (its own VmHWM)"
            + (f"; the largest worker process peaked at {full['worker_rss_mb']:.0f} MB" if full.get("worker_rss_mb") else ""),
        },
    ]


def sections(quick: bool) -> dict[str, str]:
    return dict(_sections)
