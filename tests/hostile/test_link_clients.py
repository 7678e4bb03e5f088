"""Why tarballs holding links are refused (`member-type`; RATIONALE.md §7), proven on the clients.

The public registry serves such tarballs (`express@1.0.0` holds three symbolic links), so the rule
is decided by what clients do with them. The tarballs are served byte for byte, as the public
registry serves them, by a plain static registry the test starts on loopback (registry-gen refuses
them): npm 11, npm 10 and pnpm skip every link; yarn 1 and yarn 4 create them, yarn 4 with the
tarball's target, so a link in a package leads outside it. Should a client change, these tests say
so, and the rule is to be decided again. Links a client could write through point at a sacrificial
file of the test, never at a file of the machine. The last test shows that the build and
`registry-gen check` refuse the real tarball.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_gen.cli import main
from tests.hostile.corpus import file_info, manifest_bytes, special_info, tgz
from tests.hosts.clients import CLIENTS, ClientRun, install_client
from tests.realworld.corpus import Entry, ensure_tarball
from tests.support import make_tarball, static_server

pytestmark = pytest.mark.slow

# What the public registry serves for express@1.0.0 (`npm view express@1.0.0 dist.integrity`).
EXPRESS = Entry("express", "1.0.0", "sha512-AN8xILDGhFQ9NbbEs2ebaqTFbjaF3ycdd1mOvlfZJoSZ8f/KMqPPKNuN6JX3KQYT2oIPPQvyGQZU4cwHkavgMA==")
EXPRESS_LINKS = {"support/connect-form/index.js", "support/haml/index.js", "support/jade/lib/index.js"}
SKIPPING_CLIENTS = ("npm11", "npm10", "pnpm")
LINKING_CLIENTS = ("yarn1", "yarn4")
SECRET = b"the sacrificial file's own bytes\n"
PWNED = b"written through a link\n"


@dataclass(frozen=True)
class Upstream:
    """A static registry holding express@1.0.0 and two hostile tarballs, and the file they aim at."""

    url: str
    secret: Path

    def untouched(self) -> bool:
        return self.secret.read_bytes() == SECRET and self.secret.stat().st_nlink == 1 and os.listdir(self.secret.parent) == [self.secret.name]


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
def upstream(tmp_path_factory: pytest.TempPathFactory, express_tarball: Path) -> Iterator[Upstream]:
    root = tmp_path_factory.mktemp("links")
    secret = root / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    tree = root / "registry"
    tree.mkdir()
    with static_server(tree) as url:
        for name, data in {"express": express_tarball.read_bytes(), **hostile_tarballs(secret)}.items():
            publish_static(tree, url, name, data)
        yield Upstream(url, secret)


@dataclass(frozen=True)
class Installed:
    ok: bool
    folder: Path  # the installed package's folder (pnpm's is a link into node_modules/.pnpm)
    output: str

    def links(self) -> dict[str, Path]:
        """Every symbolic link below the package folder → where it leads. (A hard link to the
        sacrificial file would raise its link count: Upstream.untouched checks that.)"""
        found: dict[str, Path] = {}
        for folder, folders, files in os.walk(self.folder):
            for path in (Path(folder, name) for name in folders + files):
                if path.is_symlink():
                    found[path.relative_to(self.folder).as_posix()] = Path(os.path.realpath(path))
        return found

    def leading_outside(self) -> dict[str, Path]:
        inside = Path(os.path.realpath(self.folder))
        return {name: target for name, target in self.links().items() if not target.is_relative_to(inside)}


def install(client: str, name: str, upstream: Upstream, work: Path) -> Installed:
    """`add name@1.0.0` into a new project of `client`; a failed install is a result, not an error."""
    spec = CLIENTS[client]
    run = ClientRun(spec, install_client(spec), work / client / name / "client", upstream.url)
    project = run.new_project(work / client / name / "project")
    run.disable_release_age_gate(project)
    args = {"npm": ["install", "--ignore-scripts"], "pnpm": ["add", "--ignore-scripts"],
            "yarn1": ["add", "--ignore-scripts", "--non-interactive", "--no-progress"], "yarn4": ["add"]}[spec.kind]  # fmt: skip
    proc = run.run(*args, f"{name}@1.0.0", cwd=project, check=False, env={"YARN_ENABLE_IMMUTABLE_INSTALLS": "false"})
    folder = Path(os.path.realpath(project / "node_modules" / name))
    ok = proc.returncode == 0 and (folder / "package.json").is_file()
    return Installed(ok, folder, proc.stdout + proc.stderr)


def stray_writes(work: Path) -> list[str]:
    """Files the write-through tarball names, anywhere but inside an extracted copy of it."""
    return [str(path) for path in work.rglob("pwned-climb") if "/node_modules/hostile-write-through/x/" not in str(path)]


@pytest.mark.parametrize("client", SKIPPING_CLIENTS)
def test_npm_and_pnpm_install_every_tarball_and_create_no_link(client: str, upstream: Upstream, tmp_path: Path) -> None:
    installs = {name: install(client, name, upstream, tmp_path) for name in ("express", "hostile-link-out", "hostile-write-through")}
    assert {name: result.ok for name, result in installs.items()} == dict.fromkeys(installs, True), installs
    assert {name: result.links() for name, result in installs.items()} == dict.fromkeys(installs, {})
    assert (installs["express"].folder / "support/jade/lib/jade.js").is_file()  # the link's target is a file of its own
    # The files named through links land in real folders inside the package, nowhere else.
    assert (installs["hostile-write-through"].folder / "x" / "pwned-climb").read_bytes() == PWNED
    assert upstream.untouched() and stray_writes(tmp_path) == []


@pytest.mark.parametrize("client", LINKING_CLIENTS)
def test_yarn_creates_the_links_of_express_1_0_0(client: str, upstream: Upstream, tmp_path: Path) -> None:
    """yarn 1 rewrites each target below the package (express's links then lead nowhere); yarn 4
    keeps them. Either way the package holds links a registry would have handed out."""
    express = install(client, "express", upstream, tmp_path)
    assert express.ok, express.output
    assert set(express.links()) == EXPRESS_LINKS
    assert express.leading_outside() == {}


def test_yarn4_creates_a_link_leading_out_of_the_package(upstream: Upstream, tmp_path: Path) -> None:
    """The reason to refuse: a package's own file is a link to any file of the machine (read here only)."""
    result = install("yarn4", "hostile-link-out", upstream, tmp_path)
    assert result.ok, result.output
    assert result.leading_outside() == {"passwd": Path("/etc/passwd"), "secret": upstream.secret}
    assert (result.folder / "passwd").read_bytes() == Path("/etc/passwd").read_bytes()


@pytest.mark.parametrize("client", LINKING_CLIENTS)
def test_yarn_never_writes_through_a_link_of_the_tarball(client: str, upstream: Upstream, tmp_path: Path) -> None:
    """The write-through shapes: yarn 1 and yarn 4 stop on them (a corrupt tarball, they say) or
    skip them; none writes outside the project."""
    result = install(client, "hostile-write-through", upstream, tmp_path)
    if result.ok:
        assert result.leading_outside() == {}
    assert upstream.untouched() and stray_writes(tmp_path) == []


def test_the_build_and_check_refuse_express_1_0_0_for_its_links(
    express_tarball: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content = tmp_path / "content"
    (content / "express").mkdir(parents=True)
    (content / "express" / "express-1.0.0.tgz").write_bytes(express_tarball.read_bytes())
    make_tarball(content, "good-pkg", "1.0.0")
    out = tmp_path / "public"
    assert main(["build", str(content), "--out", str(out), "--base-url", "http://127.0.0.1:9/"]) == 1
    errors = capsys.readouterr().err
    assert re.search(r"express/express-1\.0\.0\.tgz: member 'express/support/\S+/index\.js' is a symbolic link to '\S+' "
                     r"\(yarn would create it on install\) \[member-type\]", errors), errors  # fmt: skip
    assert (out / "good-pkg" / "index.html").is_file() and not (out / "express").exists()
    assert main(["check", str(content)]) == 1
    assert re.search(r"^express/express-1\.0\.0\.tgz: error: \(archive\): .* symbolic link .* \[member-type\]$", capsys.readouterr().out, re.MULTILINE)
