"""Issue 11: whatever the public registry hosts, registry-gen hosts: a real tree, real clients.

The corpus (tests/realworld/package-lock.json, fetched by corpus.py into a cache outside the
checkout) is built once with `registry-gen build`, served by the stdlib's http.server, and
installed from that server alone, with empty caches, by npm 11 (`npm ci` on the committed
lockfile), pnpm (`pnpm import` of that lockfile, then a frozen install) and yarn 1 (`yarn import`
of npm's node_modules, then a frozen install). Each installed set must be the lockfile's set.
The odd packages of odd.json must be published, install with npm 11, and be served like the
public registry serves them.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import platform
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from registry_gen import site, site_search
from registry_gen.build.indexes import SEARCH_LEAF_MAX
from tests.hosts.clients import CLIENTS, ClientRun, clean_env, install_client
from tests.support import static_server
from tests.realworld.corpus import LOCKFILE, MANIFEST, Corpus, cache_root, ensure_corpus, odd_packages, package_name, split_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # fixtures install ~1,200 packages per client

INSTALL_TIMEOUT = 900

NODE_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
# What clients read from a version (acceptance 2), compared with the public registry's document.
CLIENT_FIELDS = ("name", "version", "dependencies", "bin", "main", "engines", "dist")
# The fields the abbreviated install document carries (npm's registry API documentation).
ABBREVIATED_FIELDS = {"name", "version", "dependencies", "optionalDependencies", "peerDependencies",
                      "peerDependenciesMeta", "bin", "engines", "dist", "os", "cpu", "directories"}  # fmt: skip
# npm existed from 2010; 1985-10-26 is npm 5+'s fixed time, 0 a packer that wrote none.
PACKED_BY_HAND_ERA = (datetime(2010, 1, 1, tzinfo=timezone.utc).timestamp(), datetime(2016, 1, 1, tzinfo=timezone.utc).timestamp())
PLATFORM_ARGS = ("--os=darwin", "--cpu=arm64")  # the odd list has darwin/arm64-only packages


# ---------------------------------------------------------------- pure helpers


def lock_packages() -> dict[str, dict[str, Any]]:
    return {path: record for path, record in json.loads(LOCKFILE.read_text())["packages"].items() if path and not record.get("extraneous")}


def allowed(values: list[str] | None, current: str) -> bool:
    """npm's os/cpu rule: `!x` blocks x; otherwise, if anything is listed, `current` must be."""
    if not values:
        return True
    if f"!{current}" in values:
        return False
    wanted = [value for value in values if not value.startswith("!")]
    return not wanted or current in wanted


def installable_here(record: dict[str, Any]) -> bool:
    arch = NODE_ARCH.get(platform.machine().lower(), platform.machine())
    return allowed(record.get("os"), sys.platform) and allowed(record.get("cpu"), arch)


def expected_layout(*, with_peers: bool = True) -> dict[str, tuple[str, str]]:
    """node_modules path → (name, version) the lockfile installs on this machine: optional packages
    for another platform are skipped by every client; peer-only ones (`peer: true`) are installed
    by npm, never by yarn 1."""
    return {
        path: (package_name(path, record), record["version"])
        for path, record in lock_packages().items()
        if installable_here(record) and (with_peers or not record.get("peer"))
    }


def first_member_time(tarball: Path) -> float:
    """The first member's file time. npm packed authors' file times until npm 5 (2017) fixed
    them to 1985-10-26; a real time before 2016 means a package published a decade ago."""
    with tarfile.open(tarball) as archive:
        first = archive.next()  # one header: no need to inflate the whole tarball
        return first.mtime if first is not None else 0


def tarball_path(name: str, version: str) -> str:
    """The path a client requests for a tarball of this registry's layout (scopes with a slash)."""
    return f"/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"


def normalised_bin(name: str, value: Any) -> Any:
    """bin as npm reads it (npm-normalize-package-bin): a string names the package's command;
    keys are base names, paths are cleaned."""
    if isinstance(value, str):
        value = {name.rsplit("/", 1)[-1]: value}
    if not isinstance(value, dict):
        return value
    return {posixpath.basename(key): posixpath.normpath("/" + path).lstrip("/") for key, path in value.items()}


