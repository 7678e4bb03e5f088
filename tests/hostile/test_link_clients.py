"""Which tarballs holding links are hosted (RATIONALE.md §7), proven on the clients.

The public registry serves tarballs with symbolic links (`express@1.0.0` holds three, each to a file
of its own folder). npm 11, npm 10 and pnpm skip every link entry; yarn 1 creates a symbolic link
with the target joined below the link's folder, yarn 4 with the tarball's own target. A relative
target without `..` resolves below the link's own folder for both, so such links are hosted: a
registry-gen tree, built by the real CLI and served by a plain http.server, serves express@1.0.0
byte for byte and a tarball of such links in every shape, and each of the five clients installs
them with every link it creates leading inside the package and nothing written outside it.

Everything else stays refused, by `registry-gen build` and `registry-gen check` alike, and the
reasons are shown on the clients, the refused tarballs being served byte for byte by a plain static
registry: yarn 4 creates a link to `/etc/passwd` as it is; a link over a file, a file below a link, a
hard link and a link to its own folder each install a different tree with npm, yarn 1 and yarn 4
(or fail on one of them). Should a client change, these tests say so, and the rule is to be decided
again. Links a client could write through point at a sacrificial file of the test, never at a file
of the machine.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hostile.corpus import CASES, LINKS_INSIDE, file_info, links_inside_tgz, manifest_bytes, special_info, tgz
from tests.hosts.clients import CLIENTS, ClientRun, clean_env, install_client
from tests.realworld.corpus import Entry, ensure_document, ensure_tarball
from tests.realworld.test_conformance import ABBREVIATED_FIELDS, CLIENT_FIELDS, client_view
from tests.support import make_tarball, static_server

pytestmark = pytest.mark.slow

# What the public registry serves for express@1.0.0 (`npm view express@1.0.0 dist.integrity`).
EXPRESS = Entry("express", "1.0.0", "sha512-AN8xILDGhFQ9NbbEs2ebaqTFbjaF3ycdd1mOvlfZJoSZ8f/KMqPPKNuN6JX3KQYT2oIPPQvyGQZU4cwHkavgMA==")
EXPRESS_LINKS = {"support/connect-form/index.js", "support/haml/index.js", "support/jade/lib/index.js"}
LINKS_PACKAGE = "hostile-links-inside"
SKIPPING_CLIENTS = ("npm11", "npm10", "pnpm")
LINKING_CLIENTS = ("yarn1", "yarn4")
SECRET = b"the sacrificial file's own bytes\n"
PWNED = b"written through a link\n"
# The corpus's link shapes, every one refused (by its rule) by the build and by check.
LINK_CASES = [case for case in CASES if "link" in case.id]
# Shapes whose links stay inside the package, refused because the clients install different trees
# from them (`install fails`, or what lands in the package folder besides package.json): the
# table is the evidence, read from the clients.
FAILS = "install fails"
AMBIGUOUS = {
    "tar-symlink-then-file-below": {  # lib -> sub, then lib/x.js
        **dict.fromkeys(SKIPPING_CLIENTS, {"lib/x.js": "file", "sub/keep.js": "file"}),
        "yarn1": FAILS,
        "yarn4": {"lib": "link -> sub", "sub/keep.js": "file", "sub/x.js": "file"},
    },
    "tar-file-then-symlink": {  # index.js, other.js, then index.js -> other.js
        **dict.fromkeys(SKIPPING_CLIENTS, {"index.js": "file", "other.js": "file"}),
        "yarn1": {"index.js": "link -> other.js", "other.js": "file"},
        "yarn4": FAILS,
    },
    "tar-hardlink": {  # a.js, then copy.js hard-linked to package/a.js
        **dict.fromkeys(SKIPPING_CLIENTS, {"a.js": "file"}),
        "yarn1": {"a.js": "file", "copy.js": "file"},
        "yarn4": {"a.js": "file"},
    },
    "tar-symlink-to-its-folder": {  # lib/here -> ./.
        **dict.fromkeys(SKIPPING_CLIENTS, {}),
        "yarn1": {"lib/here": "link -> lib"},  # rewritten below the link's folder
        "yarn4": FAILS,
    },
}


@dataclass(frozen=True)
class Upstream:
    """A plain static registry serving the refused tarballs byte for byte, and the file they aim at."""

    url: str
    secret: Path

    def untouched(self) -> bool:
        return self.secret.read_bytes() == SECRET and self.secret.stat().st_nlink == 1 and os.listdir(self.secret.parent) == [self.secret.name]


@dataclass(frozen=True)
class Tree:
    """What `registry-gen build` made of express@1.0.0, the hosted links and the refused ones."""

    url: str
    out: Path
    content: Path
    build: subprocess.CompletedProcess[str]


def hostile_tarballs(secret: Path) -> dict[str, bytes]:
    """link-out: links to a file of the machine (never written) and to the sacrificial file.
    write-through: a link climbing out then a file below it, a symbolic and a hard link to the
    sacrificial file each followed by a file of the same name (a naive extractor writes through)."""
    def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE):  # type: ignore[no-untyped-def]
        return special_info(f"package/{name}", kind, target)

    return {
        "hostile-link-out": tgz([file_info("package/package.json", manifest_bytes("link-out")), file_info("package/index.js", b"1"),
                                 link("passwd", "/etc/passwd"), link("secret", str(secret))]),
        "hostile-write-through": tgz([
            file_info("package/package.json", manifest_bytes("write-through")),
            link("x", "../../.."), file_info("package/x/pwned-climb", PWNED),
            link("secret", str(secret)), file_info("package/secret", PWNED),
            link("hard", str(secret), tarfile.LNKTYPE), file_info("package/hard", PWNED),
        ]),
    }  # fmt: skip


def manifest_name(data: bytes) -> str:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        handle = tar.extractfile("package/package.json")
        assert handle is not None
        return str(json.load(handle)["name"])


def ambiguous_tarballs() -> dict[str, bytes]:
    """The corpus cases of AMBIGUOUS, by package name."""
    made = [case.make() for case in CASES if case.id in AMBIGUOUS]
    return {manifest_name(data): data for data in made}


def case_package(case_id: str) -> str:
    return manifest_name(next(case for case in CASES if case.id == case_id).make())


def publish_static(root: Path, url: str, name: str, data: bytes) -> None:
    """The document and tarball a registry serves for name@1.0.0 (no dependencies: only the
    extraction is under test), laid out as registry-gen's tree is (RATIONALE.md §1)."""
    tarball = root / name / "-" / f"{name}-1.0.0.tgz"
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(data)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    version = {"name": name, "version": "1.0.0",
               "dist": {"tarball": f"{url}{name}/-/{name}-1.0.0.tgz", "integrity": integrity, "shasum": hashlib.sha1(data).hexdigest()}}  # fmt: skip
    document = {"name": name, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version},
                "time": {"created": "2010-11-17T00:00:00.000Z", "1.0.0": "2010-11-17T00:00:00.000Z"}}  # fmt: skip
    (root / name / "index.html").write_text(json.dumps(document))


