"""The real-world corpus: every tarball of `package-lock.json`, fetched from the npm registry.

The tarballs come from the registry the machine's npm is configured for (`npm pack`, several specs
per npm process, a few processes at once), each checked against the lockfile's `integrity` before
it is moved into place. They live outside the checkout, in
`~/.cache/registry-gen-tests/corpus-<first 16 hex of sha256(package-lock.json)>/` (or below
`$REGISTRY_GEN_TESTS_CACHE`), so a fresh clone on the same machine reuses them and a changed
lockfile gets a folder of its own:

    content/<name>/<npm pack file name>   one archive per name@version: a registry-gen content/ folder
    documents/<name>@<version>.json       what the public registry serves for each odd package
    .partial/                             npm's scratch folders; a file leaves it only by rename
    complete.json                         written last: how many tarballs, and the lockfile's key

Every file is renamed into place once whole, so an interrupted fetch resumes where it stopped.
Pre-fetch (about 1,200 tarballs): `.venv/bin/python -m tests.realworld.corpus fetch`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

HERE = Path(__file__).resolve().parent
LOCKFILE = HERE / "package-lock.json"
MANIFEST = HERE / "package.json"
ODD_FILE = HERE / "odd.json"
NPM = os.environ.get("NPM", "npm")
PROCESSES = 4  # npm processes at once: the fetch waits on the network, not on the 2 cores
BATCH = 40  # specs per `npm pack`: one npm start-up per batch instead of per tarball
NPM_TIMEOUT = 600


@dataclass(frozen=True, order=True)
class Entry:
    """One tarball of the tree: what the lockfile says about it."""

    name: str
    version: str
    integrity: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def filename(self) -> str:
        """The name `npm pack` gives the file: `@scope/name` becomes `scope-name`."""
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"

    @property
    def relpath(self) -> str:
        """Where it lives below content/: one folder per package name, so no two files collide."""
        return f"{self.name}/{self.filename}"


# ---------------------------------------------------------------- pure: the lockfile and the odd list


def package_name(path: str, record: dict[str, Any]) -> str:
    """The package's name for a lockfile `packages` key (aliases carry their real `name`)."""
    return str(record.get("name") or path.rsplit("node_modules/", 1)[-1])


def lock_entries(lock: dict[str, Any]) -> list[Entry]:
    """Every distinct name@version the lockfile installs from a registry (links and the root skipped)."""
    found: dict[tuple[str, str], Entry] = {}
    for path, record in lock["packages"].items():
        if not path or record.get("link") or record.get("inBundle") or record.get("extraneous"):
            continue
        name = package_name(path, record)
        found.setdefault((name, record["version"]), Entry(name, record["version"], record["integrity"]))
    return sorted(found.values())


def lock_key(lock_bytes: bytes) -> str:
    return hashlib.sha256(lock_bytes).hexdigest()[:16]


def integrity_matches(data: bytes, integrity: str) -> bool:
    """Subresource Integrity as npm checks it: the strongest algorithm listed must match."""
    strength = {"sha1": 1, "sha256": 2, "sha384": 3, "sha512": 4}
    hashes = [part.split("-", 1) for part in integrity.split() if part.split("-", 1)[0] in strength]
    if not hashes:
        return False
    best = max(strength[algorithm] for algorithm, _ in hashes)
    wanted = [digest for algorithm, digest in hashes if strength[algorithm] == best]
    algorithm = next(a for a, s in strength.items() if s == best)
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode("ascii")
    return actual in wanted


def batches(entries: Sequence[Entry], size: int) -> list[list[Entry]]:
    """Groups of at most `size` specs in which no two share a pack file name (`@a/b-c` vs `a-b-c`)."""
    groups: list[list[Entry]] = []
    names: list[set[str]] = []
    for entry in entries:
        for group, taken in zip(groups, names, strict=True):
            if len(group) < size and entry.filename not in taken:
                group.append(entry)
                taken.add(entry.filename)
                break
        else:
            groups.append([entry])
            names.append({entry.filename})
    return groups


def odd_packages() -> dict[str, dict[str, str]]:
    """odd.json: spec → {"odd": what is unusual, "why": why a registry must still host it}."""
    return json.loads(ODD_FILE.read_text())["packages"]


def split_spec(spec: str) -> tuple[str, str]:
    name, _, version = spec.rpartition("@")
    return name, version


