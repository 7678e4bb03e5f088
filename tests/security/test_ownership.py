"""Package takeover through a maintainer name without an account (issue 13, High).

The attack: a package's meta names maintainer `demo`, no account `demo` exists, somebody signs up
as `demo` and publishes a new version with a postinstall script."""

from __future__ import annotations

import json
import os
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
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball
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


def _cli(root: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "registry_gen", *args, "--config", str(root / "registry.yaml")],
                          input=stdin, capture_output=True, text=True, cwd=root, env={**os.environ, **(env or {})})


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


LEAVER_EMAIL = b"leaver@private.example"


def _shared_packages(root: Path) -> dict[str, bytes]:
    """content/kept-pkg and content/broken-pkg, each naming the leaver with its email beside bob;
    returns each meta's good bytes, by package name."""
    people = [{"name": "leaver", "email": LEAVER_EMAIL.decode()}, {"name": "bob", "email": "bob@example.com"}]
    metas = {}
    for name in ("kept-pkg", "broken-pkg"):
        folder = root / "content" / name
        folder.mkdir(parents=True)
        (folder / f"{name}-1.0.0.tgz").write_bytes(tarball(name, "1.0.0"))
        metas[name] = json.dumps({"name": name, "maintainers": people}).encode()
        (folder / "registry-meta.json").write_bytes(metas[name])
    return metas


def _tree_files_holding(root: Path, needle: bytes) -> list[str]:
    """The files of the built tree (public/) whose bytes hold `needle` (archives and databases aside)."""
    return sorted(str(path.relative_to(root)) for path in (root / "public").rglob("*")
                  if path.is_file() and not path.name.endswith((".gz", ".tgz", ".sqlite3")) and needle in path.read_bytes())


FINISH_LINE = ("error: content/broken-pkg/registry-meta.json is broken (", "); fix it by hand, then run `registry-gen user erase-email leaver`")


def _names_the_damaged_meta(stderr: str) -> bool:
    """One error: line, naming the damaged meta and the finishing command (the store logs INFO lines too)."""
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    return "Traceback" not in stderr and len(lines) == 1 and lines[0].startswith(FINISH_LINE[0]) and lines[0].endswith(FINISH_LINE[1])


def test_a_removal_over_a_damaged_meta_names_it_and_erase_email_finishes_once_it_is_fixed(tmp_path: Path) -> None:
    """`user remove` on a real folder: the damaged meta is named in one error: line with the
    finishing command (exit 1), the tree's last good document still holds the email (findable by
    the removed name), and `user erase-email` erases it once the meta is fixed by hand."""
    (tmp_path / "registry.yaml").write_text("content_dir: content\nout_dir: public\ndata_dir: data\nbase_url: http://127.0.0.1:9/\n")
    metas = _shared_packages(tmp_path)
    for name in ("leaver", "alive"):
        added = _cli(tmp_path, "user", "add", name, "--email", f"{name}@private.example", "--password-stdin", stdin=f"{name}-password-1\n")
        assert added.returncode == 0, added.stderr
    assert _cli(tmp_path, "build").returncode == 0
    assert _tree_files_holding(tmp_path, LEAVER_EMAIL)  # the check below can fail
    broken = tmp_path / "content" / "broken-pkg" / "registry-meta.json"
    broken.write_bytes(metas["broken-pkg"][:-3])  # a hand edit cut short

    removed = _cli(tmp_path, "user", "remove", "leaver", "--yes")
    assert removed.returncode == 1 and "removed leaver" in removed.stdout and "email erased from 1 package file(s)" in removed.stdout
    assert _names_the_damaged_meta(removed.stderr), removed.stderr
    assert LEAVER_EMAIL not in (tmp_path / "content" / "kept-pkg" / "registry-meta.json").read_bytes()
    holding = _tree_files_holding(tmp_path, LEAVER_EMAIL)  # the last good documents: left for the finishing step
    assert "public/broken-pkg/index.html" in holding and not [path for path in holding if "kept-pkg" in path], holding
    assert _cli(tmp_path, "user", "list").stdout.count("leaver") == 0  # the account itself is gone
    again = _cli(tmp_path, "user", "erase-email", "leaver")
    assert again.returncode == 1 and _names_the_damaged_meta(again.stderr), again.stderr

    broken.write_bytes(metas["broken-pkg"])  # fixed by hand
    finished = _cli(tmp_path, "user", "erase-email", "leaver")
    assert finished.returncode == 0 and "email erased from 1 package file(s)" in finished.stdout, finished.stderr
    assert "error:" not in finished.stderr and _tree_files_holding(tmp_path, LEAVER_EMAIL) == []
    assert LEAVER_EMAIL not in broken.read_bytes() and b"bob@example.com" in broken.read_bytes()
    live = _cli(tmp_path, "user", "erase-email", "alive")
    assert live.returncode == 1 and live.stderr.splitlines() == ["error: alive is a live account: remove it first (`registry-gen user remove alive`)"]


