"""A deterministic synthetic registry: N packages x M versions of realistic npm tarballs.

Written once into bench/cache/<key>/content and reused while the key (sizes, seed, generator
version) is the same. A `.complete` marker is written last, so an interrupted generation is
redone rather than half-used.

What "realistic" means here (public-registry shapes, scaled down to stay on one disk):
- archive sizes are log-normal around ~5 KB compressed, with a tail of prebuilt binaries
  (0.5% of versions carry a 0.5-3 MB incompressible blob), so a few KB to a few MB;
- README sizes are log-normal around 3 KB (capped at 200 KB), one README per package;
- dependency fan-out is skewed: a third have none, most have a handful, a few have 10-30;
- about 30% of the names are scoped; about half the packages carry a registry-meta.json
  (as the write API leaves behind) with maintainers, dist-tags and publish times.

Run `python -m bench.synthetic --packages 500 --versions 20` to generate one by hand.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import io
import json
import math
import os
import random
import sys
import tarfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GENERATOR_VERSION = 2
CACHE_DIR = Path(__file__).resolve().parent / "cache"
NPM_FIXED_MTIME = 499162500
EPOCH_2020 = 1_577_836_800
POOL_BYTES = 6 * 1024 * 1024
WORDS = (
    "function return const let var if else for while switch case break continue new this typeof "
    "instanceof null undefined true false module exports require async await yield class extends "
    "super import export default try catch finally throw Promise Object Array String Number Map Set "
    "value result options config callback handler request response buffer stream error data index "
    "length push pop shift slice splice concat join split map filter reduce forEach keys entries "
    "assign freeze create defineProperty prototype constructor resolve reject then parse stringify "
    "process env platform path join dirname basename readFile writeFile emit listener event once"
).split()
PUNCTUATION = ("(", ")", "{", "}", ";", ".", ",", " = ", " === ", " => ", "\n", "\n  ", "[", "]", " + ", "'", ":")


@dataclass(frozen=True)
class RegistrySpec:
    packages: int
    versions: int  # per package
    seed: int = 7
    scoped_share: float = 0.3
    meta_share: float = 0.5
    binary_share: float = 0.005
    prefix: str = "syn"
    lean: bool = False  # tiny archives (~1 KB) and short READMEs: the 1M-version scale, bounded

    @property
    def key(self) -> str:
        lean = "-lean" if self.lean else ""
        return f"{self.prefix}-{self.packages}x{self.versions}{lean}-s{self.seed}-g{GENERATOR_VERSION}"

    @property
    def total_versions(self) -> int:
        return self.packages * self.versions


# The registries the build figures use; same versions per package so documents stay comparable.
SCALES: dict[int, RegistrySpec] = {
    1_000: RegistrySpec(packages=50, versions=20),
    10_000: RegistrySpec(packages=500, versions=20),
    100_000: RegistrySpec(packages=5_000, versions=20),
}
# The 1M-version scale (full run only): 100k packages x 10 versions of ~1 KB archives, so
# generating it (~1M files, ~4 GB on disk) and building it stay bounded. Its per-package document
# is smaller than the 20-version scales' (10 versions, short README), which favours it slightly in
# the incremental figure; the report says so.
MILLION = RegistrySpec(packages=100_000, versions=10, binary_share=0.0, lean=True)
BIG_PACKAGE = RegistrySpec(packages=1, versions=1_000, scoped_share=0.0, meta_share=0.0, prefix="big")


def package_name(spec: RegistrySpec, index: int) -> str:
    rng = random.Random(f"{spec.seed}-name-{index}")
    word = rng.choice(WORDS).lower()
    bare = f"{spec.prefix}-{word}-{index:05d}"
    if rng.random() < spec.scoped_share:
        return f"@{spec.prefix}-scope{index % 17}/{bare}"
    return bare


def version_string(j: int) -> str:
    """1.0.0, 1.0.1, ... 1.0.9, 1.1.0, ... : increasing, and `^1.0.0` matches the first 250."""
    return f"{1 + j // 50}.{(j // 10) % 5}.{j % 10}"


@functools.lru_cache(maxsize=2)
def text_pool(seed: int) -> bytes:
    """A few MB of JavaScript-looking text (compresses about 3-4x, like real sources)."""
    rng = random.Random(f"{seed}-pool")
    tokens = rng.choices(WORDS, k=POOL_BYTES // 5)
    glue = rng.choices(PUNCTUATION, k=len(tokens))
    return "".join(t + g for t, g in zip(tokens, glue, strict=True)).encode()[:POOL_BYTES]


PROSE = (
    "the a an this that it is are was be can will should may use uses used using with without for from to of in on "
    "by as and or not when if then returns option options value values file files module modules package install "
    "run build test config default example note see also more less fast small simple easy support supports "
    "request response stream buffer error errors callback promise async function object array string number"
).split()


def markdown_readme(name: str, rng: random.Random, size: int, pool: bytes) -> bytes:
    """A README shaped like real ones: headings, prose, lists, fenced code, a few links."""
    parts = [f"# {name}\n\n", f"[![build](https://ci.example.com/{name}.svg)](https://ci.example.com/{name})\n\n"]
    total = sum(map(len, parts))
    while total < size:
        roll = rng.random()
        if roll < 0.15:
            block = "## " + " ".join(rng.choices(PROSE, k=rng.randint(1, 4))).capitalize() + "\n\n"
        elif roll < 0.55:
            sentences = [
                " ".join(rng.choices(PROSE, k=rng.randint(6, 18))).capitalize() + rng.choice([".", ".", ".", ":"])
                for _ in range(rng.randint(2, 6))
            ]
            if rng.random() < 0.3:
                sentences.append(f"See [the docs](https://docs.example.com/{rng.choice(PROSE)}) and `{rng.choice(WORDS)}()`.")
            block = " ".join(sentences) + "\n\n"
        elif roll < 0.75:
            items = [f"- **{rng.choice(PROSE)}**: " + " ".join(rng.choices(PROSE, k=rng.randint(3, 10))) for _ in range(rng.randint(2, 7))]
            block = "\n".join(items) + "\n\n"
        else:
            code = _slice(pool, rng, rng.randint(100, 900)).decode("ascii", "replace").replace("```", "")
            block = "```js\n" + code + "\n```\n\n"
        parts.append(block)
        total += len(block)
    return "".join(parts).encode()


def _slice(pool: bytes, rng: random.Random, size: int) -> bytes:
    size = max(1, min(size, len(pool) - 1))
    start = rng.randrange(0, len(pool) - size)
    return pool[start : start + size]


def _lognormal(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return int(min(high, max(low, median * math.exp(rng.gauss(0, sigma)))))


def _fanout(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.33:
        return 0
    if roll < 0.75:
        return rng.randint(1, 3)
    if roll < 0.96:
        return rng.randint(4, 10)
    return rng.randint(11, 30)


def make_tarball(files: list[tuple[str, bytes]], level: int = 6) -> bytes:
    """An npm-style tarball (everything under package/, fixed mtimes) without repacking costs."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=level) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for path, data in files:
                info = tarfile.TarInfo("package/" + path)
                info.size = len(data)
                info.mtime = NPM_FIXED_MTIME
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _manifest(name: str, version: str, rng: random.Random, dependencies: dict[str, str]) -> dict[str, object]:
    manifest: dict[str, object] = {
        "name": name,
        "version": version,
        "description": " ".join(rng.choices(WORDS, k=rng.randint(4, 14))),
        "main": "index.js",
        "keywords": rng.sample(WORDS, rng.randint(0, 6)),
        "license": rng.choice(["MIT", "ISC", "Apache-2.0", "BSD-3-Clause"]),
        "author": {"name": f"Author {rng.randint(1, 300)}", "email": f"a{rng.randint(1, 300)}@example.com"},
        "repository": {"type": "git", "url": f"git+https://example.com/{name.replace('@', '')}.git"},
        "scripts": {"test": "node test.js"},
        "engines": {"node": ">=14"},
    }
    if dependencies:
        manifest["dependencies"] = dependencies
    if rng.random() < 0.3:
        manifest["devDependencies"] = {f"dev-tool-{rng.randint(1, 50)}": "^1.0.0" for _ in range(rng.randint(1, 8))}
    if rng.random() < 0.1:
        manifest["bin"] = {name.split("/")[-1]: "bin/cli.js"}
    return manifest