def document_filename(spec: str) -> str:
    return spec.replace("/", "+") + ".json"


# ---------------------------------------------------------------- I/O: the cache folder


def cache_root() -> Path:
    return Path(os.environ.get("REGISTRY_GEN_TESTS_CACHE") or Path.home() / ".cache" / "registry-gen-tests")


@dataclass(frozen=True)
class Corpus:
    """A fetched corpus: its folder and the tarballs it holds."""

    root: Path
    entries: list[Entry]

    @property
    def content(self) -> Path:
        return self.root / "content"

    @property
    def documents(self) -> Path:
        return self.root / "documents"

    def document(self, spec: str) -> dict[str, Any]:
        return json.loads((self.documents / document_filename(spec)).read_text())


def corpus_folder() -> Path:
    return cache_root() / f"corpus-{lock_key(LOCKFILE.read_bytes())}"


def npm_env(npm_cache: Path) -> dict[str, str]:
    """The machine's npm settings (its registry) without a caller's npm_config_* overrides."""
    env = {key: value for key, value in os.environ.items() if not key.lower().startswith("npm_config_")}
    env.update(npm_config_cache=str(npm_cache), npm_config_update_notifier="false", npm_config_fund="false",
               npm_config_audit="false", npm_config_loglevel="error")  # fmt: skip
    return env


def write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
    with os.fdopen(handle, "wb") as stream:
        stream.write(data)
    os.replace(scratch, target)


def pack_batch(root: Path, group: list[Entry], env: dict[str, str]) -> list[str]:
    """`npm pack` of one batch into a scratch folder; every tarball whose bytes match the lockfile
    is renamed into content/. Returns one line per spec that failed."""
    partial = root / ".partial"
    partial.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=partial))
    try:
        proc = subprocess.run(
            [NPM, "pack", *(entry.spec for entry in group), "--pack-destination", str(scratch), "--ignore-scripts", "--json"],
            cwd=scratch, env=env, capture_output=True, text=True, timeout=NPM_TIMEOUT,
        )  # fmt: skip
        failures = []
        for entry in group:
            packed = scratch / entry.filename
            if not packed.is_file():
                failures.append(f"{entry.spec}: npm pack wrote no {entry.filename} (exit {proc.returncode}) {proc.stderr.strip()[-300:]}")
            elif not integrity_matches(packed.read_bytes(), entry.integrity):
                failures.append(f"{entry.spec}: the fetched bytes do not match the lockfile's integrity")
            else:
                target = root / "content" / entry.relpath
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(packed, target)
        return failures
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def fetch_document(root: Path, spec: str, env: dict[str, str]) -> str | None:
    """What the public registry serves for one version (`npm view --json`), kept for comparison."""
    proc = subprocess.run([NPM, "view", spec, "--json"], env=env, capture_output=True, text=True, timeout=NPM_TIMEOUT)
    if proc.returncode != 0:
        return f"{spec}: npm view failed ({proc.returncode}) {proc.stderr.strip()[-300:]}"
    document = json.loads(proc.stdout)
    if isinstance(document, list):  # several versions matched: never for an exact spec
        return f"{spec}: npm view answered {len(document)} versions"
    write_atomically(root / "documents" / document_filename(spec), json.dumps(document, indent=1, sort_keys=True).encode())
    return None


def seed_from_siblings(root: Path, todo: list[Entry]) -> list[Entry]:
    """Takes tarballs an earlier lockfile's corpus already holds (same bytes: checked against the
    integrity), so editing the lockfile fetches only what is new. Returns what is still missing."""
    siblings = [folder for folder in sorted(root.parent.glob("corpus-*")) if folder != root]
    still = []
    for entry in todo:
        source = next((s / "content" / entry.relpath for s in siblings if (s / "content" / entry.relpath).is_file()), None)
        if source is None or not integrity_matches(source.read_bytes(), entry.integrity):
            still.append(entry)
            continue
        target = root / "content" / entry.relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_name(f".partial-{os.getpid()}-{target.name}")
        scratch.unlink(missing_ok=True)
        try:
            os.link(source, scratch)
        except OSError:
            shutil.copyfile(source, scratch)
        os.replace(scratch, target)
    return still


def missing(root: Path, entries: Iterable[Entry]) -> list[Entry]:
    return [entry for entry in entries if not (root / "content" / entry.relpath).is_file()]