def test_a_removal_killed_half_way_leaves_the_email_findable_and_erase_email_all_removed_finishes(tmp_path: Path) -> None:
    """`user remove` killed (SIGKILL) after the account went and the erasure's first write was
    journalled, before any meta changed: the email stays in the metas under the removed name, and
    `user erase-email --all-removed` (no name needed) erases it from content/ and the tree."""
    (tmp_path / "registry.yaml").write_text("content_dir: content\nout_dir: public\ndata_dir: data\nbase_url: http://127.0.0.1:9/\n")
    _shared_packages(tmp_path)
    for name in ("leaver", "bob"):  # bob stays: --all-removed leaves a live account's email alone
        added = _cli(tmp_path, "user", "add", name, "--password-stdin", stdin=f"{name}-password-1\n")
        assert added.returncode == 0, added.stderr
    assert _cli(tmp_path, "build").returncode == 0
    killed = _cli(tmp_path, "user", "remove", "leaver", "--yes", env={"REGISTRY_GEN_FAILPOINT": "after-intent:kill"})
    assert killed.returncode == -9 and "removed leaver" in killed.stdout, (killed.returncode, killed.stderr)
    assert "leaver" not in _cli(tmp_path, "user", "list").stdout
    metas = sorted((tmp_path / "content").rglob("registry-meta.json"))
    assert [path.parent.name for path in metas if LEAVER_EMAIL in path.read_bytes()] == ["broken-pkg", "kept-pkg"]
    assert _tree_files_holding(tmp_path, LEAVER_EMAIL)

    finished = _cli(tmp_path, "user", "erase-email", "--all-removed")
    assert finished.returncode == 0 and "email erased from 2 package file(s)" in finished.stdout, finished.stdout + finished.stderr
    assert [path for path in metas if LEAVER_EMAIL in path.read_bytes()] == [] and _tree_files_holding(tmp_path, LEAVER_EMAIL) == []
    assert all(b"bob@example.com" in path.read_bytes() for path in metas)
    both = _cli(tmp_path, "user", "erase-email", "leaver", "--all-removed")
    assert both.returncode == 1 and both.stderr.splitlines() == ["error: give a removed account's NAME, or --all-removed (not both)"]


def test_delete_user_over_a_damaged_meta_answers_a_problem_naming_it_and_the_cli_finishes(tmp_path: Path) -> None:
    """DELETE /user/{id} on a real `registry-gen serve` (waitress): the account is removed, the
    answer is a 500 erasure-incomplete problem naming the damaged meta and the finishing command;
    once the meta is fixed, `user erase-email` (beside the running server) erases the email from
    what the server serves."""
    metas = _shared_packages(tmp_path)
    process = RegistryProcess(tmp_path)
    (tmp_path / "registry.yaml").write_text("signup: admin\nindex_refresh_seconds: 1\n")
    for name, extra in (("boss", ["--admin"]), ("leaver", ["--email", LEAVER_EMAIL.decode()])):
        assert _cli(tmp_path, "user", "add", name, *extra, "--password-stdin", stdin=f"{name}-password-1\n").returncode == 0
    process.start()
    try:
        boss = http("POST", process.base + "-/user-api/tokens", body={"username": "boss", "password": "boss-password-1"}).json["token"]
        assert LEAVER_EMAIL in http("GET", process.base + "broken-pkg").body
        broken = tmp_path / "content" / "broken-pkg" / "registry-meta.json"
        broken.write_bytes(metas["broken-pkg"][:-3])
        leaver = http("GET", process.base + "user/search?keyword=leaver", token=boss).json["content"][0]
        reply = http("DELETE", f"{process.base}user/{leaver['id']}", token=boss)
        assert reply.status == 500 and reply.json["type"] == "tag:registry-gen,2025:problems/erasure-incomplete", reply.body
        assert "registry-gen user erase-email leaver" in reply.json["detail"]
        (left,) = reply.json["errors"]
        assert left["detail"].startswith("content/broken-pkg/registry-meta.json is broken (") and left["detail"].endswith(FINISH_LINE[1])
        assert http("GET", f"{process.base}user/{leaver['id']}", token=boss).status == 404  # removed
        assert LEAVER_EMAIL not in http("GET", process.base + "kept-pkg").body
        assert LEAVER_EMAIL in http("GET", process.base + "broken-pkg").body  # findable for the finishing step

        broken.write_bytes(metas["broken-pkg"])
        finished = _cli(tmp_path, "user", "erase-email", "leaver")
        assert finished.returncode == 0 and "email erased from 1 package file(s)" in finished.stdout, finished.stderr
        assert LEAVER_EMAIL not in http("GET", process.base + "broken-pkg").body
        poll(lambda: LEAVER_EMAIL not in http("GET", process.base + "-/all").body, "-/all to drop the email")
    finally:
        process.stop()


