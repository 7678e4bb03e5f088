"""`python -m bench.compare --against REV [--new REV2]`: a revision's (default HEAD) publish and incremental-build cost
beside an older revision's, measured in one run, interleaved.

A refactoring promises "not slower"; two `make bench` runs on a shared machine cannot show that,
because their noise is larger than the difference. Here both revisions run the same measurement
in alternating rounds (old, new, new, old, ...), so load that comes and goes hits both alike, and
the report gives each one's median and the ratio new/old.

- publish: a real `registry-gen serve` (a subprocess, that revision's code first on PYTHONPATH)
  on a copy of the 1,000-version synthetic registry; the server share of a raw `PUT /<name>` until
  the tree lists the version (bench_publish.server_share);
- incremental build: `run_build(settings, changed=[archive])` after one new archive, in a child
  process of that revision, on another copy of the same registry.

Only the public entry points both revisions share are called (`Settings`, `run_build`, the HTTP
API), so any revision since the write API exists can be compared. Nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.bench_publish import add_user, registry_server, server_share
from bench.synthetic import SCALES, ensure_registry

REPO = Path(__file__).resolve().parent.parent
FIGURES = {
    "publish": "publish server share (PUT until readable), wall",
    "publish_cpu": "publish: the server's CPU time per publish",
    "incremental": "incremental build, changed path given, wall",
    "incremental_cpu": "incremental build, changed path given, CPU time",
}

# Runs in a child with only the revision under test on its path: it must not import `bench`.
CHILD = r'''
import io, json, sys, tarfile, time
from pathlib import Path
from registry_gen.build import run_build
from registry_gen.settings import Settings


def main():
    content, out, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    settings = Settings(content_dir=content, out_dir=out, base_url="http://registry.example/")
    run_build(settings)
    run_build(settings)  # warm: imports, templates, the state database's pages
    package = sorted(p for p in content.iterdir() if p.is_dir() and not p.name.startswith("@"))[0]
    name = package.name

    def archive(version):
        manifest = json.dumps({"name": name, "version": version, "main": "index.js", "license": "MIT"}).encode()
        members = [("package/package.json", manifest), ("package/README.md", b"# a release\n" * 60),
                   ("package/index.js", b"module.exports = 1;\n" * 200)]
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for path, data in members:
                info = tarfile.TarInfo(path)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        target = package / f"{name}-{version}.tgz"
        target.write_bytes(buffer.getvalue())
        return target

    samples = []
    for index in range(rounds):
        path = archive(f"99.0.{index}")
        started, cpu = time.perf_counter(), time.process_time()
        result = run_build(settings, changed=[path])
        samples.append([(time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000])
        if result.archives_read != 1 or result.errors:
            raise SystemExit(f"unexpected incremental build: read {result.archives_read}, errors {result.errors[:2]}")
    print(json.dumps(samples))


# The build's worker pool (forkserver) re-imports this file in each worker: only run when main.
if __name__ == "__main__":
    main()
'''


def export_revision(rev: str, target: Path) -> Path:
    """The revision's files, as `git archive` gives them (no worktree left behind)."""
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def registry_copy(source: Path, work: Path, label: str) -> Path:
    root = work / label
    shutil.copytree(source, root / "content")
    return root


def children_cpu_seconds() -> float:
    """User + system CPU of this process's live children (the server), all their threads."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[1]) == os.getpid():
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def publish_samples(tree: Path, source: Path, work: Path, label: str, rounds: int) -> tuple[list[float], float]:
    """Wall ms of each publish, and the server's CPU ms per publish over the whole series (CPU
    time barely moves with other load on the machine; wall time does)."""
    root = registry_copy(source, work, label)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree)  # registry_server's child inherits it: that revision serves
    try:
        with registry_server(root) as base:
            token = add_user(base, "bencher")
            before = children_cpu_seconds()
            samples, _ = server_share(base, token, "bench-raw-publish", rounds)
            cpu_ms = (children_cpu_seconds() - before) * 1000 / (rounds + 1)
    finally:
        os.environ.pop("PYTHONPATH") if saved is None else os.environ.__setitem__("PYTHONPATH", saved)
        shutil.rmtree(root, ignore_errors=True)
    return [s * 1000 for s in samples], cpu_ms


def incremental_samples(tree: Path, source: Path, work: Path, label: str, rounds: int) -> list[list[float]]:
    root = registry_copy(source, work, label)
    script = work / "child" / "incremental_child.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # cwd=tree too: the build's fork server starts with the working folder first on its path.
    try:
        done = subprocess.run([sys.executable, str(script), str(root / "content"), str(root / "public"), str(rounds)],
                              env=env, cwd=tree, check=True, stdout=subprocess.PIPE, text=True, timeout=1800)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(rev: str, new: str, rounds: int, repeats: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    try:
        # Both exported: edits to the checkout while the comparison runs must not leak into it.
        trees = {rev: export_revision(rev, work / "old"), new: export_revision(new, work / "new")}
        source = ensure_registry(SCALES[1_000], progress=False)
        results: dict[str, dict[str, list[float]]] = {label: {figure: [] for figure in FIGURES} for label in trees}
        order = list(trees)
        for repeat in range(repeats):
            for label in order if repeat % 2 == 0 else reversed(order):
                slot = f"{'old' if label == rev else 'new'}-{repeat}"  # labels may be equal revisions
                walls, cpu_ms = publish_samples(trees[label], source, work, slot, rounds)
                results[label]["publish"] += walls
                results[label]["publish_cpu"].append(cpu_ms)
                for wall, cpu in incremental_samples(trees[label], source, work, slot, rounds):
                    results[label]["incremental"].append(wall)
                    results[label]["incremental_cpu"].append(cpu)
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(rev: str, new: str, results: dict[str, dict[str, list[float]]]) -> str:
    lines = [f"| figure (1,000-version registry) | {rev} median ms | {new} median ms | new/old |", "|---|---|---|---|"]
    for figure, label in FIGURES.items():
        old = statistics.median(results[rev][figure])
        new_ms = statistics.median(results[new][figure])
        lines.append(f"| {label} | {old:.1f} | {new_ms:.1f} | {new_ms / old:.2f}× |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the git revision to compare with (e.g. a tag or commit)")
    parser.add_argument("--new", default="HEAD", help="the revision measured against it (default HEAD)")
    parser.add_argument("--rounds", type=int, default=10, help="samples per figure per repeat")
    parser.add_argument("--repeats", type=int, default=4, help="alternating repeats of both revisions")
    args = parser.parse_args(argv)
    print(report(args.against, args.new, compare(args.against, args.new, args.rounds, args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