@pytest.fixture(scope="module")
def express_tarball() -> Path:
    return ensure_tarball(EXPRESS, "single-tarballs")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    root = tmp_path_factory.mktemp("links")
    secret = root / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    tree = root / "registry"
    tree.mkdir()
    with static_server(tree) as url:
        for name, data in {**hostile_tarballs(secret), **ambiguous_tarballs()}.items():
            publish_static(tree, url, name, data)
        yield Upstream(url, secret)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, express_tarball: Path) -> Iterator[Tree]:
    """express@1.0.0 (with a stand-in for its dependency `connect >= 0.3.0`), the hosted links and
    every refused link case of the corpus, built by the real CLI into a tree a plain http.server serves."""
    root = tmp_path_factory.mktemp("tree")
    content = root / "content"
    (content / "express").mkdir(parents=True)
    shutil.copyfile(express_tarball, content / "express" / "express-1.0.0.tgz")
    make_tarball(content, "connect", "1.0.0")
    (content / f"{LINKS_PACKAGE}-1.0.0.tgz").write_bytes(links_inside_tgz(LINKS_PACKAGE))
    for case in LINK_CASES:
        (content / case.filename).write_bytes(case.make())
    out = root / "public"
    out.mkdir()
    with static_server(out) as url:
        build = subprocess.run(
            [sys.executable, "-m", "registry_gen", "build", str(content), "--out", str(out), "--base-url", url],
            cwd=root, env=clean_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        yield Tree(url, out, content, build)


@dataclass(frozen=True)
class Installed:
    ok: bool
    project: Path
    folder: Path  # the installed package's folder (pnpm's is a link into node_modules/.pnpm)
    output: str

    def links(self) -> dict[str, Path]:
        """Every symbolic link below the package folder → where it leads. (A hard link to the
        sacrificial file would raise its link count: Upstream.untouched checks that.)"""
        return {name: Path(os.path.realpath(path)) for name, path in self.entries().items() if path.is_symlink()}

    def entries(self) -> dict[str, Path]:
        """Every file and link below the package folder, by path inside it (links never followed)."""
        found: dict[str, Path] = {}
        for folder, folders, files in os.walk(self.folder):
            for path in (Path(folder, name) for name in folders + files):
                if path.is_symlink() or path.is_file():
                    found[path.relative_to(self.folder).as_posix()] = path
        return found

    def summary(self) -> str | dict[str, str]:
        """What landed in the package folder besides package.json, or FAILS."""
        if not self.ok:
            return FAILS
        return {name: f"link -> {os.readlink(path)}" if path.is_symlink() else "file" for name, path in self.entries().items() if name != "package.json"}

    def leading_outside(self) -> dict[str, Path]:
        inside = Path(os.path.realpath(self.folder))
        return {name: target for name, target in self.links().items() if not target.is_relative_to(inside)}

    def strays(self, names: set[str]) -> list[str]:
        """Files or links named like the package's members anywhere in the project outside the
        package folder (pnpm's link to its folder is not walked into), and links leaving the project."""
        inside, project = Path(os.path.realpath(self.folder)), Path(os.path.realpath(self.project))
        found = []
        for folder, folders, files in os.walk(self.project):
            for path in (Path(folder, name) for name in folders + files):
                real = Path(os.path.realpath(path))
                if path.name in names and not Path(os.path.realpath(path.parent)).is_relative_to(inside):
                    found.append(str(path))
                elif path.is_symlink() and not real.is_relative_to(project):
                    found.append(f"{path} -> {real}")
        return found


def install(client: str, name: str, url: str, work: Path) -> Installed:
    """`add name@1.0.0` into a new project of `client`; a failed install is a result, not an error."""
    spec = CLIENTS[client]
    run = ClientRun(spec, install_client(spec), work / client / name / "client", url)
    project = run.new_project(work / client / name / "project")
    run.disable_release_age_gate(project)
    args = {"npm": ["install", "--ignore-scripts"], "pnpm": ["add", "--ignore-scripts"],
            "yarn1": ["add", "--ignore-scripts", "--non-interactive", "--no-progress"], "yarn4": ["add"]}[spec.kind]  # fmt: skip
    proc = run.run(*args, f"{name}@1.0.0", cwd=project, check=False, env={"YARN_ENABLE_IMMUTABLE_INSTALLS": "false"})
    folder = Path(os.path.realpath(project / "node_modules" / name))
    ok = proc.returncode == 0 and (folder / "package.json").is_file()
    return Installed(ok, project, folder, proc.stdout + proc.stderr)


def stray_writes(work: Path) -> list[str]:
    """Files the write-through tarball names, anywhere but inside an extracted copy of it."""
    return [str(path) for path in work.rglob("pwned-climb") if "/node_modules/hostile-write-through/x/" not in str(path)]


# ---------------------------------------------------------------- hosted: a registry-gen tree


def refusals(text: str) -> dict[str, str]:
    """archive file → rule, from the build's `<file>: <message> [<rule>]` lines or check's."""
    return {match[1]: match[2] for match in re.finditer(r"^(?:error: )?(\S+): .* \[([a-z-]+)\]$", text, re.MULTILINE)}


def test_the_build_hosts_express_1_0_0_byte_for_byte_and_refuses_every_other_link(tree: Tree, express_tarball: Path) -> None:
    assert tree.build.returncode == 1, tree.build.stderr  # the refused cases make the exit code say so
    assert refusals(tree.build.stderr) == {case.filename: case.rule for case in LINK_CASES}, tree.build.stderr
    document = json.loads((tree.out / "express" / "index.html").read_bytes())
    dist = document["versions"]["1.0.0"]["dist"]
    assert dist["integrity"] == EXPRESS.integrity
    with urllib.request.urlopen(dist["tarball"], timeout=30) as response:
        assert response.read() == express_tarball.read_bytes()
    links = json.loads((tree.out / LINKS_PACKAGE / "index.html").read_bytes())
    assert links["readme"] == "the real readme\n"  # README.md is a link: never read, never the README


def test_express_1_0_0_is_served_as_the_public_registry_serves_it(tree: Tree) -> None:
    """What tests/realworld's odd packages are held to, for the fields clients read (express@1.0.0
    is no root of that tree: its lockfile already holds express@4)."""
    public = client_view(ensure_document(EXPRESS.spec, "single-tarballs"), list(CLIENT_FIELDS))
    served = json.loads((tree.out / "express" / "index.html").read_bytes())["versions"]["1.0.0"]
    assert client_view(served, list(CLIENT_FIELDS)) == public
    short = [key for key in CLIENT_FIELDS if key in ABBREVIATED_FIELDS]
    abbreviated = json.loads((tree.out / "express" / "abbreviated.json").read_bytes())["versions"]["1.0.0"]
    assert client_view(abbreviated, short) == {key: public[key] for key in short}


def test_check_refuses_the_same_links_and_passes_express_1_0_0(tree: Tree) -> None:
    check = subprocess.run([sys.executable, "-m", "registry_gen", "check", str(tree.content)], env=clean_env(), capture_output=True, text=True, timeout=300)
    assert check.returncode == 1
    assert refusals(check.stdout) == {case.filename: case.rule for case in LINK_CASES}, check.stdout
    assert not re.search(r"^(express|hostile-links-inside)\S*: ", check.stdout, re.MULTILINE), check.stdout


@pytest.mark.parametrize("client", SKIPPING_CLIENTS + LINKING_CLIENTS)
def test_every_client_installs_the_hosted_links_inside_the_package(client: str, tree: Tree, tmp_path: Path) -> None:
    express, inside = (install(client, name, tree.url, tmp_path) for name in ("express", LINKS_PACKAGE))
    assert (express.ok, inside.ok) == (True, True), express.output + inside.output
    linking = client in LINKING_CLIENTS
    assert set(express.links()) == (EXPRESS_LINKS if linking else set())
    assert set(inside.links()) == (set(LINKS_INSIDE) if linking else set())
    assert (express.leading_outside(), inside.leading_outside()) == ({}, {})
    assert (express.folder / "support/jade/lib/jade.js").is_file()  # the link's target is a file of its own
    assert inside.strays({"c.js", "readme.txt", *(Path(link).name for link in LINKS_INSIDE)}) == []
    assert express.strays({"jade.js", "haml.js", "connect-form.js"}) == []
    if client == "yarn4":  # links as the tarball holds them: each chain reaches its file
        assert (express.folder / "support/jade/lib/index.js").read_bytes() == (express.folder / "support/jade/lib/jade.js").read_bytes()
        assert (inside.folder / "main.js").read_bytes() == (inside.folder / "lib/c.js").read_bytes()


# ---------------------------------------------------------------- refused: what clients would do


@pytest.mark.parametrize("client", SKIPPING_CLIENTS)
def test_npm_and_pnpm_install_the_hostile_links_and_create_none(client: str, upstream: Upstream, tmp_path: Path) -> None:
    installs = {name: install(client, name, upstream.url, tmp_path) for name in ("hostile-link-out", "hostile-write-through")}
    assert {name: result.ok for name, result in installs.items()} == dict.fromkeys(installs, True), installs
    assert {name: result.links() for name, result in installs.items()} == dict.fromkeys(installs, {})
    # The files named through links land in real folders inside the package, nowhere else.
    assert (installs["hostile-write-through"].folder / "x" / "pwned-climb").read_bytes() == PWNED
    assert upstream.untouched() and stray_writes(tmp_path) == []


def test_yarn4_creates_a_link_leading_out_of_the_package(upstream: Upstream, tmp_path: Path) -> None:
    """Why an absolute target is refused: a package's own file is a link to any file of the machine (read here only)."""
    result = install("yarn4", "hostile-link-out", upstream.url, tmp_path)
    assert result.ok, result.output
    assert result.leading_outside() == {"passwd": Path("/etc/passwd"), "secret": upstream.secret}
    assert (result.folder / "passwd").read_bytes() == Path("/etc/passwd").read_bytes()


@pytest.mark.parametrize("client", LINKING_CLIENTS)
def test_yarn_never_writes_through_a_link_of_the_tarball(client: str, upstream: Upstream, tmp_path: Path) -> None:
    """The write-through shapes: yarn 1 and yarn 4 stop on them (a corrupt tarball, they say) or
    skip them; none writes outside the project."""
    result = install(client, "hostile-write-through", upstream.url, tmp_path)
    if result.ok:
        assert result.leading_outside() == {}
    assert upstream.untouched() and stray_writes(tmp_path) == []


@pytest.mark.parametrize("case_id", sorted(AMBIGUOUS))
@pytest.mark.parametrize("client", SKIPPING_CLIENTS + LINKING_CLIENTS)
def test_links_staying_inside_yet_refused_install_a_different_tree_per_client(case_id: str, client: str, upstream: Upstream, tmp_path: Path) -> None:
    """Why a link over a file, a file below a link, a hard link and a link to its own folder are
    refused although they stay inside the package: npm, yarn 1 and yarn 4 disagree on the tree."""
    result = install(client, case_package(case_id), upstream.url, tmp_path)
    assert result.summary() == AMBIGUOUS[case_id][client], result.output
    if result.ok:
        assert result.leading_outside() == {}
