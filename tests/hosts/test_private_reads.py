"""Private reads (issue 17, part 2) with real npm 11, pnpm and yarn 1, through `registry-gen
serve` (checked in-process) and through nginx in front of `registry-gen api` (auth_request).

Rules: `@internal/*` readable by any account, `secret-*` only by group-a. alice is in group-a,
bob in no group. Each client installs both private packages with alice's token; without a token
the install fails with 401, and with bob's token `secret-tool` fails with 404.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from registry_gen.build import run_build
from registry_gen.cli import main as registry_gen
from registry_gen.settings import load_settings
from tests.hosts.clients import ClientRun
from tests.hosts.conftest import CellPackages
from tests.hosts.servers import api_process, free_port, nginx_server
from tests.registry_api.helpers import RegistryProcess, add_user
from tests.registry_api.helpers import http as http_request
from tests.support import make_tarball

pytestmark = pytest.mark.slow

RULES = "packages:\n  '@internal/*': {read: authenticated}\n  'secret-*': {read: [group-a]}\n"
PRIVATE = ("@internal/secret-lib", "secret-tool")
# How each client reports a 401: npm and pnpm give the status, yarn 1 the body of our reply
# (serve's, or nginx's JSON error page).
UNAUTHORIZED = ("401", "log in to read this package", "authentication required")
NOT_FOUND = ("404", ': not found')
PRIVATE_README = "PRIVATE-README-MARKER"  # in the private packages' documents and HTML pages  # the second: yarn 1 quoting our {"error":"not found"}


@dataclass(frozen=True)
class PrivateRegistry:
    kind: str
    base: str
    tokens: dict[str, str]
    tree: Path
    decision_cache: Path | None = None  # nginx's cache of read decisions


def _prepare(root: Path, cell_content: tuple[Path, CellPackages], base_url: str | None = None) -> Path:
    """content/ (the public cell packages and the two private ones) and registry.yaml in `root`."""
    content = root / "content"
    shutil.copytree(cell_content[0], content)
    for folder, name in (("internal", PRIVATE[0]), ("secret", PRIVATE[1])):
        files = {"index.js": f"module.exports = {name!r};\n", "README.md": f"# {name}\n\n{PRIVATE_README}\n"}
        make_tarball(content / folder, name, "1.0.0", files=files)
    base = f"base_url: {base_url}\n" if base_url else ""
    (root / "registry.yaml").write_text(f"content_dir: content\nout_dir: public\ndata_dir: data\n{base}signup: open\n{RULES}")
    return root / "registry.yaml"


def _accounts(base: str, config: Path) -> dict[str, str]:
    tokens = {name: add_user(base, name, f"{name}-password-1") for name in ("alice", "bob")}
    assert registry_gen(["groups", "alice", "--add", "group-a", "-c", str(config)]) == 0
    return tokens


@pytest.fixture(scope="module")
def serve_private(tmp_path_factory: pytest.TempPathFactory, cell_content: tuple[Path, CellPackages]) -> Iterator[PrivateRegistry]:
    root = tmp_path_factory.mktemp("private-serve")
    config = _prepare(root, cell_content)
    process = RegistryProcess(root).start()  # reads root/registry.yaml (its working folder)
    try:
        yield PrivateRegistry("serve", process.base, _accounts(process.base, config), process.out)
    finally:
        process.stop()


@pytest.fixture(scope="module")
def nginx_private(tmp_path_factory: pytest.TempPathFactory, cell_content: tuple[Path, CellPackages]) -> Iterator[PrivateRegistry]:
    root = tmp_path_factory.mktemp("private-nginx")
    nginx_port, api_port = free_port(), free_port()
    base = f"http://127.0.0.1:{nginx_port}/"
    config = _prepare(root, cell_content, base)
    assert run_build(load_settings(config)).errors == []
    with api_process(root, config, api_port):
        upstream = f"127.0.0.1:{api_port}"
        with nginx_server(root / "public", root / "nginx", nginx_port, api_upstream=upstream, extra_args=["--config", str(config)]):
            yield PrivateRegistry("nginx+api", base, _accounts(base, config), root / "public", root / "nginx" / "read_cache")


REGISTRIES = {"serve": "serve_private", "nginx+api": "nginx_private"}


def _status(url: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310 - 127.0.0.1
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _project(client: ClientRun, folder: Path, registry: PrivateRegistry, who: str | None) -> Path:
    project = client.new_project(folder)
    if who:
        host = registry.base.removeprefix("http:")
        with open(project / ".npmrc", "a") as rc:
            rc.write(f"{host}:_authToken={registry.tokens[who]}\n")
            if client.spec.kind == "yarn1":
                rc.write("always-auth=true\n")  # yarn 1 sends the token for unscoped packages only with this
    return project


def _try_add(client: ClientRun, project: Path, *packages: str) -> subprocess.CompletedProcess[str]:
    args = {"npm": ["install"], "pnpm": ["add"], "yarn1": ["add", "--non-interactive", "--no-progress"]}[client.spec.kind]
    return client.run(*args, *packages, cwd=project, check=False)


@pytest.mark.parametrize("registry_kind", list(REGISTRIES))
def test_status_codes_and_listings(registry_kind: str, request: pytest.FixtureRequest) -> None:
    registry: PrivateRegistry = request.getfixturevalue(REGISTRIES[registry_kind])
    base, tokens = registry.base, registry.tokens
    assert _status(base + "@internal%2fsecret-lib")[0] == 401
    assert _status(base + "@internal/secret-lib/-/secret-lib-1.0.0.tgz")[0] == 401
    assert _status(base + "@internal%2fsecret-lib", tokens["bob"])[0] == 200
    denied = _status(base + "secret-tool", tokens["bob"])
    assert denied[0] == 404 and json.loads(denied[1]) == json.loads(_status(base + "no-such-package", tokens["bob"])[1])
    assert _status(base + "secret-tool/-/secret-tool-1.0.0.tgz", tokens["bob"])[0] == 404
    assert _status(base + "secret-tool", tokens["alice"])[0] == 200
    assert _status(base + "secret-tool/-/secret-tool-1.0.0.tgz", tokens["alice"])[0] == 200
    for listing in ("-/all", "-/v1/search?text=secret", "-/web/"):
        status, body = _status(base + listing)
        assert status == 200 and b"secret-tool" not in body and b"secret-lib" not in body, listing
    found = json.loads(_status(base + "-/v1/search?text=secret", tokens["alice"])[1])
    assert sorted(o["package"]["name"] for o in found["objects"]) == sorted(PRIVATE)  # npm search: per caller


def test_nginx_asks_once_per_package_and_credential(nginx_private: PrivateRegistry) -> None:
    """A document and its tarball (each spelling) share one cached decision: one cache entry."""
    assert nginx_private.decision_cache is not None
    token = add_user(nginx_private.base, "carol", "carol-password-1")

    def entries() -> set[Path]:
        return {p for p in nginx_private.decision_cache.rglob("*") if p.is_file()}  # type: ignore[union-attr]

    before = entries()
    for path in ("@internal%2fsecret-lib", "@internal/secret-lib", "@internal/secret-lib/-/secret-lib-1.0.0.tgz"):
        assert _status(nginx_private.base + path, token)[0] == 200
    assert len(entries() - before) == 1


# Issue 26: reads of a private package spelled through a public package's path. nginx used to
# judge the URI as sent (package `pub`) and serve the normalised one (`secret-tool`). {P}: a public
# package; {S}: secret-tool (group-a only); {L}: @internal/secret-lib (any account).
ABBREVIATED = {"Accept": "application/vnd.npm.install-v1+json"}
RANGE = {"Range": "bytes=0-99"}
TARBALL = "{S}/-/{S}-1.0.0.tgz"
ATTACKS: list[tuple[str, str, dict[str, str]]] = [
    *(("GET", target, {}) for target in (
        # documents: encoded and plain dot segments, case, empty segments, escapes
        "/{P}/..%2f{S}", "/{P}/..%2F{S}", "/{P}/%2e%2e/{S}", "/{P}/%2E%2E/{S}", "/{P}/.%2e/{S}", "/{P}/%2E./{S}",
        "/{P}/../{S}", "/{P}/./../{S}", "/{P}%2f..%2f{S}", "/{P}/..//{S}", "//{S}", "/./{S}", "/%2e/{S}",
        "/{P}/..%2f{S}/", "/{P}/..%2f{S}?write=true", "/@x%2f..%2f{S}", "/{P}/..%2f{S}%0d%0aX-Leak:%201",
        "/{P}/..%252f{S}", "/{P}/..%5c{S}", "/{P}/..%2fSECRET-TOOL",
        "/{P}/..%2f@internal%2fsecret-lib", "/{P}/..%2F@internal%2Fsecret-lib", "/{P}/../@internal/secret-lib",
        "/{P}/..%2f%40internal%2fsecret-lib", "/{P}/..%2f@internal/secret-lib",
        # tarballs
        "/{P}/../" + TARBALL, "/{P}/..%2f" + TARBALL, "/{P}/%2e%2e/" + TARBALL, "/{P}/-/..%2f..%2f" + TARBALL,
        "//" + TARBALL, "/{P}/../@internal/secret-lib/-/secret-lib-1.0.0.tgz",
        # dist-tag files
        "/{P}/..%2f{S}/latest", "/{P}/../@internal/secret-lib/latest", "/-/package/{P}/..%2f{S}/dist-tags",
        "/-/package/{P}%2f..%2f{S}/dist-tags", "/-/package/./{S}/dist-tags", "/-/package/{P}/../@internal/secret-lib/dist-tags",
        # HTML pages (the README is on them)
        "/-/web/package/{P}/..%2f{S}/", "/-/web/package/{P}/..%2f{S}/index.html", "/-/web/package/{P}/%2e%2e/{S}/",
        "/-/web/package/{P}/../{S}/", "/-/web/package/{P}/..%2f@internal%2fsecret-lib/", "/-/web/../web/package/{S}/",
        "/-/./web/package/{S}/", "/-/web/package/{P}/..%2f{S}/v/1.0.0/", "//-/web/package/{S}/",
    )),  # fmt: skip
    ("GET", "/{P}/..%2f{S}", ABBREVIATED),
    ("GET", "/{P}/../{S}", ABBREVIATED),
    ("GET", "/{P}/..%2f@internal%2fsecret-lib", ABBREVIATED),
    ("HEAD", "/{P}/..%2f{S}", {}),
    ("HEAD", "/{P}/../" + TARBALL, {}),
    ("HEAD", "/-/web/package/{P}/..%2f{S}/", {}),
    ("GET", "/{P}/../" + TARBALL, RANGE),
    ("GET", "/{P}/..%2F" + TARBALL, RANGE),
]


def _raw(base: str, method: str, target: str, headers: dict[str, str], source: str | None = None) -> tuple[int, bytes]:
    """One request with `target` sent exactly as written (http.client neither decodes nor
    normalises it: curl's --path-as-is), from the loopback address `source` if given."""
    address = urlsplit(base)
    bound = None if source is None else (source, 0)
    connection = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port, timeout=30, source_address=bound)
    try:
        connection.request(method, target, headers=headers)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def _private_bytes(tree: Path) -> list[bytes]:
    """Every file of the private packages in the served tree (documents, tarballs, tag files, pages)."""
    folders = [tree / name for name in PRIVATE] + [tree / "-/package" / name for name in PRIVATE]
    folders += [tree / "-/web/package" / name for name in PRIVATE]
    return [path.read_bytes() for folder in folders for path in folder.rglob("*") if path.is_file() and path.suffix != ".gz"]


