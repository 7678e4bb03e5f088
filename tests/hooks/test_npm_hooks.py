"""Issue 30, acceptance 1 and 3: npm 10's `npm hook add|ls|update|rm` against a real `serve`, a
publish delivered to a receiver on 127.0.0.1 that verifies the signature, and a hook to loopback
refused unless registry.yaml allows the range."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.hooks.receiver import Receiver
from tests.hosts.clients import CLIENTS, install_client
from tests.registry_api.helpers import RegistryProcess, add_user, http, write_package
from tests.support import Npm

pytestmark = pytest.mark.slow
ALLOW_LOOPBACK = "hooks: {allow_networks: [127.0.0.0/8], retry_base_seconds: 0.2, timeout_seconds: 2}\n"


def serving(root: Path, hooks: str = ALLOW_LOOPBACK) -> RegistryProcess:
    root.mkdir(parents=True)
    (root / "registry.yaml").write_text("signup: open\n" + hooks)
    return RegistryProcess(root).start()


def npm10(server: RegistryProcess, name: str, token: str) -> Npm:
    client = Npm(server.root / "npm-homes" / name, server.base, command=install_client(CLIENTS["npm10"]))
    client.userconfig.write_text(f"{server.base.removeprefix('http:')}:_authToken={token}\n")
    return client


def test_npm10_hook_add_publish_delivers_signed_then_ls_and_rm(tmp_path: Path) -> None:
    receiver = Receiver("a-shared-secret").up()
    server = serving(tmp_path / "registry")
    try:
        npm = npm10(server, "alice", add_user(server.base, "alice", "alice-password-1"))
        source = write_package(tmp_path / "src", "demo-pkg", "1.0.0")
        npm.run("publish", cwd=source)  # the package exists before the hook (a hook watches what its owner may read)
        added = npm.run("hook", "--no-unicode", "add", "demo-pkg", receiver.url, "a-shared-secret", cwd=tmp_path)
        assert f"+ demo-pkg  ->  {receiver.url}" in added.stdout
        assert "Never triggered" in npm.run("hook", "--no-unicode", "ls", cwd=tmp_path).stdout
        write_package(source, "demo-pkg", "1.1.0")
        npm.run("publish", cwd=source)
        replied = time.monotonic()
        [delivery] = receiver.wait_for(1, deadline=10)
        assert time.monotonic() - replied < 2  # within 2 s of the publish's reply
        assert delivery.signed and delivery.event == "package:publish" and delivery.delivery
        body = delivery.body
        assert (body["name"], body["type"], body["version"], body["hookOwner"]) == ("demo-pkg", "package", "1.1.0", {"username": "alice"})
        assert "1.1.0" in body["payload"]["versions"] and body["change"]["version"] == "1.1.0"
        listed = npm.run("hook", "--no-unicode", "ls", cwd=tmp_path).stdout
        assert "You have 1 hook configured." in listed and 'response code was "200"' in listed, listed
        [hook] = http("GET", f"{server.base}-/npm/v1/hooks", token=_token(npm)).json["objects"]
        assert "secret" not in hook  # never shown again
        # npm hook update: a new endpoint and secret; the next event goes there, signed with the new secret.
        moved = Receiver("the-new-secret").up()
        try:
            updated = npm.run("hook", "--no-unicode", "update", hook["id"], moved.url, "the-new-secret", cwd=tmp_path)
            assert f"+ demo-pkg  ->  {moved.url}" in updated.stdout
            npm.run("publish", cwd=write_package(source, "demo-pkg", "1.2.0"))
            [after] = moved.wait_for(1, deadline=10)
            assert after.signed and after.body["version"] == "1.2.0"
            assert [d.body["version"] for d in receiver.received] == ["1.1.0"]  # the old endpoint got nothing more
        finally:
            moved.down()
        removed = npm.run("hook", "--no-unicode", "rm", hook["id"], cwd=tmp_path)
        assert f"- demo-pkg  X  {moved.url}" in removed.stdout
        assert "You don't have any hooks configured yet." in npm.run("hook", "--no-unicode", "ls", cwd=tmp_path).stdout
    finally:
        server.stop()
        receiver.down()


def _token(npm: Npm) -> str:
    return npm.userconfig.read_text().strip().rpartition("=")[2]


def test_a_hook_to_loopback_is_refused_by_default_and_delivered_once_allowed(tmp_path: Path) -> None:
    receiver = Receiver("s3cret-s3cret").up()
    server = serving(tmp_path / "default", hooks="")
    try:
        token = add_user(server.base, "alice", "alice-password-1")
        for url in (receiver.url, f"http://localhost:{receiver.port}/hook", "http://169.254.169.254/latest/meta-data/"):
            reply = http("POST", f"{server.base}-/npm/v1/hooks/hook", token=token,
                         body={"type": "scope", "name": "@team", "endpoint": url, "secret": "s3cret-s3cret"})  # fmt: skip
            assert reply.status == 400 and "allow_networks" in reply.json["error"], (url, reply.json)
        assert http("GET", f"{server.base}-/npm/v1/hooks", token=token).json["total"] == 0
    finally:
        server.stop()
    allowed = serving(tmp_path / "allowed")
    try:
        token = add_user(allowed.base, "alice", "alice-password-1")
        reply = http("POST", f"{allowed.base}-/npm/v1/hooks/hook", token=token,
                     body={"type": "scope", "name": "@team", "endpoint": receiver.url, "secret": "s3cret-s3cret"})  # fmt: skip
        assert reply.status == 201, reply.json
        npm = npm10(allowed, "alice", token)
        npm.run("publish", cwd=write_package(tmp_path / "src", "@team/lib", "1.0.0"))
        [delivery] = receiver.wait_for(1)
        assert delivery.signed and (delivery.body["name"], delivery.body["type"]) == ("@team/lib", "scope")
    finally:
        allowed.stop()
        receiver.down()
