"""Package takeover through a maintainer name without an account (issue 13, High).

The attack: a package's meta names maintainer `demo`, no account `demo` exists, somebody signs up
as `demo` and publishes a new version with a postinstall script."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.errors import Forbidden
from registry_gen.meta import PackageMeta, parse_meta
from registry_gen.publish import Actor, PackageState, apply_publish, authorize, decode_publish
from registry_gen.settings import Limits, Settings
from tests.registry_api.helpers import RegistryProcess, http, publish_body, tarball
from tests.support import poll

ATTACKER = Actor("demo", "demo@evil.example", account_id="acct-new")
OWNER = Actor("demo", "demo@example.com", account_id="acct-old")


def _state(maintainers: list[dict[str, str]]) -> PackageState:
    return PackageState("demo-core", PackageMeta(name="demo-core", maintainers=maintainers), frozenset({"1.2.0"}))


def test_a_maintainer_name_without_an_account_grants_nothing() -> None:
    with pytest.raises(Forbidden, match="owner claim"):
        authorize(_state([{"name": "demo"}]), ATTACKER, "publish")


def test_a_new_account_with_a_bound_name_is_not_its_owner() -> None:
    state = _state([{"name": "demo", "account": "acct-old"}])
    with pytest.raises(Forbidden):
        authorize(state, ATTACKER, "publish")
    authorize(state, OWNER, "publish")


def test_the_first_publisher_is_recorded_with_its_account_and_documents_never_show_it() -> None:
    data = tarball("fresh-pkg", "1.0.0")
    upload = decode_publish("fresh-pkg", publish_body("fresh-pkg", "1.0.0", data), Limits())
    meta = apply_publish(PackageState("fresh-pkg", PackageMeta(name="fresh-pkg"), frozenset()), upload, OWNER, "2026-01-01T00:00:00.000Z")
    assert meta.maintainers == [{"name": "demo", "email": "demo@example.com", "account": "acct-old"}]
    assert parse_meta(json.dumps(meta.to_json()).encode()).maintainers[0]["account"] == "acct-old"


def test_npm_owner_add_never_binds_a_name_recorded_without_an_account() -> None:
    from registry_gen.publish import apply_owners

    state = _state([{"name": "demo"}, {"name": "lead", "account": "acct-lead"}])
    lead = Actor("lead", account_id="acct-lead")
    accounts = {"demo": {"name": "demo", "account": "acct-new"}, "lead": {"name": "lead", "account": "acct-lead"},
                "carol": {"name": "carol", "account": "acct-carol"}}
    meta = apply_owners(state, [{"name": "demo"}, {"name": "lead"}, {"name": "carol"}], lead, "2026-01-01T00:00:00.000Z", accounts.get)
    assert meta is not None and meta.maintainers[0] == {"name": "demo"}  # still grants nothing
    assert meta.maintainers[2] == {"name": "carol", "account": "acct-carol"}


@pytest.fixture
def demo_tree(tmp_path: Path) -> Settings:
    content = tmp_path / "content"
    content.mkdir()
    (content / "demo-core-1.2.0.tgz").write_bytes(tarball("demo-core", "1.2.0"))
    (content / "registry-meta.json").write_text(json.dumps({"name": "demo-core", "maintainers": [{"name": "demo"}]}))
    settings = Settings(content_dir=content, out_dir=tmp_path / "public", data_dir=tmp_path / "data", base_url="http://127.0.0.1:9/")
    (tmp_path / "registry.yaml").write_text(f"content_dir: content\nout_dir: public\ndata_dir: data\nbase_url: {settings.base_url}\n")
    run_build(settings)
    return settings


def _cli(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "registry_gen", *args, "--config", str(root / "registry.yaml")],
                          input=stdin, capture_output=True, text=True, cwd=root)


def test_owner_claim_binds_the_recorded_name_to_an_account(demo_tree: Settings) -> None:
    root = demo_tree.content_dir.parent
    assert _cli(root, "user", "add", "demo", "--password-stdin", stdin="demo-password-1\n").returncode == 0
    claimed = _cli(root, "owner", "claim", "demo-core", "demo")
    assert claimed.returncode == 0, claimed.stderr
    meta = json.loads(next(demo_tree.content_dir.rglob("registry-meta.json")).read_text())
    assert meta["maintainers"][0]["name"] == "demo" and meta["maintainers"][0]["account"]
    document = json.loads((demo_tree.out_dir / "demo-core" / "index.html").read_bytes())
    assert all("account" not in person for person in document["maintainers"])
    again = _cli(root, "owner", "claim", "demo-core", "nobody-here")
    assert again.returncode == 1 and "no active user" in again.stderr


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RegistryProcess]:
    content = tmp_path / "content"
    content.mkdir()
    data = tarball("demo-core", "1.2.0")
    (content / "demo-core-1.2.0.tgz").write_bytes(data)
    (content / "registry-meta.json").write_text(json.dumps({"name": "demo-core", "maintainers": [{"name": "demo"}]}))
    process = RegistryProcess(tmp_path)
    yield process
    process.stop()


def _signup(base: str, name: str) -> tuple[int, str]:
    reply = http("PUT", f"{base}-/user/org.couchdb.user:{name}", body={
        "_id": f"org.couchdb.user:{name}", "name": name, "password": "attacker-pass-1", "email": "x@evil.example", "type": "user"})
    return reply.status, str(reply.json.get("token", "")) if reply.status == 201 else ""


def test_default_signup_refuses_the_attackers_account(served: RegistryProcess) -> None:
    (served.root / "registry.yaml").write_text("")  # the defaults
    served.start()
    status, _ = _signup(served.base, "demo")
    assert status == 403


def test_open_signup_cannot_take_over_a_name_without_an_account(served: RegistryProcess) -> None:
    (served.root / "registry.yaml").write_text("signup: open\n")
    served.start()
    status, token = _signup(served.base, "demo")
    assert status == 201
    evil = tarball("demo-core", "1.3.0", scripts={"postinstall": "echo owned"})
    reply = http("PUT", served.base + "demo-core", token=token, body=publish_body("demo-core", "1.3.0", evil))
    assert reply.status == 403, reply.body


def test_a_deleted_users_email_is_erased_from_metas_and_documents(demo_tree: Settings) -> None:
    from registry_gen.ownership import Erasure, erase_maintainer_email

    meta_path = demo_tree.content_dir / "registry-meta.json"
    meta_path.write_text(json.dumps({"name": "demo-core", "maintainers": [{"name": "demo", "email": "demo@private.example"},
                                                                          {"name": "kept", "email": "kept@example.com"}]}))
    run_build(demo_tree)
    assert b"demo@private.example" in (demo_tree.out_dir / "demo-core" / "index.html").read_bytes()
    assert erase_maintainer_email(demo_tree, "demo") == Erasure(["registry-meta.json"], [])
    for path in demo_tree.out_dir.rglob("*"):
        if path.is_file() and not path.name.endswith((".gz", ".tgz", ".sqlite3")):
            assert b"demo@private.example" not in path.read_bytes(), path
    assert b"kept@example.com" in (demo_tree.out_dir / "demo-core" / "index.html").read_bytes()


def test_deleting_an_account_erases_its_email_from_the_served_packages(tmp_path: Path) -> None:
    """The document, and -/all at once too: the erasure runs the server's pending rewrite of
    -/all now rather than after index_refresh_seconds."""
    process = RegistryProcess(tmp_path)
    process.content.mkdir(parents=True)
    (tmp_path / "registry.yaml").write_text("signup: open\nindex_refresh_seconds: 1\n")
    added = _cli(tmp_path, "user", "add", "boss", "--admin", "--password-stdin", stdin="boss-password-1\n")
    assert added.returncode == 0, added.stderr
    process.start()
    try:
        _, token = _signup(process.base, "leaver")
        assert http("PUT", process.base + "leaving-pkg", token=token,
                    body=publish_body("leaving-pkg", "1.0.0", tarball("leaving-pkg", "1.0.0"))).status == 201
        assert (process.packument("leaving-pkg") or {})["maintainers"] == [{"name": "leaver", "email": "x@evil.example"}]
        poll(lambda: b"x@evil.example" in http("GET", process.base + "-/all").body, "-/all to list the maintainer's email")
        admin = http("POST", process.base + "-/user-api/tokens", body={"username": "boss", "password": "boss-password-1"}).json["token"]
        found = http("GET", process.base + "user/search?keyword=leaver", token=admin).json["content"][0]
        assert http("DELETE", f"{process.base}user/{found['id']}", token=admin).status == 204
        assert (process.packument("leaving-pkg") or {})["maintainers"] == [{"name": "leaver"}]
        assert b"x@evil.example" not in (process.content / "leaving-pkg" / "registry-meta.json").read_bytes()
        assert b"x@evil.example" not in http("GET", process.base + "-/all").body
    finally:
        process.stop()


def test_an_admin_claims_a_recorded_name_over_the_api_and_its_account_then_publishes(served: RegistryProcess) -> None:
    root = served.root
    (root / "registry.yaml").write_text("signup: admin\n")
    for name, extra in (("boss", ["--admin"]), ("demo", [])):
        assert _cli(root, "user", "add", name, *extra, "--password-stdin", stdin=f"{name}-password-1\n").returncode == 0
    served.start()

    def login(name: str) -> str:
        return str(http("POST", served.base + "-/user-api/tokens", body={"username": name, "password": f"{name}-password-1"}).json["token"])

    demo, boss = login("demo"), login("boss")
    body = publish_body("demo-core", "1.3.0", tarball("demo-core", "1.3.0"))
    assert http("PUT", served.base + "demo-core", token=demo, body=body).status == 403  # the bare name grants nothing
    claim = {"package": "demo-core", "username": "demo"}
    assert http("POST", served.base + "-/user-api/owners", token=demo, body=claim).status == 403  # admins only
    claimed = http("POST", served.base + "-/user-api/owners", token=boss, body=claim)
    assert claimed.status == 200 and claimed.json["changed"] is True
    assert http("POST", served.base + "-/user-api/owners", token=boss, body={**claim, "package": "no-such-pkg"}).status == 404
    assert http("PUT", served.base + "demo-core", token=demo, body=body).status == 201