@pytest.mark.parametrize("registry_kind", list(REGISTRIES))
def test_private_packages_cannot_be_read_through_another_path(registry_kind: str, request: pytest.FixtureRequest) -> None:
    """Every spelling of a private read through a public package's path, anonymously: 401 or a
    JSON 404, never a byte of the private packages."""
    registry: PrivateRegistry = request.getfixturevalue(REGISTRIES[registry_kind])
    public = request.getfixturevalue("cell_content")[1].transitive
    secrets = _private_bytes(registry.tree)
    assert len(ATTACKS) >= 30 and len(secrets) > 10
    assert _raw(registry.base, "GET", f"/{public}", {})[0] == 200  # the path the attacks go through is readable
    leaks = []
    for method, template, headers in ATTACKS:
        target = template.replace("{P}", public).replace("{S}", PRIVATE[1])
        status, body = _raw(registry.base, method, target, headers)
        shown = any(secret[:64] in body or (body and body in secret) for secret in secrets) or PRIVATE_README.encode() in body
        if status not in (401, 404) or shown or (method == "GET" and "error" not in json.loads(body)):
            leaks.append(f"{method} {target} {headers}: {status} {body[:60]!r}")
    assert leaks == []


@pytest.mark.parametrize("registry_kind", list(REGISTRIES))
def test_reads_in_every_client_spelling_still_work(registry_kind: str, request: pytest.FixtureRequest) -> None:
    """What the refusals must not touch: a scoped name's one %2f or %2F, documents, tarballs
    (HEAD, Range), tag files and HTML pages, public anonymously and private with a token."""
    registry: PrivateRegistry = request.getfixturevalue(REGISTRIES[registry_kind])
    cell: CellPackages = request.getfixturevalue("cell_content")[1]
    tree, alice = registry.tree, {"Authorization": f"Bearer {registry.tokens['alice']}"}
    lib, scoped = "@internal/secret-lib", cell.direct[1]
    expected = {
        **{f"/{spelling}": f"{lib}/index.html" for spelling in ("@internal%2fsecret-lib", "@internal%2Fsecret-lib", lib, "%40internal%2fsecret-lib")},
        f"/{lib}/-/secret-lib-1.0.0.tgz": f"{lib}/-/secret-lib-1.0.0.tgz",
        "/secret-tool/latest": "secret-tool/latest/index.html",
        "/-/package/secret-tool/dist-tags": "-/package/secret-tool/dist-tags",
        "/-/package/@internal%2fsecret-lib/dist-tags": f"-/package/{lib}/dist-tags",
        "/-/web/package/secret-tool/": "-/web/package/secret-tool/index.html",
        "/-/web/package/@internal%2Fsecret-lib/": f"-/web/package/{lib}/index.html",
        f"/-/web/package/{lib}/v/1.0.0/": f"-/web/package/{lib}/v/1.0.0/index.html",
    }  # fmt: skip
    for target, relative in expected.items():
        assert _raw(registry.base, "GET", target, alice) == (200, (tree / relative).read_bytes()), target
        assert _raw(registry.base, "GET", target, {})[0] == 401, target  # the same read, anonymously
    assert PRIVATE_README.encode() in (tree / "-/web/package/secret-tool/index.html").read_bytes()
    abbreviated = _raw(registry.base, "GET", "/secret-tool", {**alice, **ABBREVIATED})
    assert abbreviated == (200, (tree / "secret-tool/abbreviated.json").read_bytes())
    tarball = (tree / "secret-tool/-/secret-tool-1.0.0.tgz").read_bytes()
    assert _raw(registry.base, "HEAD", "/secret-tool/-/secret-tool-1.0.0.tgz", alice) == (200, b"")
    ranged = _raw(registry.base, "GET", "/secret-tool/-/secret-tool-1.0.0.tgz", {**alice, **RANGE})
    assert ranged in ((206, tarball[:100]), (200, tarball))  # serve ignores Range, as HTTP allows
    for spelling in (scoped.replace("/", "%2f"), scoped.replace("/", "%2F"), scoped):
        assert _raw(registry.base, "GET", f"/{spelling}", {}) == (200, (tree / scoped / "index.html").read_bytes()), spelling
    document = json.loads((tree / cell.transitive / "index.html").read_bytes())
    public_tarball = urlsplit(document["versions"][cell.transitive_version]["dist"]["tarball"]).path
    assert _raw(registry.base, "GET", public_tarball, {}) == (200, (tree / public_tarball.lstrip("/")).read_bytes())
    for page in (f"/-/web/package/{scoped}/", f"/-/web/package/{cell.transitive}/", "/-/web/"):
        assert _raw(registry.base, "GET", page, {})[0] == 200, page