def test_the_erasure_matches_a_bound_entry_by_its_account_id_whatever_name_it_carries() -> None:
    """An entry recorded before an admin renamed its account carries the old name and the account's
    id: the id binds it. A name alone matches only an unbound entry; an entry bound to another
    account keeps its email even when it carries the removed name."""
    from registry_gen.ownership import erase_email

    state = _state([{"name": "old-name", "email": "gone@private.example", "account": "acct-gone"},
                    {"name": "new-name", "email": "other@example.com", "account": "acct-other"},
                    {"name": "legacy", "email": "legacy@private.example"}])
    change = erase_email(state, frozenset({"new-name", "legacy"}), frozenset({"acct-gone"}))
    assert change.meta is not None and change.meta.maintainers == [
        {"name": "old-name", "account": "acct-gone"}, {"name": "new-name", "email": "other@example.com", "account": "acct-other"},
        {"name": "legacy"}]
    erased = {"maintainer email erased": ["legacy", "old-name"]}  # by the entries' names, as before
    assert [(event.kind, event.detail) for event in change.events] == [("package:change", erased)]


def _publish_then_renamed(base: str, admin: str, name: str, package: str) -> str:
    """`name` signs up (its email LEAVER_EMAIL) and publishes `package` (its entry: name, email,
    account id); the admin then renames the account to renamed-`name`. Returns the account's id."""
    token = add_user(base, name, email=LEAVER_EMAIL.decode())
    assert http("PUT", base + package, token=token, body=publish_body(package, "1.0.0", tarball(package, "1.0.0"))).status == 201
    (found,) = http("GET", f"{base}user/search?keyword={name}", token=admin).json["content"]
    renamed = http("PATCH", f"{base}user/{found['id']}", token=admin, raw=json.dumps({"username": f"renamed-{name}"}).encode(),
                   headers={"Content-Type": "application/merge-patch+json"})
    assert renamed.status == 200 and renamed.json["username"] == f"renamed-{name}", renamed.body
    return str(found["id"])


def _renaming_registry(tmp_path: Path) -> tuple[RegistryProcess, str]:
    """A started `registry-gen serve` (open signup) with an admin; returns it and the admin's token."""
    (tmp_path / "registry.yaml").write_text("signup: open\nindex_refresh_seconds: 1\n")
    added = _cli(tmp_path, "user", "add", "boss", "--admin", "--password-stdin", stdin="boss-password-1\n")
    assert added.returncode == 0, added.stderr
    process = RegistryProcess(tmp_path).start()
    return process, http("POST", process.base + "-/user-api/tokens", body={"username": "boss", "password": "boss-password-1"}).json["token"]


def test_removing_a_renamed_account_erases_the_email_recorded_under_its_old_name(tmp_path: Path) -> None:
    """DELETE /user/{id} on a real `serve`, and `user remove NEW-NAME` beside it: each account
    published under its old name, then an admin renamed it (PATCH /user/{id})."""
    process, admin = _renaming_registry(tmp_path)
    try:
        leaver = _publish_then_renamed(process.base, admin, "leaver", "leaver-pkg")
        _publish_then_renamed(process.base, admin, "mover", "mover-pkg")
        assert LEAVER_EMAIL in http("GET", process.base + "leaver-pkg").body  # the checks below can fail
        assert http("DELETE", f"{process.base}user/{leaver}", token=admin).status == 204
        assert http("GET", process.base + "leaver-pkg").json["maintainers"] == [{"name": "leaver"}]
        removed = _cli(tmp_path, "user", "remove", "renamed-mover", "--yes")
        assert removed.returncode == 0 and "email erased from 1 package file(s)" in removed.stdout, removed.stdout + removed.stderr
        assert http("GET", process.base + "mover-pkg").json["maintainers"] == [{"name": "mover"}]
        assert [path for path in (tmp_path / "content").rglob("registry-meta.json") if LEAVER_EMAIL in path.read_bytes()] == []
        poll(lambda: LEAVER_EMAIL not in http("GET", process.base + "-/all").body, "-/all to drop the email")
    finally:
        process.stop()


def test_erase_email_all_removed_finds_a_renamed_accounts_entries_by_the_tombstones_ids(tmp_path: Path) -> None:
    """A removal of a renamed account killed half-way (the CLI, after the account went): the email
    is still recorded under the old name, and `user erase-email --all-removed` finds it by the
    tombstone's id."""
    process, admin = _renaming_registry(tmp_path)
    try:
        _publish_then_renamed(process.base, admin, "leaver", "leaver-pkg")
    finally:
        process.stop()
    killed = _cli(tmp_path, "user", "remove", "renamed-leaver", "--yes", env={"REGISTRY_GEN_FAILPOINT": "after-intent:kill"})
    assert "removed renamed-leaver" in killed.stdout, (killed.returncode, killed.stderr)
    meta = tmp_path / "content" / "leaver-pkg" / "registry-meta.json"
    assert LEAVER_EMAIL in meta.read_bytes() and _tree_files_holding(tmp_path, LEAVER_EMAIL)
    finished = _cli(tmp_path, "user", "erase-email", "--all-removed")
    assert finished.returncode == 0 and "email erased from 1 package file(s)" in finished.stdout, finished.stdout + finished.stderr
    assert LEAVER_EMAIL not in meta.read_bytes() and _tree_files_holding(tmp_path, LEAVER_EMAIL) == []