def person(value: Any) -> Any:
    """`npm view` prints people as "name <email> (url)" strings; compare them that way."""
    if isinstance(value, list):
        return [person(item) for item in value]
    if not isinstance(value, dict):
        return value
    return " ".join([value.get("name", ""), *([f"<{value['email']}>"] if value.get("email") else []),
                     *([f"({value['url']})"] if value.get("url") else [])]).strip()  # fmt: skip


def as_clients_read(name: str, key: str, value: Any) -> Any:
    """One field as clients read it: only where npm itself normalises (bin, keywords, man, people)."""
    if key == "bin":
        return normalised_bin(name, value)
    if key == "keywords" and isinstance(value, str):
        return re.split(r",\s+", value)  # normalize-package-data's split
    if key == "man" and isinstance(value, str):
        return [value]
    if key in ("author", "contributors", "maintainers"):
        return person(value)
    if key == "dist" and isinstance(value, dict):
        url = str(value.get("tarball", ""))
        return {"integrity": value.get("integrity"), "shasum": value.get("shasum"), "file": url.rsplit("/", 1)[-1]}
    return value


def client_view(document: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    name = str(document.get("name"))
    return {key: as_clients_read(name, key, document.get(key, "<absent>")) for key in keys}


# ---------------------------------------------------------------- I/O helpers


def installed_layout(project: Path) -> dict[str, tuple[str, str]]:
    """Every package folder below node_modules (nested ones too): path → (name, version)."""
    found: dict[str, tuple[str, str]] = {}

    def walk(folder: Path, prefix: str) -> None:
        if not folder.is_dir():
            return
        for child in sorted(folder.iterdir()):
            if child.name.startswith("."):
                continue
            packages = sorted(child.iterdir()) if child.name.startswith("@") else [child]
            for package in packages:
                relative = f"{prefix}{package.relative_to(folder).as_posix()}"
                if package.is_symlink() or not (package / "package.json").is_file():
                    continue
                manifest = json.loads((package / "package.json").read_text())
                found[relative] = (manifest["name"], manifest["version"])
                walk(package / "node_modules", f"{relative}/node_modules/")

    walk(project / "node_modules", "node_modules/")
    return found


def pnpm_installed(project: Path) -> set[tuple[str, str]]:
    """pnpm keeps each name@version once, in node_modules/.pnpm/<id>/node_modules/<name>."""
    found = set()
    for entry in (project / "node_modules" / ".pnpm").iterdir():
        for path, name_version in installed_layout(entry).items():
            if path.count("node_modules/") == 1:  # the package itself, not its links
                found.add(name_version)
    return found


class RecordingHandler(http.server.SimpleHTTPRequestHandler):
    """The stdlib's static file handler, remembering who asked for which path: the client's name
    as its User-Agent starts (`npm/11.x …`, `pnpm/12.x …`, `yarn/1.x …`)."""

    requests: list[tuple[str, str]]
    lock: threading.Lock

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        agent = (self.headers.get("User-Agent") or "").split("/", 1)[0].lower()
        with self.lock:
            self.requests.append((agent, urllib.parse.unquote(self.path)))
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@dataclass
class Registry:
    url: str
    tree: Path
    build: subprocess.CompletedProcess[str]
    requests: list[tuple[str, str]] = field(default_factory=list)

    def requested_during(self, agent: str, action: Callable[[], Any]) -> set[str]:
        """The paths `agent` asked for while `action` ran (other clients may run meanwhile)."""
        start = len(self.requests)
        action()
        return {path for who, path in self.requests[start:] if who == agent}

    def document(self, name: str, file: str = "") -> dict[str, Any]:
        url = f"{self.url}{name.replace('/', '%2f')}/{file}"
        with urllib.request.urlopen(url, timeout=60) as reply:  # noqa: S310 - our server on 127.0.0.1
            return json.loads(reply.read())


def link_farm(source: Path, target: Path) -> Path:
    """A content/ folder of hard links to the cache (a copy where links cannot be made):
    whatever the build does to its content folder never reaches the cache."""
    shutil.copytree(source, target, copy_function=_link_or_copy)
    return target


def _link_or_copy(source: str, target: str) -> None:
    try:
        Path(target).hardlink_to(source)
    except OSError:
        shutil.copy2(source, target)


# ---------------------------------------------------------------- fixtures: one build, one server, one install per client


@dataclass(frozen=True)
class Install:
    project: Path
    requested: set[str]  # paths the registry served during the install

    def missing_tarballs(self, installed: set[tuple[str, str]]) -> list[str]:
        return sorted(f"{n}@{v}" for n, v in installed if tarball_path(n, v) not in self.requested)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return ensure_corpus()


@pytest.fixture(scope="module")
def registry(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """The whole corpus built once by the real CLI into a tree served by http.server."""
    root = tmp_path_factory.mktemp("realworld")
    content = link_farm(corpus.content, root / "content")
    tree = root / "public"
    tree.mkdir()
    requests: list[tuple[str, str]] = []
    handler = type("Handler", (RecordingHandler,), {"requests": requests, "lock": threading.Lock()})
    with static_server(tree, handler) as url:
        build = subprocess.run(
            [sys.executable, "-m", "registry_gen", "build", str(content), "--out", str(tree), "--base-url", url],
            cwd=root, env=clean_env(), capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
        yield Registry(url, tree, build, requests)


@pytest.fixture(scope="module")
def clients() -> dict[str, list[str]]:
    return {name: install_client(CLIENTS[name]) for name in ("npm11", "pnpm", "yarn1")}


def client(clients: dict[str, list[str]], name: str, folder: Path, registry: Registry) -> ClientRun:
    run = ClientRun(CLIENTS[name], clients[name], folder, registry.url)
    run.timeout = INSTALL_TIMEOUT
    return run


def corpus_project(folder: Path, run: ClientRun, *files: Path) -> Path:
    folder.mkdir(parents=True)
    for file in files:
        shutil.copyfile(file, folder / file.name)
    run.configure(folder)
    return folder


@pytest.fixture(scope="module")
def background() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="realworld") as pool:
        yield pool


@pytest.fixture(scope="module")
def pnpm_started(
    registry: Registry, clients: dict[str, list[str]], tmp_path_factory: pytest.TempPathFactory, background: ThreadPoolExecutor
) -> Future[Install]:
    """pnpm installs while npm and yarn do (the server tells the clients apart by User-Agent):
    `pnpm import` turns the npm lockfile into pnpm's, then the frozen install installs it."""
    root = tmp_path_factory.mktemp("pnpm")
    pnpm = client(clients, "pnpm", root / "client", registry)
    project = corpus_project(root / "project", pnpm, MANIFEST, LOCKFILE)
    pnpm.disable_release_age_gate(project)  # the tree's publish times are the fetch's

    def install() -> Install:
        pnpm.run("import", cwd=project)
        (project / LOCKFILE.name).unlink()
        frozen = lambda: pnpm.run("install", "--frozen-lockfile", "--ignore-scripts", cwd=project)  # noqa: E731
        return Install(project, registry.requested_during("pnpm", frozen))

    return background.submit(install)


@pytest.fixture(scope="module")
def pnpm_install(pnpm_started: Future[Install]) -> Install:
    return pnpm_started.result(timeout=2 * INSTALL_TIMEOUT)


@pytest.fixture(scope="module")
def npm_install(
    registry: Registry, clients: dict[str, list[str]], tmp_path_factory: pytest.TempPathFactory, pnpm_started: Future[Install]
) -> Install:
    """`npm ci` of the committed lockfile (it names no registry: ours is the only one configured)."""
    root = tmp_path_factory.mktemp("npm11")
    npm = client(clients, "npm11", root / "client", registry)
    project = corpus_project(root / "project", npm, MANIFEST, LOCKFILE)
    return Install(project, registry.requested_during("npm", lambda: npm.run("ci", "--ignore-scripts", cwd=project)))


@contextlib.contextmanager
def yarn_import_cache(corpus: Corpus) -> Iterator[Path]:
    """yarn 1's cache for `yarn import`, kept outside the checkout per corpus and yarn version and
    used by one import at a time (yarn 1's cache is not safe for concurrent writers). Its entries
    are named by name, version and shasum, not by the registry's URL, and yarn checks each against
    the integrity our documents give before using it; a missing or partial entry is fetched again."""
    folder = cache_root() / "yarn1-import-cache" / f"{corpus.root.name}-{CLIENTS['yarn1'].package}"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock", timeout=2 * INSTALL_TIMEOUT):
        yield folder


@pytest.fixture(scope="module")
def yarn_install(
    corpus: Corpus, registry: Registry, npm_install: Install, clients: dict[str, list[str]], tmp_path_factory: pytest.TempPathFactory
) -> Install:
    """yarn 1 cannot read lockfile v3; `yarn import` reads npm's node_modules instead (the
    lockfile moved aside), then a fresh project installs from that yarn.lock, with a new cache.
    `yarn import` also fetches every tarball into its cache, which only the install is asserted
    on: the import's cache is kept between runs (`yarn_import_cache`), the install's is empty."""
    root = tmp_path_factory.mktemp("yarn1")
    yarn = client(clients, "yarn1", root / "client", registry)
    source = npm_install.project
    aside = root / LOCKFILE.name
    shutil.move(source / LOCKFILE.name, aside)
    try:
        yarn.configure(source)
        with yarn_import_cache(corpus) as cache:
            yarn.run("import", "--non-interactive", cwd=source, env={"YARN_CACHE_FOLDER": str(cache)})
    finally:
        shutil.move(aside, source / LOCKFILE.name)
    project = corpus_project(root / "project", yarn, MANIFEST, source / "yarn.lock")
    yarn.fresh_cache()
    install = lambda: yarn.run("install", "--frozen-lockfile", "--ignore-scripts", "--non-interactive", "--no-progress", cwd=project)  # noqa: E731
    return Install(project, registry.requested_during("yarn", install))


@pytest.fixture(scope="module")
def odd_install(registry: Registry, clients: dict[str, list[str]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """npm 11 installs every odd package by its exact version, resolving their ranges against our
    documents. Packages for another platform can only be installed as optional dependencies of a
    darwin/arm64 install (`--os`/`--cpu` do not lift EBADPLATFORM for a direct one)."""
    root = tmp_path_factory.mktemp("odd")
    npm = client(clients, "npm11", root / "client", registry)
    project = npm.new_project(root / "project", "odd-packages")
    platform_bound = {path.rsplit("node_modules/", 1)[-1] for path, record in lock_packages().items() if "os" in record or "cpu" in record}
    manifest = json.loads((project / "package.json").read_text())
    for spec in odd_packages():
        name, version = split_spec(spec)
        manifest.setdefault("optionalDependencies" if name in platform_bound else "dependencies", {})[name] = version
    (project / "package.json").write_text(json.dumps(manifest))
    npm.run("install", "--ignore-scripts", *PLATFORM_ARGS, cwd=project)
    return installed_layout(project)


# ---------------------------------------------------------------- acceptance 1: the whole tree


def roots() -> list[str]:
    return sorted(json.loads(MANIFEST.read_text())["dependencies"])


def test_corpus_is_large_scoped_and_old(corpus: Corpus) -> None:
    """The corpus is what the issue asks for: >= 1,000 tarballs, scoped ones, decade-old ones (the
    registry here re-stamps `time`, so age is read from the tarballs themselves)."""
    assert len(corpus.entries) >= 1000
    assert sum(entry.name.startswith("@") for entry in corpus.entries) >= 100
    old = [e.spec for e in corpus.entries if PACKED_BY_HAND_ERA[0] <= first_member_time(corpus.content / e.relpath) < PACKED_BY_HAND_ERA[1]]
    assert len(old) >= 20, old


def test_build_publishes_every_real_tarball(registry: Registry, corpus: Corpus) -> None:
    errors = [line for line in registry.build.stderr.splitlines() if line.startswith("error")]
    assert registry.build.returncode == 0, errors or registry.build.stderr[-2000:]
    summary = registry.build.stdout.strip().splitlines()[-1]
    refused = re.search(r"(\d+) archives? refused", summary)
    assert refused is not None and int(refused.group(1)) == 0, summary
    versions = re.search(r"(\d+) versions", summary)
    assert versions is not None and int(versions.group(1)) == len(corpus.entries), summary
    absent = [e.spec for e in corpus.entries if not (registry.tree / tarball_path(e.name, e.version).lstrip("/")).is_file()]
    assert absent == []


def test_every_real_package_is_browsable_and_searchable(registry: Registry) -> None:
    """The listings on ~1,100 real names (scopes, dots, legacy upper case): each listed package is
    reached from the front page through the browse pages, and sits in its name's search shard."""
    assert registry.build.returncode == 0
    web = registry.tree / "-" / "web"
    listed = {name for name in json.loads((registry.tree / "-/all/index.html").read_bytes()) if name != "_updated"}
    reached: set[str] = set()
    pages, seen = [web / "index.html"], set()
    while pages:
        page = pages.pop()
        for href in re.findall(r'href="([^"#?]+)"', page.read_text()):
            target = Path(posixpath.normpath(posixpath.join(str(page.parent), urllib.parse.unquote(href))))
            if "/-/web/browse/" in str(target) and target not in seen:
                seen.add(target)
                pages.append(target)
            elif "/-/web/package/" in str(target) and "/v/" not in str(target):
                reached.add(str(target.parent.relative_to(web / "package")))
    assert len(listed) > 1000 and listed - reached == set()
    assert all(len(p.read_bytes()) < 200_000 for p in seen)  # no browse page grows with the registry
    shards: dict[str, set[str]] = {}
    for name in sorted(listed):
        keys = site_search.search_keys({"name": name})
        if keys:  # names with a word of two characters or more
            if keys[0] not in shards:
                shards[keys[0]] = _shard_members(web / "search", keys[0])
            assert name in shards[keys[0]], name
    # The corpus's most shared name words (e.g. "co", "pl") outgrow one file: leaves proven on real packages.
    assert any((web / "search" / key).is_dir() for key in shards)


def _shard_members(folder: Path, key: str) -> set[str]:
    """The names in one search shard: its own file, or the leaves it lists (none over the bound)."""
    shard = json.loads((folder / f"{key}.json").read_bytes())
    leaves = [shard] if "packages" in shard else [json.loads((folder / key / f"{leaf}.json").read_bytes()) for leaf in shard["leaves"]]
    assert all(len(leaf["packages"]) <= SEARCH_LEAF_MAX for leaf in leaves), key
    return {entry["name"] for leaf in leaves for entry in leaf["packages"]}


def test_npm_ci_installs_exactly_the_lockfile(npm_install: Install) -> None:
    layout = installed_layout(npm_install.project)
    expected = expected_layout()
    assert {path for path in layout if layout[path] != expected.get(path)} == set()
    assert set(expected) - set(layout) == set()
    assert npm_install.missing_tarballs(set(layout.values())) == []


def test_pnpm_installs_exactly_the_lockfile_set(pnpm_install: Install) -> None:
    installed = pnpm_installed(pnpm_install.project)
    expected = set(expected_layout().values())
    assert (sorted(installed - expected), sorted(expected - installed)) == ([], [])
    assert [root for root in roots() if not (pnpm_install.project / "node_modules" / root / "package.json").is_file()] == []
    assert pnpm_install.missing_tarballs(installed) == []


def test_yarn1_installs_exactly_the_lockfile_set_but_peers(yarn_install: Install) -> None:
    """yarn 1 never installs peer dependencies: the lockfile's `peer: true` packages are left out."""
    installed = set(installed_layout(yarn_install.project).values())
    expected = set(expected_layout(with_peers=False).values())
    assert (sorted(installed - expected), sorted(expected - installed)) == ([], [])
    assert [root for root in roots() if not (yarn_install.project / "node_modules" / root / "package.json").is_file()] == []
    assert yarn_install.missing_tarballs(installed) == []


# ---------------------------------------------------------------- acceptance 2: the odd packages


@pytest.mark.parametrize("spec", sorted(odd_packages()))
def test_odd_package_is_hosted_like_the_public_registry(
    spec: str, corpus: Corpus, registry: Registry, odd_install: dict[str, tuple[str, str]]
) -> None:
    name, version = split_spec(spec)
    served = registry.document(name)
    assert version in served["versions"], f"{spec} is not published"
    assert odd_install.get(f"node_modules/{name}") == (name, version), f"npm 11 did not install {spec}"
    keys = [*CLIENT_FIELDS, *odd_packages()[spec]["fields"]]
    public = client_view(corpus.document(spec), keys)
    assert client_view(served["versions"][version], keys) == public
    short = [key for key in keys if key in ABBREVIATED_FIELDS]
    abbreviated = registry.document(name, "abbreviated.json")["versions"][version]
    assert client_view(abbreviated, short) == {key: public[key] for key in short}