def test_nginx_keeps_each_decision_for_one_client_address(nginx_private: PrivateRegistry) -> None:
    """A token limited to 127.0.0.1: its 200 there, cached, is not reused for the same token
    used from 127.0.0.2 a moment later (within --read-cache-seconds)."""
    password_token = add_user(nginx_private.base, "dave", "dave-password-1")
    reply = http_request(
        "POST", nginx_private.base + "-/npm/v1/tokens", token=password_token,
        body={"password": "dave-password-1", "cidr_whitelist": ["127.0.0.1/32"]},
    )  # fmt: skip
    assert reply.status == 201, reply.body
    limited = {"Authorization": f"Bearer {reply.json['token']}"}
    assert _raw(nginx_private.base, "GET", "/@internal%2fsecret-lib", limited, source="127.0.0.1")[0] == 200
    assert _raw(nginx_private.base, "GET", "/@internal%2fsecret-lib", limited, source="127.0.0.2")[0] == 401
    assert _raw(nginx_private.base, "GET", "/@internal/secret-lib/-/secret-lib-1.0.0.tgz", limited, source="127.0.0.2")[0] == 401


def test_nginx_refuses_paths_it_would_serve_elsewhere(nginx_private: PrivateRegistry, cell_content: tuple[Path, CellPackages]) -> None:
    """Spellings nginx resolves away itself are refused too: a fragment (nginx serves the path
    before it), climbing above the root (nginx's own 400, before any read)."""
    public = cell_content[1].transitive
    assert _raw(nginx_private.base, "GET", f"/{public}", {})[0] == 200
    status, body = _raw(nginx_private.base, "GET", f"/{public}#/../{PRIVATE[1]}", {})
    assert status == 404 and json.loads(body) == {"error": "not found"}
    for target in (f"/{public}/..%2f..%2f{PRIVATE[1]}", f"/@internal%2f..%2f..%2f{PRIVATE[1]}"):
        status, body = _raw(nginx_private.base, "GET", target, {})
        assert status in (400, 404) and "error" in json.loads(body), target