def run_parallel(jobs: Iterable[Any], work: Any) -> list[str]:
    with ThreadPoolExecutor(max_workers=PROCESSES) as pool:
        return [line for result in pool.map(work, jobs) for line in ([result] if isinstance(result, str) else result or [])]


def verify_all(root: Path, entries: Iterable[Entry]) -> list[str]:
    """Every cached tarball against the lockfile once more (cheap: hashing ~100 MB)."""
    bad = []
    for entry in entries:
        if not integrity_matches((root / "content" / entry.relpath).read_bytes(), entry.integrity):
            bad.append(entry)
    for entry in bad:  # a corrupt cached file is fetched again next time
        (root / "content" / entry.relpath).unlink()
    return [f"{entry.spec}: the cached bytes do not match the lockfile's integrity (removed)" for entry in bad]


class FetchError(RuntimeError):
    pass


def fetch_tarballs(root: Path, entries: list[Entry], env: dict[str, str], say: Any) -> None:
    """What the cache lacks, in parallel batches; a second pass retries what a network error or
    an npm failure on one spec of a batch left missing."""
    todo = seed_from_siblings(root, missing(root, entries))
    failures: list[str] = []
    for _attempt in range(2):
        if not todo:
            return
        say(f"fetching {len(todo)} of {len(entries)} tarballs into {root}")
        started = time.monotonic()
        failures = run_parallel(batches(todo, BATCH), lambda group: pack_batch(root, group, env))
        say(f"fetched {len(todo) - len(failures)} tarballs in {time.monotonic() - started:.0f}s")
        todo = missing(root, todo)
    if todo:
        raise FetchError("\n".join(failures))


def ensure_corpus(log: Any = None) -> Corpus:
    """The corpus, fetching whatever the cache lacks (tarballs, then the odd packages' documents)."""
    say = log or (lambda line: None)
    lock_bytes = LOCKFILE.read_bytes()
    entries = lock_entries(json.loads(lock_bytes))
    root = corpus_folder()
    root.mkdir(parents=True, exist_ok=True)
    env = npm_env(cache_root() / "npm-cache")
    with FileLock(str(root / ".fetch.lock"), timeout=3600):
        fetch_tarballs(root, entries, env, say)
        specs = [spec for spec in odd_packages() if not (root / "documents" / document_filename(spec)).is_file()]
        failures = run_parallel(specs, lambda spec: fetch_document(root, spec, env))
        failures += verify_all(root, entries)
        if failures:
            raise FetchError("\n".join(failures))
        write_atomically(root / "complete.json", json.dumps({"tarballs": len(entries), "lockfile": lock_key(lock_bytes)}).encode())
    return Corpus(root, entries)


def ensure_tarball(entry: Entry, folder: str) -> Path:
    """One tarball a test needs outside the lockfile's tree (the registry refuses it, say), fetched
    as the corpus's are (`npm pack`, checked against `entry.integrity`, the public registry's) into
    `<cache root>/<folder>/content/<name>/<file>`, and fetched again if the cached bytes differ."""
    root = cache_root() / folder
    target = root / "content" / entry.relpath
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".fetch.lock"), timeout=NPM_TIMEOUT):
        if target.is_file() and integrity_matches(target.read_bytes(), entry.integrity):
            return target
        failures = pack_batch(root, [entry], npm_env(cache_root() / "npm-cache"))
        if failures:
            raise FetchError("\n".join(failures))
    return target


def ensure_document(spec: str, folder: str) -> dict[str, Any]:
    """What the public registry serves for one version outside the odd list (`npm view --json`,
    as fetch_document keeps it), cached in `<cache root>/<folder>/documents/`."""
    root = cache_root() / folder
    target = root / "documents" / document_filename(spec)
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".fetch.lock"), timeout=NPM_TIMEOUT):
        if not target.is_file():
            failure = fetch_document(root, spec, npm_env(cache_root() / "npm-cache"))
            if failure:
                raise FetchError(failure)
    return dict(json.loads(target.read_text()))


def main(argv: Sequence[str]) -> int:
    if list(argv) not in (["fetch"], ["path"]):
        print("usage: python -m tests.realworld.corpus fetch|path", file=sys.stderr)
        return 2
    if argv[0] == "path":
        print(corpus_folder())
        return 0
    started = time.monotonic()
    try:
        corpus = ensure_corpus(log=print)
    except FetchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{len(corpus.entries)} tarballs ready in {corpus.content} ({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