def package_files(
    spec: RegistrySpec, index: int, pool: bytes, dependency_names: list[str] | None = None
) -> Iterator[tuple[str, str, bytes, int]]:
    """(relative path, version, tarball bytes, mtime) for every version of package `index`."""
    name = package_name(spec, index)
    rng = random.Random(f"{spec.seed}-pkg-{index}")
    readme_size = _lognormal(rng, 300, 0.5, 100, 1_000) if spec.lean else _lognormal(rng, 3_000, 1.0, 200, 200_000)
    readme_body = markdown_readme(name, rng, readme_size, pool)
    folder = name  # real slash for scopes, as the write API stores them
    bare = name.split("/")[-1]
    base_time = EPOCH_2020 + rng.randrange(0, 3 * 365 * 86400)
    fanout = _fanout(rng)
    for j in range(spec.versions):
        version = version_string(j)
        vrng = random.Random(f"{spec.seed}-pkg-{index}-v{j}")
        if dependency_names is not None:
            targets = dependency_names
        else:
            count = min(fanout + vrng.randint(-1, 1), spec.packages - 1) if fanout else 0
            picks = vrng.sample(range(spec.packages), min(max(count, 0), spec.packages))
            targets = [package_name(spec, p) for p in picks if p != index]
        dependencies = {t: "^1.0.0" for t in sorted(targets)}
        manifest = _manifest(name, version, vrng, dependencies)
        files = [
            ("package.json", json.dumps(manifest, indent=2).encode()),
            ("README.md", readme_body + f"\n## Changes in {version}\n\nSee the changelog.\n".encode()),
        ]
        code_size = _lognormal(vrng, 600, 0.5, 200, 2_000) if spec.lean else _lognormal(vrng, 16_000, 1.3, 300, 12_000_000)
        chunk = 24_000
        for k in range(max(1, min(200, code_size // chunk))):
            files.append((f"lib/part{k:03d}.js" if k else "index.js", _slice(pool, vrng, min(chunk, code_size))))
        if vrng.random() < spec.binary_share:
            files.append(("prebuilds/linux-x64/addon.node", vrng.randbytes(vrng.randint(512 * 1024, 3 * 1024 * 1024))))
        mtime = base_time + j * 86400 + vrng.randrange(0, 86400)
        yield f"{folder}/{bare}-{version}.tgz", version, make_tarball(files), mtime


def _meta_document(spec: RegistrySpec, index: int, times: dict[str, int]) -> bytes | None:
    rng = random.Random(f"{spec.seed}-meta-{index}")
    if rng.random() >= spec.meta_share:
        return None
    iso = {v: _iso(t) for v, t in times.items()}
    latest = max(times, key=lambda v: times[v])
    meta: dict[str, object] = {
        "name": package_name(spec, index),
        "dist-tags": {"latest": latest},
        "maintainers": [{"name": f"user{rng.randint(1, 300)}", "email": "u@example.com"}],
        "time": iso,
        "created": min(iso.values()),
        "modified": max(iso.values()),
        "revision": len(times),
    }
    return json.dumps(meta, indent=2, sort_keys=True).encode()


def _iso(seconds: int) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _write_file(path: Path, data: bytes, mtime: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


def _generate_range(args: tuple[RegistrySpec, str, int, int, dict[int, list[str]] | None]) -> int:
    spec, content, start, stop, dependencies = args
    pool = text_pool(spec.seed)
    root = Path(content)
    written = 0
    for index in range(start, stop):
        times: dict[str, int] = {}
        names = dependencies.get(index) if dependencies is not None else None
        for relative, version, data, mtime in package_files(spec, index, pool, names):
            _write_file(root / relative, data, mtime)
            times[version] = mtime
            written += len(data)
        meta = _meta_document(spec, index, times)
        if meta is not None:
            folder = package_name(spec, index)
            _write_file(root / folder / "registry-meta.json", meta, max(times.values()))
    return written


def generate(
    spec: RegistrySpec,
    target: Path,
    *,
    workers: int | None = None,
    dependencies: dict[int, list[str]] | None = None,
    progress: bool = False,
    done_log: Path | None = None,
) -> int:
    """Writes the registry's content folder into `target`; returns bytes written.

    Restartable: each finished batch of packages is appended to `done_log` (its first package
    and its bytes), and a batch already there is not generated again. A batch cut off half-way
    is simply rewritten (generation is deterministic). Uses every core."""
    target.mkdir(parents=True, exist_ok=True)
    workers = workers or os.cpu_count() or 1
    step = max(1, min(50, spec.packages // (workers * 4) or 1))
    finished = _finished_batches(done_log)
    total = sum(finished.values())
    starts = [s for s in range(0, spec.packages, step) if s not in finished]
    jobs = [(spec, str(target), s, min(s + step, spec.packages), dependencies) for s in starts]
    log = open(done_log, "a") if done_log is not None else None  # noqa: SIM115 - closed below
    try:
        if workers > 1 and len(jobs) > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = {pool.submit(_generate_range, job): job[2] for job in jobs}
                for done, future in enumerate(as_completed(futures), 1):
                    total += _record_batch(log, futures[future], future.result())
                    if progress and (done % 20 == 0 or done == len(jobs)):
                        print(f"\r  generating {spec.key}: {done}/{len(jobs)} batches left to do", end="", file=sys.stderr, flush=True)
        else:
            for job in jobs:
                total += _record_batch(log, job[2], _generate_range(job))
    finally:
        if log is not None:
            log.close()
    if progress:
        print(file=sys.stderr)
    return total


def _finished_batches(done_log: Path | None) -> dict[int, int]:
    """{first package of a finished batch: its bytes} from the log (a torn last line is ignored)."""
    if done_log is None or not done_log.exists():
        return {}
    finished = {}
    for line in done_log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            finished[int(parts[0])] = int(parts[1])
    return finished


def _record_batch(log: Any, start: int, written: int) -> int:
    if log is not None:
        log.write(f"{start} {written}\n")
        log.flush()
    return written


def ensure_registry(
    spec: RegistrySpec,
    cache_dir: Path = CACHE_DIR,
    *,
    dependencies: dict[int, list[str]] | None = None,
    progress: bool = True,
) -> Path:
    """The cached content folder for `spec`, generated on first use (deterministic for a seed).
    An interrupted generation carries on where it stopped (see `generate`)."""
    home = cache_dir / spec.key
    content = home / "content"
    marker = home / ".complete"
    if marker.exists():
        return content
    home.mkdir(parents=True, exist_ok=True)
    total = generate(spec, content, dependencies=dependencies, progress=progress, done_log=home / ".batches")
    marker.write_text(json.dumps({"spec": asdict(spec), "bytes": total}, indent=2))
    return content


def registry_bytes(spec: RegistrySpec, cache_dir: Path = CACHE_DIR) -> int:
    marker = cache_dir / spec.key / ".complete"
    return int(json.loads(marker.read_text())["bytes"]) if marker.exists() else 0


# ---------------------------------------------------------------- the install tree


INSTALL_TREE = RegistrySpec(packages=100, versions=3, scoped_share=0.2, meta_share=0.0, binary_share=0.0, prefix="tree")
INSTALL_ROOTS = 10


def install_tree_dependencies(spec: RegistrySpec = INSTALL_TREE) -> dict[int, list[str]]:
    """A DAG over the 100 packages: the first INSTALL_ROOTS are the project's direct
    dependencies, every other package is depended on by at least one earlier one, so
    installing the roots pulls in exactly all 100."""
    rng = random.Random(f"{spec.seed}-tree")
    edges: dict[int, set[int]] = {i: set() for i in range(spec.packages)}
    for child in range(INSTALL_ROOTS, spec.packages):
        edges[rng.randrange(0, child)].add(child)
    for parent in range(spec.packages - 1):
        for _ in range(rng.randint(0, 2)):
            edges[parent].add(rng.randrange(parent + 1, spec.packages))
    return {i: [package_name(spec, c) for c in sorted(children)] for i, children in edges.items()}


def ensure_install_tree(cache_dir: Path = CACHE_DIR) -> tuple[Path, list[str]]:
    """(content folder, the project's direct dependency names) for the 100-package install tree."""
    content = ensure_registry(INSTALL_TREE, cache_dir, dependencies=install_tree_dependencies(), progress=False)
    return content, [package_name(INSTALL_TREE, i) for i in range(INSTALL_ROOTS)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", type=int, default=500)
    parser.add_argument("--versions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cache", type=Path, default=CACHE_DIR)
    parser.add_argument("--lean", action="store_true", help="tiny archives and short READMEs (the 1M-version scale's shape)")
    parser.add_argument("--million", action="store_true", help="the 1M-version scale of the full bench run (100k x 10, lean)")
    args = parser.parse_args(argv)
    spec = MILLION if args.million else RegistrySpec(packages=args.packages, versions=args.versions, seed=args.seed, lean=args.lean)
    content = ensure_registry(spec, args.cache)
    print(f"{content} ({spec.total_versions} versions, {registry_bytes(spec, args.cache) / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