@pytest.mark.parametrize("registry_kind", list(REGISTRIES))
@pytest.mark.parametrize("client_name", ["npm11", "pnpm", "yarn1"])
def test_clients_install_private_packages_with_a_token_only(
    client_name: str, registry_kind: str, request: pytest.FixtureRequest, make_client, tmp_path: Path
) -> None:
    registry: PrivateRegistry = request.getfixturevalue(REGISTRIES[registry_kind])
    client: ClientRun = make_client(client_name, registry.base)

    allowed = _project(client, tmp_path / "alice", registry, "alice")
    proc = _try_add(client, allowed, *PRIVATE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in PRIVATE:
        assert (allowed / "node_modules" / name / "package.json").is_file()

    client.fresh_cache()
    anonymous = _project(client, tmp_path / "anonymous", registry, None)
    proc = _try_add(client, anonymous, PRIVATE[0])
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and any(mark in output for mark in UNAUTHORIZED), output

    client.fresh_cache()
    outsider = _project(client, tmp_path / "bob", registry, "bob")
    proc = _try_add(client, outsider, PRIVATE[1])
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and any(mark in output for mark in NOT_FOUND), output
    assert not any(mark in output for mark in UNAUTHORIZED), output


@pytest.mark.parametrize("registry_kind", list(REGISTRIES))
def test_the_site_hides_private_packages_from_anonymous_visitors(registry_kind: str, request: pytest.FixtureRequest) -> None:
    """Debian's Chromium (Playwright): front page, client-side search and the package page."""
    from playwright.sync_api import expect, sync_playwright

    from tests.site.test_browser import CHROMIUM, CHROMIUM_ARGS

    registry: PrivateRegistry = request.getfixturevalue(REGISTRIES[registry_kind])
    public = request.getfixturevalue("cell_content")[1].direct[0]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(service_workers="block").new_page()
            page.goto(registry.base + "-/web/")
            expect(page.locator("body")).to_contain_text(public)  # public packages are listed
            text = page.locator("body").inner_text()
            assert "secret-tool" not in text and "secret-lib" not in text
            page.locator("#q").fill("secret")
            expect(page.locator("#search-status")).to_contain_text("No package matches")
            page.locator("#q").fill(public)
            expect(page.locator("#search-list")).to_contain_text(public)
            assert "secret" not in page.locator("#search-list").inner_text()
            reply = page.goto(registry.base + "-/web/package/secret-tool/")
            assert reply is not None and reply.status == 401
            assert "secret" not in page.locator("body").inner_text()
        finally:
            browser.close()
