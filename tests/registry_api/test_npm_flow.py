"""The real npm client against `registry-gen serve` (one server for the module)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.registry_api.helpers import RegistryProcess, add_user, http, write_package
from tests.support import NPM, Npm, drive_terminal

pytestmark = pytest.mark.slow


def _installed_version(project: Path, name: str) -> str:
    return str(json.loads((project / "node_modules" / name / "package.json").read_text())["version"])


def _fresh_project(folder: Path) -> Path:
    return write_package(folder, "consumer", "1.0.0")


def test_publish_install_owners_deprecate_unpublish(server: RegistryProcess, tmp_path: Path) -> None:
    name = "flow-pkg"
    alice = server.npm("alice", add_user(server.base, "alice", "alice-password-1"))
    bob = server.npm("bob", add_user(server.base, "bob", "bob-password-1"))
    source = write_package(tmp_path / "src", name, "1.0.0", description="the flow package")

    assert alice.run("whoami", cwd=tmp_path).stdout.strip() == "alice"
    published = alice.run("publish", cwd=source)
    assert f"+ {name}@1.0.0" in published.stdout
    assert (server.out / name / "-" / f"{name}-1.0.0.tgz").is_file()
    assert (server.content / name / f"{name}-1.0.0.tgz").is_file()
    meta = json.loads((server.content / name / "registry-meta.json").read_text())
    # The meta binds the maintainer to alice's account id; the documents never show it.
    assert [{k: v for k, v in m.items() if k != "account"} for m in meta["maintainers"]] == [{"name": "alice", "email": "alice@example.com"}]
    assert len(meta["maintainers"][0]["account"]) == 36
    assert server.packument(name)["maintainers"] == [{"name": "alice", "email": "alice@example.com"}]  # type: ignore[index]

    assert alice.run("view", name, "version", cwd=tmp_path).stdout.strip() == "1.0.0"
    project = _fresh_project(tmp_path / "project")
    alice.run("install", name, cwd=project)
    assert _installed_version(project, name) == "1.0.0"

    write_package(source, name, "1.1.0", description="the flow package")
    alice.run("publish", cwd=source)
    alice.run("dist-tag", "add", f"{name}@1.0.0", "beta", cwd=tmp_path)
    tags = alice.run("dist-tag", "ls", name, cwd=tmp_path).stdout
    assert "beta: 1.0.0" in tags and "latest: 1.1.0" in tags
    assert json.loads((server.out / "-/package" / name / "dist-tags").read_text()) == {"beta": "1.0.0", "latest": "1.1.0"}

    added = alice.run("owner", "add", "bob", name, cwd=tmp_path)
    assert f"+ bob ({name})" in added.stdout
    owners = alice.run("owner", "ls", name, cwd=tmp_path).stdout
    assert "alice <alice@example.com>" in owners and "bob <bob@example.com>" in owners
    write_package(source, name, "1.2.0", description="the flow package")
    bob.run("publish", cwd=source)
    assert "1.2.0" in server.packument(name)["versions"]  # type: ignore[index]

    removed = alice.run("owner", "rm", "bob", name, cwd=tmp_path)
    assert f"- bob ({name})" in removed.stdout
    write_package(source, name, "1.3.0", description="the flow package")
    refused = bob.run("publish", cwd=source, check=False)
    assert refused.returncode != 0 and "E403" in refused.stderr and "not a maintainer" in refused.stderr
    assert "1.3.0" not in server.packument(name)["versions"]  # type: ignore[index]
    assert not (server.content / name / f"{name}-1.3.0.tgz").exists()

    alice.run("deprecate", f"{name}@1.0.0", "please use 1.1 or later", cwd=tmp_path)
    assert server.packument(name)["versions"]["1.0.0"]["deprecated"] == "please use 1.1 or later"  # type: ignore[index]
    old_project = _fresh_project(tmp_path / "old-project")
    warned = alice.run("install", f"{name}@1.0.0", cwd=old_project)
    assert "deprecated" in warned.stderr and "please use 1.1 or later" in warned.stderr
    alice.run("deprecate", f"{name}@1.0.0", "", cwd=tmp_path)
    assert "deprecated" not in server.packument(name)["versions"]["1.0.0"]  # type: ignore[index]

    gone = alice.run("unpublish", f"{name}@1.2.0", cwd=tmp_path)
    assert f"- {name}@1.2.0" in gone.stdout
    packument = server.packument(name)
    assert packument is not None and "1.2.0" not in packument["versions"] and "1.2.0" in packument["time"]
    assert not (server.out / name / "-" / f"{name}-1.2.0.tgz").exists()
    assert not (server.content / name / f"{name}-1.2.0.tgz").exists()
    write_package(source, name, "1.2.0", description="the flow package")
    again = alice.run("publish", "--force", cwd=source, check=False)
    assert again.returncode != 0 and "can never be used again" in again.stderr

    alice.run("unpublish", name, "--force", cwd=tmp_path)
    assert not (server.out / name).exists()
    assert not list((server.content / name).glob("*.tgz"))
    missing = alice.run("view", name, cwd=tmp_path, check=False)
    assert missing.returncode != 0 and "E404" in missing.stderr


def test_search_ping_tokens_logout_and_audit(server: RegistryProcess, tmp_path: Path) -> None:
    carol = server.npm("carol", add_user(server.base, "carol", "carol-password-1"))
    source = write_package(tmp_path / "src", "searchable-thing", "0.1.0", description="find me", keywords=["needle"])
    carol.run("publish", cwd=source)

    found = carol.run("search", "needle", cwd=tmp_path).stdout
    assert "searchable-thing" in found
    assert "No matches" in carol.run("search", "no-such-needle-anywhere", cwd=tmp_path).stdout
    assert "PONG" in carol.run("ping", "--loglevel=notice", cwd=tmp_path).stderr

    project = _fresh_project(tmp_path / "project")
    audited = carol.run("install", "searchable-thing", "--audit", cwd=project)
    # No advisory source: the install succeeds, and npm never claims a clean audit (issue 13).
    assert (project / "node_modules" / "searchable-thing").is_dir() and "found 0 vulnerabilities" not in audited.stdout

    created = re.search(r"Created token (\S+)", carol.run("token", "create", "--password=carol-password-1", cwd=tmp_path).stdout)
    assert created is not None
    new_token = created.group(1)
    assert http("GET", f"{server.base}-/whoami", token=new_token).json == {"username": "carol"}
    listed = json.loads(carol.run("token", "list", "--json", cwd=tmp_path).stdout)
    assert len(listed) == 2 and all(new_token != t["token"] for t in listed)  # prefixes only
    key = next(t["key"] for t in listed if new_token.startswith(t["token"]))
    assert "Removed 1 token" in carol.run("token", "revoke", key[:8], cwd=tmp_path).stdout
    assert http("GET", f"{server.base}-/whoami", token=new_token).status == 401
    assert len(json.loads(carol.run("token", "list", "--json", cwd=tmp_path).stdout)) == 1

    configured = carol.userconfig.read_text()
    carol.run("logout", cwd=tmp_path)
    assert not carol.userconfig.exists() or "_authToken" not in carol.userconfig.read_text()
    old_token = configured.split("_authToken=")[1].strip()
    assert http("GET", f"{server.base}-/whoami", token=old_token).status == 401


def test_web_login(server: RegistryProcess, tmp_path: Path) -> None:
    add_user(server.base, "dave", "dave-password-1")
    client = server.npm("dave-web")
    login = subprocess.Popen(
        [NPM, "login", "--auth-type=web", "--browser=false"], cwd=tmp_path, env=client.env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert login.stdout is not None
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = login.stdout.readline()
            if not line:
                break
            found = re.search(r"(http://\S+/-/v1/login/\S+)", line)
            url = found.group(1) if found else None
        assert url is not None, login.stderr.read() if login.stderr else ""
        form = http("GET", url)
        assert form.status == 200 and b'name="password"' in form.body
        browser = {"Content-Type": "application/x-www-form-urlencoded", "Origin": server.base.rstrip("/")}
        assert http("POST", url, raw=b"username=dave&password=dave-password-1",
                    headers={**browser, "Origin": "https://evil.example"}).status == 403  # the form of another site
        wrong = http("POST", url, raw=b"username=dave&password=nope", headers=browser)
        assert wrong.status == 401 and b"Incorrect username or password" in wrong.body
        body = urllib.parse.urlencode({"username": "dave", "password": "dave-password-1"}).encode()
        done = http("POST", url, raw=body, headers=browser)
        assert done.status == 200 and b"logged in as dave" in done.body
        login.wait(timeout=60)
    finally:
        if login.poll() is None:
            login.kill()
            login.wait()
    assert login.returncode == 0
    assert "_authToken" in client.userconfig.read_text()
    assert client.run("whoami", cwd=tmp_path).stdout.strip() == "dave"
    assert http("GET", url).status == 404  # a login link works once




def test_npm_legacy_login_of_a_new_name_signs_up_without_email(server: RegistryProcess, tmp_path: Path) -> None:
    """Issue 16: `npm login --auth-type=legacy` asks no email and sends none; with `signup: open`
    (this server) that is a sign-up, not "incorrect username or password"."""
    client: Npm = server.npm("fern-legacy")
    code, transcript = drive_terminal(
        [NPM, "login", "--auth-type=legacy"], client.env, tmp_path,
        [("Username:", "fern"), ("Password:", "fern-password-1")], deadline=90,
    )
    assert code == 0, transcript
    assert client.run("whoami", cwd=tmp_path).stdout.strip() == "fern"
    token = re.search(r":_authToken=(\S+)", client.userconfig.read_text())
    assert token is not None
    assert "email" not in http("GET", f"{server.base}-/user/org.couchdb.user:fern", token=token.group(1)).json


def test_legacy_login_through_a_terminal(server: RegistryProcess, tmp_path: Path) -> None:
    add_user(server.base, "erin", "erin-password-1")
    client: Npm = server.npm("erin-legacy")
    code, transcript = drive_terminal(
        [NPM, "login", "--auth-type=legacy"], client.env, tmp_path,
        [("Username:", "erin"), ("Password:", "erin-password-1")], deadline=90,
    )
    assert code == 0, transcript
    assert "Logged in" in transcript
    assert client.run("whoami", cwd=tmp_path).stdout.strip() == "erin"
    # A wrong password: npm's message for a Basic challenge.
    client.userconfig.write_text("")
    code, transcript = drive_terminal(
        [NPM, "login", "--auth-type=legacy"], client.env, tmp_path,
        [("Username:", "erin"), ("Password:", "wrong-password")], deadline=90,
    )
    assert code != 0 and "Incorrect or missing password" in transcript
